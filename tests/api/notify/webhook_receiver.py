"""A real webhook receiver for the notifier's tests: an HTTP server on 127.0.0.1 (a
thread of the test process) that verifies each request with the ``standardwebhooks``
package's own verifier and records it; it answers as told (``ok``, ``500``, ``429``,
``400``, ``garbage``: bytes that are not HTTP), and can go down and come back on the
same port."""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook

SECRET = "whsec_" + base64.b64encode(b"a test secret of the notifier, 32b").decode()


@dataclass
class Received:
    webhook_id: str
    body: bytes
    headers: dict[str, str]
    payload: Any  # what the verifier returned (None when it refused)
    error: str | None = None


@dataclass
class Receiver:
    secret: str = SECRET
    mode: str = "ok"
    delay_s: float = 0.0  # a slow receiver: answers this long after reading a request
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._arrived = threading.Condition(self._lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook?token=url-secret-token"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                mode = receiver.mode
                if mode == "garbage":
                    self.wfile.write(b"\x00\x01 this is not HTTP at all\r\n\r\n")
                    self.close_connection = True
                    return
                try:
                    payload, error = Webhook(receiver.secret).verify(body, headers), None
                except Exception as err:  # the verifier refused it
                    payload, error = None, f"{type(err).__name__}: {err}"
                with receiver._arrived:
                    receiver.received.append(Received(headers.get("webhook-id", ""), body,
                                                      headers, payload, error))
                    receiver._arrived.notify_all()
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)  # a slow receiver, not a synchronisation
                status = {"ok": 200, "500": 500, "429": 429, "400": 400}[mode]
                if error is not None:
                    status = 401
                out = json.dumps({"ok": status == 200}).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:  # the notifier was killed while it waited for the answer
                    self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def ids(self) -> list[str]:
        with self._lock:
            return [r.webhook_id for r in self.received if r.error is None]

    def wait_for(self, check, timeout_s: float = 60) -> bool:
        """Block (a thread) until ``check(received)`` holds; False at the timeout."""
        with self._arrived:
            return self._arrived.wait_for(lambda: check(self.received), timeout_s)
