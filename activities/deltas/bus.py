"""The delta bus's interface (``DeltaBus``, ``TextDelta``) and its in-process and null
implementations; what ``activities.deltas`` exports."""


from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["LLM_CALL_SCHEDULED", "QUEUE_DELTAS", "DeltaBus", "InProcessDeltaBus",
           "NullDeltaBus", "TextDelta", "call_scheduled", "split_text"]

#: Deltas a subscriber may have queued; past that it gets one snapshot instead.
QUEUE_DELTAS = 1024


@dataclass(frozen=True)
class TextDelta:
    """One piece of a call's text. With ``text`` set it is a snapshot: the whole text
    so far (``delta`` is its last piece, or ""), which replaces what a client has
    for ``call_id`` (a late subscriber's start, or a new attempt's first piece)."""

    call_id: str
    delta: str
    text: str | None = None

    def payload(self) -> dict[str, Any]:
        """The ``text.delta`` SSE event's data."""
        data: dict[str, Any] = {"call_id": self.call_id, "delta": self.delta}
        if self.text is not None:
            data["text"] = self.text
        return data


#: Not a line of the log: a stream's marker that an LLM call was scheduled after the
#: lines before it, so the call's streamed text may go out from there
#: (``api.http.sse.DeltaGate``). Its ``seq`` is 0: it is never sent and moves no resume point.
LLM_CALL_SCHEDULED = "llm_call.scheduled"


def call_scheduled(call_id: str) -> dict[str, Any]:
    return {"seq": 0, "type": LLM_CALL_SCHEDULED, "payload": {"call_id": call_id}}


class DeltaBus(Protocol):
    """Where the LLM activity's text goes while it is written."""

    def publish(self, session_id: str, call_id: str, delta: str, *, first: bool = False
                ) -> None:
        """A piece of text of ``call_id``; ``first``: the attempt's first (what was
        published before for the call is dropped)."""

    def finish(self, session_id: str, call_id: str) -> None:
        """The call ended (answered or failed): nothing more comes for it."""

    def subscribe(self, session_id: str) -> AsyncIterator[TextDelta]:
        """The session's calls being written now (snapshots), then every new piece,
        live, until the iterator is closed."""


class NullDeltaBus:
    """Nobody listens (a worker without a bus): publishing costs nothing."""

    def publish(self, session_id: str, call_id: str, delta: str, *, first: bool = False
                ) -> None:
        pass

    def finish(self, session_id: str, call_id: str) -> None:
        pass

    async def subscribe(self, session_id: str) -> AsyncIterator[TextDelta]:
        await asyncio.Event().wait()  # never anything
        yield  # pragma: no cover


class _Subscriber:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[TextDelta] = asyncio.Queue(QUEUE_DELTAS)
        self.lagged: set[str] = set()  # calls whose deltas overflowed: resend whole

    def put(self, item: TextDelta) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.lagged.add(item.call_id)


class InProcessDeltaBus:
    """Worker and API in one process (``hitlflow up``). Thread-safe: an activity may
    publish from any thread; each subscriber gets its items on its own event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: dict[str, dict[str, str]] = {}  # session -> call -> text so far
        self._subscribers: dict[str, set[_Subscriber]] = {}

    def publish(self, session_id: str, call_id: str, delta: str, *, first: bool = False
                ) -> None:
        with self._lock:
            calls = self._texts.setdefault(session_id, {})
            text = calls[call_id] = ("" if first else calls.get(call_id, "")) + delta
            item = TextDelta(call_id, delta, text if first else None)
            subs = list(self._subscribers.get(session_id, ()))
        for sub in subs:
            sub.loop.call_soon_threadsafe(self._deliver, sub, session_id, item)

    def _deliver(self, sub: _Subscriber, session_id: str, item: TextDelta) -> None:
        if item.call_id in sub.lagged:
            with self._lock:
                text = self._texts.get(session_id, {}).get(item.call_id)
            if text is None or sub.queue.full():
                return
            sub.lagged.discard(item.call_id)
            item = TextDelta(item.call_id, "", text)
        sub.put(item)

    def finish(self, session_id: str, call_id: str) -> None:
        with self._lock:
            calls = self._texts.get(session_id, {})
            calls.pop(call_id, None)
            if not calls:
                self._texts.pop(session_id, None)

    def writing(self, session_id: str) -> dict[str, str]:
        """The session's calls being written now: their text so far."""
        with self._lock:
            return dict(self._texts.get(session_id, {}))

    async def subscribe(self, session_id: str) -> AsyncIterator[TextDelta]:
        sub = _Subscriber(asyncio.get_running_loop())
        with self._lock:
            self._subscribers.setdefault(session_id, set()).add(sub)
            snapshot = dict(self._texts.get(session_id, {}))
        try:
            for call_id, text in snapshot.items():
                yield TextDelta(call_id, "", text)
            while True:
                yield await sub.queue.get()
        finally:
            with self._lock:
                subs = self._subscribers.get(session_id)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subscribers[session_id]


def split_text(text: str, pieces: int = 4) -> list[str]:
    """``text`` in at most ``pieces`` parts cut after whitespace (the scripted
    provider's stream): joined, they are ``text``."""
    words = text.split(" ")
    if len(words) < 2:
        return [text] if text else []
    size = -(-len(words) // pieces)
    groups = [words[i:i + size] for i in range(0, len(words), size)]
    return [" ".join(g) + (" " if i < len(groups) - 1 else "") for i, g in enumerate(groups)]
