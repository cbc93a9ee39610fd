"""The ``DeltaBus`` of a cluster: PostgreSQL ``LISTEN``/``NOTIFY`` where the read model lives.

Workers and API processes that share ``HITLFLOW_READ_MODEL_URL=postgresql://...``
share the model's text as it is written through one channel, ``hitlflow_text_deltas``:

* a worker's LLM activity publishes: each piece (at most ``PIECE_CHARS`` characters,
  so a notification stays under PostgreSQL's 8000-byte payload limit) and the call's
  end go, in order, from one sending thread over one connection (``pg_notify``);
* an API process listens on one connection (its own thread) and replays what it
  hears into an :class:`~activities.deltas.bus.InProcessDeltaBus`, which its SSE streams
  subscribe to: a late subscriber gets the text so far from there (of the calls
  that started while this process listened).

Deltas are best effort, as the bus promises: a lost connection loses pieces (the
final ``text`` event is in the log regardless), and both sides reconnect.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator
from typing import Any

from activities.deltas.bus import InProcessDeltaBus, TextDelta
from activities.deltas.wire import apply_wire, wire_end, wire_messages
from activities.urls import redact

__all__ = ["CHANNEL", "PIECE_CHARS", "PostgresDeltaBus"]

CHANNEL = "hitlflow_text_deltas"
#: JSON with ``ensure_ascii`` is at most 6 bytes a character: 6000 < 8000.
PIECE_CHARS = 1000
#: Messages a worker may have waiting to be sent; past that, pieces are dropped.
QUEUE_MESSAGES = 10_000
RECONNECT_S = 1.0

log = logging.getLogger("hitlflow.deltas")


class PostgresDeltaBus:
    """A :class:`~activities.deltas.bus.DeltaBus` over PostgreSQL ``NOTIFY``; thread-safe.
    Threads start on first use (publishing, or :meth:`listen`); :meth:`close` ends them."""

    def __init__(self, url: str, *, connect_timeout_s: int = 10) -> None:
        self.url, self._timeout = url, connect_timeout_s
        self.local = InProcessDeltaBus()  # what this process heard
        #: Set once this process listens (deltas published before are not heard).
        self.listening = threading.Event()
        self._out: queue.Queue[dict[str, Any]] = queue.Queue(QUEUE_MESSAGES)
        self._stop = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    # -- the worker's side --------------------------------------------------------------

    def publish(self, session_id: str, call_id: str, delta: str, *, first: bool = False
                ) -> None:
        for message in wire_messages(session_id, call_id, delta, first, PIECE_CHARS):
            self._send(message)

    def finish(self, session_id: str, call_id: str) -> None:
        self._send(wire_end(session_id, call_id))

    def _send(self, message: dict[str, Any]) -> None:
        self._start("sender", self._send_loop)
        with contextlib.suppress(queue.Full):  # the database is gone: best effort
            self._out.put_nowait(message)

    def _send_loop(self) -> None:
        conn = None
        while not (self._stop.is_set() and self._out.empty()):
            try:
                message = self._out.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                conn = conn or self._connect()
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(message)))
            except Exception as err:  # psycopg.Error, OSError: this piece is lost
                log.warning("text deltas cannot be sent to %s: %s", self._where(), err)
                conn = self._close(conn)
                if self._stop.wait(RECONNECT_S):
                    break  # closing: the rest is dropped
        self._close(conn)

    # -- the API's side -----------------------------------------------------------------

    def listen(self) -> None:
        """Start listening (idempotent); ``listening`` is set once it does."""
        self._start("listener", self._listen_loop)

    def subscribe(self, session_id: str) -> AsyncIterator[TextDelta]:
        self.listen()
        return self.local.subscribe(session_id)

    def _listen_loop(self) -> None:
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                conn.execute(f"LISTEN {CHANNEL}")
                self.listening.set()
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=0.5):
                        self._heard(note.payload)
            except Exception as err:  # psycopg.Error, OSError: listen again
                log.warning("text deltas cannot be heard from %s: %s", self._where(), err)
                self.listening.clear()
                self._stop.wait(RECONNECT_S)
            finally:
                self._close(conn)

    def _heard(self, payload: str) -> None:
        try:
            apply_wire(self.local, json.loads(payload))
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # not ours
            log.warning("a notification on %s that is not a delta: %s", CHANNEL, err)

    # -- both ---------------------------------------------------------------------------

    def _start(self, name: str, target: Any) -> None:
        with self._lock:
            if name not in self._threads and not self._stop.is_set():
                thread = threading.Thread(target=target, name=f"deltas-{name}", daemon=True)
                self._threads[name] = thread
                thread.start()

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, autocommit=True, connect_timeout=self._timeout)

    @staticmethod
    def _close(conn: Any) -> None:
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken
                conn.close()

    def _where(self) -> str:
        return redact(self.url)

    def close(self) -> None:
        """Stop sending (what is queued is sent first, for a moment) and listening."""
        with self._lock:
            self._stop.set()
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout=5)
