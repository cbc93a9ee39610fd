"""Server-sent events: the wire format and the server's stream (the command line's
parser is ``api.cli.sse_client``; the names both use, ``api.sse_names``).

The server side turns a provider's async iterator of events into SSE frames:
each event carries ``id: <seq>`` (what ``Last-Event-ID`` resumes from), its type
as ``event:`` and its payload as one line of JSON; a comment line goes out every
``keepalive_s`` while nothing happens. Event types are passed through as the
provider names them, so a new type reaches clients without a change here, and
clients that do not know it ignore it (seed 000).

Deltas (``text.delta``: the model's text while it is written, from the worker's
``DeltaBus``) are merged in without an ``id:`` line: they are not in the log, and a
resume (``Last-Event-ID``) never counts them. A call's deltas wait until the stream
has sent every log line from before the call was scheduled (the provider's
``llm_call.scheduled`` marker: the log trails the history a little, the deltas do
not, and what the agent says must not run ahead of what happened before it), and
stop once its final ``text`` event went out (``DeltaGate``).

When the provider ends (the session ended and every event went out), a last
``stream.complete`` event says so: a client closes its ``EventSource`` on it. One
that does not reconnects with the id it carries and gets a 204, on which a
standard ``EventSource`` stops for good (``api.http.routers.events``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel
from temporalio.client import Client

from activities.deltas import LLM_CALL_SCHEDULED, TextDelta
from api.sse_names import STREAM_COMPLETE, TEXT_DELTA
from observation import event_types as ev

if TYPE_CHECKING:  # the exporter is imported on first use (api.http.routers.events)
    from observation.exporter.model import StreamHead

PING = b": keep-alive\n\n"

#: Seed 000's names that SHALL keep working, sent alongside the new ones (the log
#: keeps one event; the stream adds the old name): ``ecs`` repeats each
#: ``interaction.requested`` (same payload, same ``id``, right after it, in the same
#: write), so resuming after that id continues after both. ``emotion`` is reserved
#: and not produced; ``text`` and ``tool_result`` go out under their own names.
ALIASES: dict[str, tuple[str, ...]] = {ev.INTERACTION_REQUESTED: ("ecs",)}


@dataclass(frozen=True)
class StreamEvent:
    """One event of a session's stream; ``seq`` grows by one per event, from 1."""

    seq: int
    event: str
    data: Any = field(default_factory=dict)


#: ``session_events(client, session_id, after_seq)``: the events of one session with
#: ``seq > after_seq`` (all of them for None), in order, live; the iterator ends when
#: the session has ended and every event was yielded.
EventProvider = Callable[[Client, str, int | None], AsyncIterator[Any]]

#: ``stream_head(client, session_id)``: how far a session's stream goes now (its ids'
#: meaning must be the provider's); what ``Last-Event-ID`` is checked against.
HeadProvider = Callable[[Client, str], Awaitable["StreamHead"]]


def _json_ready(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def coerce(mapped: Any) -> StreamEvent:
    """A provider's event as a :class:`StreamEvent`.

    The adapter between the exporter's events and the wire: it takes any object with a
    ``seq`` and a type (``event``, ``type`` or ``kind``) and a payload (``data`` or
    ``payload``), dicts (the log's lines, as ``hitlflow up``'s feed gives them),
    pydantic models or plain objects alike.
    """
    if isinstance(mapped, StreamEvent):
        return mapped
    if isinstance(mapped, dict):
        seq = mapped.get("seq")
        kind = mapped.get("event") or mapped.get("type") or mapped.get("kind")
        data = mapped.get("data")
        if data is None:
            data = mapped.get("payload")
    else:
        seq = getattr(mapped, "seq", None)
        kind = getattr(mapped, "event", None) or getattr(mapped, "type", None) or getattr(
            mapped, "kind", None)
        data = getattr(mapped, "data", None)
        if data is None:
            data = getattr(mapped, "payload", None)
    if not isinstance(seq, int) or not kind:
        raise ValueError(f"not a stream event (needs an int seq and a type): {mapped!r}")
    return StreamEvent(seq=seq, event=str(getattr(kind, "value", kind)),
                       data={} if data is None else _json_ready(data))


#: orjson writes these to ``default`` (which refuses them) instead of its own way, so
#: they take the reference path: datetimes, dataclasses, subclasses of str, int, dict
#: and list (an ``Enum`` of str, say), whose ``json.dumps`` bytes orjson does not make.
_ORJSON_OPTS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | \
    orjson.OPT_PASSTHROUGH_SUBCLASS
#: What ``json.dumps`` escapes that orjson writes as it is: beyond ASCII, and DEL.
_ESCAPED = re.compile(r"[^\x00-\x7e]")


def _refuse(value: Any) -> Any:
    raise TypeError


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xd800 | code >> 10:04x}\\u{0xdc00 | code & 0x3ff:04x}"


