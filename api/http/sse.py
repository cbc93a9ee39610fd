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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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

    The adapter between the exporter's ``MappedEvent`` and the wire: it takes any
    object with a ``seq`` and a type (``event``, ``type`` or ``kind``) and a payload
    (``data`` or ``payload``), pydantic models or plain objects alike.
    """
    if isinstance(mapped, StreamEvent):
        return mapped
    get = mapped.get if isinstance(mapped, dict) else (lambda k: getattr(mapped, k, None))
    seq = get("seq")
    kind = next((v for v in (get("event"), get("type"), get("kind")) if v), None)
    data = next((v for v in (get("data"), get("payload")) if v is not None), {})
    if not isinstance(seq, int) or not kind:
        raise ValueError(f"not a stream event (needs an int seq and a type): {mapped!r}")
    return StreamEvent(seq=seq, event=str(getattr(kind, "value", kind)), data=_json_ready(data))


def frame(event: StreamEvent, *, with_id: bool = True) -> bytes:
    # ASCII JSON: one line, whatever the text (clients that split on U+2028 too).
    data = json.dumps(event.data, separators=(",", ":"), default=str)
    name = " ".join(event.event.split())
    head = f"id: {event.seq}\n" if with_id else ""
    return f"{head}event: {name}\ndata: {data}\n\n".encode()


async def _next(it: AsyncIterator[Any]) -> Any:
    return await it.__anext__()


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
    """
    stop_task = asyncio.ensure_future((stopping or asyncio.Event()).wait())
    pending: asyncio.Future[Any] | None = None
    delta: asyncio.Future[Any] | None = None
    gate = DeltaGate()
    last_id = after_seq or 0
    try:
        yield f"retry: {retry_ms}\n\n".encode()
        while True:
            if pending is None:
                pending = asyncio.ensure_future(_next(events))
            if delta is None and deltas is not None:
                delta = asyncio.ensure_future(_next(deltas))
            done, _ = await asyncio.wait({pending, stop_task} | ({delta} if delta else set()),
                                         timeout=keepalive_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if stop_task in done:
                return
            if delta is not None and delta in done:  # first: deltas precede their text
                task, delta = delta, None
                try:
                    piece = task.result()
                except Exception:  # StopAsyncIteration too: the stream goes on without
                    deltas = None
                else:
                    if (out := gate.piece(piece)) is not None:
                        yield delta_frame(out)
                if pending not in done:
                    continue
            if pending not in done:
                yield PING
                continue
            task, pending = pending, None
            try:
                item = coerce(task.result())
            except StopAsyncIteration:
                yield complete_frame(last_id)
                return
            except Exception as err:
                yield frame(StreamEvent(seq=0, event="error", data={
                    "error": {"code": "stream_failed", "message": f"{type(err).__name__}: {err}"}
                }), with_id=False)
                return
            held = gate.sent(item)
            if item.event == LLM_CALL_SCHEDULED:  # a marker, not an event to send
                if held is not None:
                    yield delta_frame(held)
                continue
            last_id = item.seq
            yield b"".join([frame(item), *(
                frame(StreamEvent(seq=item.seq, event=alias, data=item.data))
                for alias in ALIASES.get(item.event, ())),
                *([delta_frame(held)] if held is not None else [])])
    finally:
        for task in (pending, delta, stop_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        for source in (events, deltas):
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
