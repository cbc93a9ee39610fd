"""The ``DeltaBus`` between ``hitlflow up`` and its worker process: JSON lines on a pipe.

``up`` runs its session worker in a child process (so the worker's CPU and heap stay
out of the API's event loop). The child's LLM activity publishes into a
:class:`PipeDeltaBus`, which writes one JSON line per piece
(``activities.deltas.wire.wire_messages``, the messages PostgreSQL's bus sends too) to a
pipe from one sending thread; ``up`` reads the pipe (:func:`replay_line`) into the
:class:`~activities.deltas.bus.InProcessDeltaBus` its SSE streams subscribe to.

Best effort, as the bus promises, but never garbled: when the pipe is full
(``up`` busy) a piece is dropped and the call's next piece goes as a snapshot
(the whole text so far), so a watcher's text is whole again at once.
The same pipe carries the worker's one ``ready`` line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from activities.deltas.bus import InProcessDeltaBus
from activities.deltas.wire import apply_wire, wire_end, wire_messages

__all__ = ["PIECE_CHARS", "PipeDeltaBus", "replay_line"]

#: A line stays well under the reader's line limit.
PIECE_CHARS = 16_000
#: Deltas the worker may have waiting to be written; past that, they are dropped.
QUEUE_LINES = 10_000

log = logging.getLogger("hitlflow.deltas")


class PipeDeltaBus:
    """The worker's side: a :class:`~activities.deltas.bus.DeltaBus` writing to file
    descriptor ``fd`` (thread-safe; never blocks the caller). :meth:`close` flushes."""

    def __init__(self, fd: int, *, queue_lines: int = QUEUE_LINES) -> None:
        self._fd = fd
        self._out: queue.Queue[bytes | None] = queue.Queue(queue_lines)
        self._lock = threading.Lock()
        self._texts: dict[tuple[str, str], str] = {}  # (session, call) -> text so far
        self._lagged: set[tuple[str, str]] = set()  # calls that lost a piece
        self._broken = False
        self._thread = threading.Thread(target=self._write_loop, name="deltas-pipe",
                                        daemon=True)
        self._thread.start()

    def publish(self, session_id: str, call_id: str, delta: str, *, first: bool = False
                ) -> None:
        key = (session_id, call_id)
        with self._lock:
            text = self._texts[key] = ("" if first else self._texts.get(key, "")) + delta
            if key in self._lagged:  # resend it whole: the reader's copy has a hole
                first, delta = True, text
            if self._put(*wire_messages(session_id, call_id, delta, first, PIECE_CHARS)):
                self._lagged.discard(key)
            else:
                self._lagged.add(key)

    def finish(self, session_id: str, call_id: str) -> None:
        with self._lock:
            self._texts.pop((session_id, call_id), None)
            self._lagged.discard((session_id, call_id))
            self._put(wire_end(session_id, call_id))

    def ready(self, identity: str) -> None:
        """The worker polls: ``up`` may say it is up."""
        self._put({"ready": identity})

    def subscribe(self, session_id: str) -> Any:  # pragma: no cover - the worker's side
        raise NotImplementedError("a PipeDeltaBus only publishes; up's side reads the pipe")

    def _put(self, *messages: dict[str, Any]) -> bool:
        """Queue ``messages`` as one item (all of them or none)."""
        if self._broken:
            return False
        try:
            self._out.put_nowait("".join(json.dumps(m) + "\n" for m in messages).encode())
        except queue.Full:
            return False
        return True

    def _write_loop(self) -> None:
        while (line := self._out.get()) is not None:
            try:
                view = memoryview(line)
                while view and not self._broken:
                    view = view[os.write(self._fd, view):]
            except OSError as err:  # up is gone: nobody reads any more
                log.warning("text deltas cannot be written to up: %s", err)
                self._broken = True
            finally:
                self._out.task_done()

    def flush(self) -> None:
        """Wait until what is queued is written (or the pipe broke)."""
        self._out.join()

    def close(self) -> None:
        """Write what is queued (for a moment), then close the pipe."""
        with contextlib.suppress(queue.Full):
            self._out.put(None, timeout=5)
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def replay_line(line: bytes, bus: InProcessDeltaBus,
                on_ready: Callable[[str], None] | None = None) -> None:
    """``up``'s side: apply one line of the worker's pipe to ``bus``."""
    try:
        m = json.loads(line)
        if "ready" in m:
            if on_ready is not None:
                on_ready(str(m["ready"]))
        else:
            apply_wire(bus, m)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("a line from the worker's pipe that is not a delta: %s", err)
