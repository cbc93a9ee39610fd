"""The dev server's Web UI behind a ``Host`` check.

Temporal's UI server does not check the ``Host`` header and hands its CSRF cookie to
JavaScript, so a web page that rebinds its own DNS name to 127.0.0.1 is same-origin with
the UI to the browser: it could read the cookie and start workflows through the UI's
API. ``start-dev`` has no setting to refuse foreign hosts. So the dev server's UI listens
on an internal 127.0.0.1 port, and the UI's address (``--ui-port``) is served by this
reverse proxy: every request (each one on a connection, not just the first) whose
``Host`` is not local (:func:`local_host`) is refused with 400 before it reaches the UI;
everything else is forwarded unchanged (method, path, headers, body) and the answer
streamed back as it comes (status, headers, body, however long it runs).

``DevServer`` (api/runtime/devserver.py) starts and stops it with the server
(docs/security.md, "Temporal's own doors"; tests/security/test_temporal_doors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import anyio
import httpx
import uvicorn

from api.hosts import is_local
from api.runtime.devserver_setup import PortInUseError

#: Names a request to the UI may carry in its ``Host`` header, with any port or none.
#: What the proxy answers a request whose ``Host`` is not local.
REFUSED = b"Host not allowed: the Temporal Web UI answers only localhost, 127.0.0.1 and [::1]\n"

#: Headers that describe one connection, not the message: never forwarded either way.
_HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
    b"trailer", b"trailers", b"transfer-encoding", b"upgrade", b"proxy-connection",
})

Headers = list[tuple[bytes, bytes]]


async def ui_answers(upstream: str) -> BaseException | None:
    """None once Temporal's UI server at ``upstream`` answers an API call that needs its
    gRPC connection to the frontend; else why not."""
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            resp = await client.get(f"{upstream}/api/v1/namespaces")
    except httpx.HTTPError as e:
        return ConnectionError(f"the Web UI at {upstream}: {e!r}")
    if resp.status_code != 200:
        return ConnectionError(f"the Web UI at {upstream} answered {resp.status_code}")
    return None


def _forwarded(headers: Headers) -> Headers:
    """The headers without those that describe one hop (and those ``Connection`` names)."""
    named = {t.strip().lower() for k, v in headers if k.lower() == b"connection"
             for t in v.split(b",")}
    return [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP | named]


class UiProxy:
    """The ASGI app: the ``Host`` check, then the request forwarded to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = httpx.URL(upstream)
        # No environment proxies (HTTP_PROXY must not see the UI's traffic), no waiting
        # limit on an answer (the UI may hold one open), and no cookie jar: the cookies
        # are the browser's, never kept here.
        self.client = httpx.AsyncClient(
            trust_env=False, timeout=httpx.Timeout(None, connect=10.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan is off and websockets are not served
            return
        hosts = [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"host"]
        if len(hosts) != 1 or not is_local(hosts[0]):
            await _answer(send, 400, REFUSED)
            return
        await self._forward(scope, receive, send)

    async def _forward(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = _forwarded(list(scope["headers"]))
        target = scope.get("raw_path") or scope["path"].encode()
        if scope["query_string"]:
            target += b"?" + scope["query_string"]
        has_body = any(k.lower() in (b"content-length", b"transfer-encoding")
                       for k, _ in scope["headers"])
        request = httpx.Request(scope["method"], self.upstream.copy_with(raw_path=target),
                                headers=headers, content=_body(receive) if has_body else None)
        try:
            response = await self.client.send(request, stream=True)
        except _ClientGone:
            return
        except httpx.HTTPError as e:
            await _answer(send, 502, f"the Temporal Web UI did not answer: {e}\n".encode())
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": _forwarded(response.headers.raw)})
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                tg.cancel_scope.cancel()
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()


class _ClientGone(Exception):
    """The browser went away while its request body was being forwarded."""


async def _body(receive: Any) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body"):
            return


async def _cancel_on_disconnect(receive: Any, scope: anyio.CancelScope) -> None:
    """A long answer stops being read from the UI once the browser went away."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _answer(send: Any, status: int, text: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the caller owns SIGINT/SIGTERM (`hitlflow up`, tests)


class UiProxyServer:
    """:class:`UiProxy` served by uvicorn on ``ip:port``, in the running event loop."""

    def __init__(self, ip: str, port: int, upstream: str) -> None:
        self.ip, self.port = ip, port
        self.app = UiProxy(upstream)
        self._server = _Server(uvicorn.Config(
            self.app, lifespan="off", ws="none", log_config=None, access_log=False,
            proxy_headers=False, server_header=False, date_header=False,
            timeout_graceful_shutdown=5))
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen on ip:port and serve (PortInUseError when it cannot listen)."""
        sock = socket.socket(socket.AF_INET6 if ":" in self.ip else socket.AF_INET,
                             socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.ip, self.port))
            sock.listen(512)
        except OSError as e:
            sock.close()
            raise PortInUseError(f"the Temporal UI cannot listen on {self.ip}:{self.port}: {e}"
                                 ) from None
        # Connections wait in the socket's backlog until uvicorn accepts them.
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="ui-proxy")

    async def stop(self) -> None:
        """Stop serving (open answers get a few seconds). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await task
        await self.app.aclose()