def _reference_json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), default=str).encode()


def event_json(data: Any) -> bytes:
    """An event's payload as one line of ASCII JSON (whatever the text: clients that
    split lines on U+2028 too): the value ``json.dumps`` writes for it.

    ``orjson`` writes it when the payload holds only JSON's own types (dicts with str
    keys, lists, str, int within 64 bits, float, bool, None: what a log line read back
    holds, and a model dumped as JSON), with what ``json.dumps`` escapes (beyond ASCII,
    DEL) escaped as it does: the same bytes, except a float's exponent (``1e-05``
    against orjson's ``0.00001``: the same number). Anything else (other types, bigger
    integers, lone surrogates, NaN and the infinities, which orjson writes as null)
    takes ``json.dumps`` itself; an ``Enum`` that is not a str or an int goes out as
    its value (``json.dumps`` would write its ``str``). Held to ``json.dumps`` over
    generated values by ``tests/api/http/test_sse_frames.py``."""
    try:
        out = orjson.dumps(data, default=_refuse, option=_ORJSON_OPTS)
    except (TypeError, orjson.JSONEncodeError):
        return _reference_json(data)
    if b"null" in out and _has_nonfinite(data):
        return _reference_json(data)
    if out.isascii() and b"\x7f" not in out:
        return out
    return _ESCAPED.sub(_escape, out.decode()).encode()


