"""``GET /api/sessions/{session_id}/events``: the session's live SSE stream.

Where the events come from is one function, ``session_events(client, session_id,
after_seq)`` (``api.sse.EventProvider``):

* THE PLUG POINT — ``observation.exporter.session_events``: the exporter's mapped
  history (DESIGN: one pipeline, no second source of truth). Its events' ``seq`` (the
  log's line number) is the SSE ``id``; ``api.sse.coerce`` turns each into a frame.
* tests inject their own with ``create_app(..., event_provider=...)``.
"""

from __future__ import annotations

import inspect
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from api.deps import ClientDep, SessionIdDep, TuningDep
from api.errors import ApiError, temporal_errors
from api.sse import EventProvider, sse_stream

router = APIRouter(prefix="/api/sessions", tags=["events"])


def default_event_provider() -> EventProvider:
    # THE PLUG POINT: the exporter's live, mapped history (imported on first use).
    from observation.exporter import session_events

    return session_events


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
                     "description": "The session's events as server-sent events"}},
)
async def session_events(
    request: Request,
    session_id: SessionIdDep,
    client: ClientDep,
    tuning: TuningDep,
    last_event_id: Annotated[str | None, Header(
        alias="Last-Event-ID", max_length=64,
        description="Resume after this event id (sent by EventSource on reconnect).")] = None,
    after: Annotated[int | None, Query(
        ge=0, le=10**15, description="Resume after this event id (for clients that "
        "cannot set headers); Last-Event-ID wins.")] = None,
) -> StreamingResponse:
    """Server-sent events: `execution_state` per contract transition (seed 000),
    `conversation.state.changed` and `interaction.*` per status change (seed 004),
    `text` and `tool_result` for the conversation; seed 000's `ecs` repeats each
    `interaction.requested` (same payload, same `id`; `emotion` is not produced). Every
    event has an `id`; a
    reconnect with `Last-Event-ID` continues after it, without gaps or duplicates.
    Comment lines keep the connection alive. The stream ends after the session ends.
    Clients ignore event types they do not know."""
    after_seq = _resume_point(last_event_id, after)
    with temporal_errors(session_id):
        await client.get_workflow_handle(session_id).describe()
    provider: EventProvider = request.app.state.event_provider or default_event_provider()
    events = provider(client, session_id, after_seq)
    if inspect.isawaitable(events):  # `async def` returning an iterator, not a generator
        events = await events
    stream = sse_stream(events, keepalive_s=tuning.keepalive_s,
                        retry_ms=tuning.retry_ms, stopping=request.app.state.stopping)
    return StreamingResponse(stream, media_type="text/event-stream", headers={
        "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
