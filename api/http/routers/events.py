"""``GET /api/sessions/{session_id}/events``: the session's live SSE stream.

Where the events come from is one function, ``session_events(client, session_id,
after_seq)`` (``api.http.sse.EventProvider``):

* THE PLUG POINT — ``observation.exporter.session_events``: the exporter's mapped
  history (DESIGN: one pipeline, no second source of truth). Its events' ``seq`` (the
  log's line number) is the SSE ``id``; ``api.http.sse.coerce`` turns each into a frame.
* tests inject their own with ``create_app(..., event_provider=...)`` (and, for the
  ``Last-Event-ID`` checks, ``stream_head=...``; without it they are skipped).

A resume point (``Last-Event-ID`` or ``after``) is checked against the stream's head
(``observation.exporter.stream_head``: one pass over the history as it is now): past
its last id is a 400 ``invalid_last_event_id`` (never sent: waiting for it would
wait forever or skip events); on a finished session with no event after it, a 204
(a standard ``EventSource`` stops reconnecting on it).
"""

from __future__ import annotations

import functools
import inspect
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from api.http.authority import SeenSessionDep
from api.http.deps import ClientDep, TuningDep
from api.http.errors import ApiError, temporal_errors
from api.http.sse import EventProvider, HeadProvider, sse_stream

router = APIRouter(prefix="/api/sessions", tags=["events"])


def default_event_provider() -> tuple[EventProvider, HeadProvider]:
    # THE PLUG POINT: the exporter's live, mapped history (imported on first use).
    from observation.exporter import session_events, stream_head

    # With the markers where LLM calls were scheduled (their text deltas go from there).
    return functools.partial(session_events, calls=True), stream_head


def _providers(state: object) -> tuple[EventProvider, HeadProvider | None]:
    injected: EventProvider | None = getattr(state, "event_provider", None)
    if injected is not None:
        return injected, getattr(state, "stream_head", None)
    return default_event_provider()


def _past_the_end(given: int, last: int) -> ApiError:
    return ApiError(400, "invalid_last_event_id", f"Last-Event-ID (or after) {given} is past "
                    f"the stream's last event id, {last}: it is not an id this stream sent")


def _resume_point(last_event_id: str | None, after: int | None) -> int | None:
    if last_event_id is None or last_event_id.strip() == "":
        return after
    value = last_event_id.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise ApiError(400, "invalid_last_event_id",
                       f"Last-Event-ID must be an event id this stream sent, got {value!r}")
    return int(value)


@router.get(
    "/{session_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}},
                     "description": "The session's events as server-sent events"},
               204: {"description": "The session ended and the resume point is past its "
                     "last event: nothing more will come"}},
)
async def session_events(
    request: Request,
    session_id: SeenSessionDep,
    client: ClientDep,
    tuning: TuningDep,
    last_event_id: Annotated[str | None, Header(
        alias="Last-Event-ID", max_length=64,
        description="Resume after this event id (sent by EventSource on reconnect).")] = None,
    after: Annotated[int | None, Query(
        ge=0, le=10**15, description="Resume after this event id (for clients that "
        "cannot set headers); Last-Event-ID wins.")] = None,
) -> Response:
    """Server-sent events: `execution_state` per contract transition (seed 000),
    `conversation.state.changed` and `interaction.*` per status change (seed 004),
    `text` and `tool_result` for the conversation; seed 000's `ecs` repeats each
    `interaction.requested` (same payload, same `id`; `emotion` is not produced). Every
    event of the log has an `id`; `text.delta` (`{"call_id", "delta"}`, plus `"text"`,
    the whole text so far, for a client that comes mid-answer) is the model's text
    as it is written: ephemeral, without an `id`, not in the log, ended by the call's
    `text` event (where the worker shares a process with the API: `hitlflow up`). A
    reconnect with `Last-Event-ID` continues after it, without gaps or duplicates.
    Comment lines keep the connection alive. Once the session ended and every event
    went out, a last `stream.complete` event (data `{"last_id"}`, the `id` of the last
    event) ends the stream; a resume after a finished session's last event is a 204
    (a standard `EventSource` then stops); a resume point past the stream's last id
    is a 400 `invalid_last_event_id`. Clients ignore event types they do not know."""
    after_seq = _resume_point(last_event_id, after)
    with temporal_errors(session_id):
        await client.get_workflow_handle(session_id).describe()
    provider, head_of = _providers(request.app.state)
    if after_seq is not None and head_of is not None:
        with temporal_errors(session_id):
            head = await head_of(client, session_id)
        if after_seq > head.last_seq:
            raise _past_the_end(after_seq, head.last_seq)
        if head.finished and after_seq >= head.last_event_seq:
            return Response(status_code=204, headers={"Cache-Control": "no-cache"})
    events = provider(client, session_id, after_seq)
    if inspect.isawaitable(events):  # `async def` returning an iterator, not a generator
        events = await events
    bus = getattr(request.app.state, "delta_bus", None)
    stream = sse_stream(events, keepalive_s=tuning.keepalive_s, retry_ms=tuning.retry_ms,
                        stopping=request.app.state.stopping, after_seq=after_seq,
                        deltas=bus.subscribe(session_id) if bus is not None else None)
    return StreamingResponse(stream, media_type="text/event-stream", headers={
        "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