def _has_nonfinite(value: Any) -> bool:
    """Whether a JSON-typed value holds NaN or an infinity (orjson writes null)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False


def frame(event: StreamEvent, *, with_id: bool = True) -> bytes:
    name = " ".join(event.event.split())
    head = f"id: {event.seq}\nevent: {name}\ndata: " if with_id else \
        f"event: {name}\ndata: "
    return b"".join((head.encode(), event_json(event.data), b"\n\n"))


def complete_frame(last_id: int) -> bytes:
    return frame(StreamEvent(seq=last_id, event=STREAM_COMPLETE, data={"last_id": last_id}))


class DeltaGate:
    """Which ``text.delta`` pieces go out, and when.

    A call's pieces are held (put together into one snapshot) until the provider's
    marker that the call was scheduled (``llm_call.scheduled``) came through this
    stream, after the log lines before it; then sent as they come; after the call's
    ``text`` event they are dropped."""

    MAX_HELD = 8  # calls held at once (attempts that failed leave theirs behind)

    def __init__(self) -> None:
        self.started: set[str] = set()
        self.said: set[str] = set()
        self.held: dict[str, TextDelta] = {}

    def piece(self, piece: TextDelta) -> TextDelta | None:
        """What to send for a piece from the bus now (or nothing)."""
        call_id = piece.call_id
        if call_id in self.said:
            return None
        if call_id in self.started:
            return piece
        prior = self.held.pop(call_id, None)
        so_far = (prior.text or "") if prior is not None else ""
        text = piece.text if piece.text is not None else so_far + piece.delta
        self.held[call_id] = TextDelta(call_id=call_id, delta="", text=text)
        while len(self.held) > self.MAX_HELD:
            self.held.pop(next(iter(self.held)))
        return None

    def sent(self, item: StreamEvent) -> TextDelta | None:
        """After an item of the provider went out (or, a marker, was taken): the held
        text of the call it lets through, if any."""
        call_id = item.data.get("call_id") if isinstance(item.data, dict) else None
        if not isinstance(call_id, str):
            return None
        if item.event == LLM_CALL_SCHEDULED:
            if call_id not in self.said:
                self.started.add(call_id)
            return self.held.pop(call_id, None)
        if item.event == ev.TEXT:
            self.said.add(call_id)
            self.held.pop(call_id, None)
        return None


def delta_frame(delta: Any) -> bytes:
    """A ``text.delta`` event (a ``TextDelta``'s payload), without an id."""
    return frame(StreamEvent(seq=0, event=TEXT_DELTA, data=delta.payload()), with_id=False)


#: What the stream's inbox holds: a provider's item, a delta, the provider's end or
#: failure, a keep-alive, the server stopping.
_EVENT, _DELTA, _ENDED, _FAILED, _PING, _STOP = range(6)
#: Items the inbox holds before the provider waits for the stream to take them (the
#: stream is as slow as its client: what it has not sent is not read further).
INBOX_ITEMS = 256


class _Inbox:
    """What the stream's sources handed over, taken all at once: whatever came
    together goes out in one write."""

    def __init__(self) -> None:
        self.items: list[tuple[int, Any]] = []
        self._waiter: asyncio.Future[None] | None = None
        self._room = asyncio.Event()
        self._room.set()

    def push(self, kind: int, value: Any = None) -> None:
        self.items.append((kind, value))
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def put(self, kind: int, value: Any) -> None:
        while len(self.items) >= INBOX_ITEMS:
            self._room.clear()
            await self._room.wait()
        self.push(kind, value)

    async def take(self) -> list[tuple[int, Any]]:
        while not self.items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items, self.items = self.items, []
        self._room.set()
        return items


async def _pump(source: AsyncIterator[Any], inbox: _Inbox, kind: int) -> None:
    """Hand ``source``'s items to ``inbox``; then its end (or its failure)."""
    try:
        async for item in source:
            await inbox.put(kind, item)
    except Exception as err:
        inbox.push(_FAILED if kind == _EVENT else _ENDED, (kind, err))
    else:
        inbox.push(_ENDED, (kind, None))


async def sse_stream(
    events: AsyncIterator[Any], *, keepalive_s: float, retry_ms: int,
    stopping: asyncio.Event | None = None, after_seq: int | None = None,
    deltas: AsyncIterator[Any] | None = None,
) -> AsyncIterator[bytes]:
    """SSE frames for ``events`` (those after ``after_seq``), with keep-alive
    comments while it is quiet, and ``deltas`` (``TextDelta``s) merged in until
    their call's ``text`` event.

    Ends with a ``stream.complete`` event when the provider ends; without one when
    ``stopping`` is set (the server shuts down: clients reconnect), or after one
    ``error`` event if the provider fails mid-stream.

    Each source is read by a task of its own into one inbox; what came meanwhile goes
    out in one write (a batch of log lines the exporter committed together is one
    chunk on the wire), in the order it came.
    """
    loop = asyncio.get_running_loop()
    inbox = _Inbox()
    pumps = [asyncio.ensure_future(_pump(events, inbox, _EVENT))]
    if deltas is not None:
        pumps.append(asyncio.ensure_future(_pump(deltas, inbox, _DELTA)))
    stop_task = None
    if stopping is not None:
        stop_task = asyncio.ensure_future(stopping.wait())
        stop_task.add_done_callback(lambda _t: inbox.push(_STOP))
    last_sent = loop.time()
    timer: asyncio.TimerHandle | None = None

    def tick() -> None:  # a keep-alive once nothing went out for keepalive_s
        nonlocal timer
        quiet = loop.time() - last_sent
        if quiet >= keepalive_s:
            inbox.push(_PING)
            quiet = 0.0
        timer = loop.call_later(keepalive_s - quiet, tick)

    timer = loop.call_later(keepalive_s, tick)
    gate = DeltaGate()
    last_id = after_seq or 0
    try:
        yield f"retry: {retry_ms}\n\n".encode()
        while True:
            out: list[bytes] = []
            pinged = False
            for kind, value in await inbox.take():
                if kind == _EVENT:
                    try:
                        item = coerce(value)
                    except Exception as err:
                        out.append(_error_frame(err))
                        break
                    held = gate.sent(item)
                    if item.event == LLM_CALL_SCHEDULED:  # a marker, not an event to send
                        if held is not None:
                            out.append(delta_frame(held))
                        continue
                    last_id = item.seq
                    out.append(frame(item))
                    out.extend(frame(StreamEvent(seq=item.seq, event=alias, data=item.data))
                               for alias in ALIASES.get(item.event, ()))
                    if held is not None:
                        out.append(delta_frame(held))
                elif kind == _DELTA:
                    if (piece := gate.piece(value)) is not None:
                        out.append(delta_frame(piece))
                elif kind == _ENDED:
                    if value[0] == _EVENT:
                        out.append(complete_frame(last_id))
                        break
                    # the deltas ended or failed: the stream goes on without them
                elif kind == _FAILED:
                    out.append(_error_frame(value[1]))
                    break
                elif kind == _PING:
                    pinged = True
                elif kind == _STOP:
                    break
            else:
                if out:
                    last_sent = loop.time()
                    yield b"".join(out)
                elif pinged:
                    last_sent = loop.time()
                    yield PING
                continue
            if out:  # the provider ended or failed, or the server stops
                yield b"".join(out)
            return
    finally:
        if timer is not None:
            timer.cancel()
        for task in (*pumps, stop_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        for source in (events, deltas):
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


def _error_frame(err: BaseException) -> bytes:
    return frame(StreamEvent(seq=0, event="error", data={
        "error": {"code": "stream_failed", "message": f"{type(err).__name__}: {err}"}
    }), with_id=False)
