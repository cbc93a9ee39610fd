"""A session's past, paged: its memory facts and its status history.

Served from the exported log (the past) with the live query's entries the log
has not reached yet appended (see ``observation.log_pages``); from the log alone
once it shows the session ended, or when no worker answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from temporalio.client import Client

from api.http.deps import (
    ApiTuning,
    ClientDep,
    ConsistencyQuery,
    FreshnessDep,
    LogViewsDep,
    SessionIdDep,
    TuningDep,
)
from api.http.errors import temporal_errors
from api.http.models import HistoryPage, MemoryPage, StatusChangeView
from api.http.paging import (
    DEFAULT_LIMIT,
    CursorQuery,
    LimitQuery,
    check_offset,
    decode_cursor,
    encode_cursor,
)
from api.http.reads import (
    Freshness,
    fresh_row,
    freshness_headers,
    log_then_live,
    store_call,
    store_of,
)
from observation.log_pages import fact_page, history_page
from observation.log_view import SessionLogView
from workflows.messages import LiveSession

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


async def _entries(request: Request, response: Response, client: Client, tuning: ApiTuning,
                   session_id: str, fresh: Freshness, total_of: str,
                   read: Callable[..., list[dict[str, Any]]], offset: int, limit: int
                   ) -> tuple[list[dict[str, Any]], int, int | None, int]:
    """``(entries, total, next offset, seq)`` of a paged list in the read model."""
    store = store_of(request.app.state)
    row, stale = await fresh_row(store, session_id, fresh, tuning.freshness_wait_s)
    freshness_headers(response, row, stale)
    if row is None:  # not exported yet: known to Temporal (empty), else 404
        with temporal_errors(session_id):
            await client.get_workflow_handle(session_id).describe()
        check_offset(offset, 0)
        return [], 0, None, 0
    total = row[total_of]
    check_offset(offset, total)
    items = await store_call(store, read, session_id, offset, limit)
    following = offset + len(items)
    return items, total, following if following < total else None, row["last_seq"]


@router.get("/{session_id}/memory", response_model=MemoryPage)
async def memory(session_id: SessionIdDep, client: ClientDep, tuning: TuningDep,
                 logs: LogViewsDep, request: Request, response: Response,
                 fresh: FreshnessDep, limit: LimitQuery = DEFAULT_LIMIT,
                 cursor: CursorQuery = None,
                 consistency: ConsistencyQuery = "read_model") -> MemoryPage:
    """The memory `execution_fact`s of the session's terminal contracts, in the order
    they were recorded, from the read model (`consistency=live`: the log overlaid by
    the workflow's query). 404 for an unknown session."""
    offset = decode_cursor(cursor, "memory", session_id)
    if consistency == "read_model":
        store = store_of(request.app.state)
        items, total, following, seq = await _entries(
            request, response, client, tuning, session_id, fresh, "facts_total",
            store.facts, offset, limit)
        return MemoryPage.model_validate({
            "session_id": session_id, "facts": items, "total": total, "seq": seq,
            "next_cursor": encode_cursor("memory", session_id, following)})

    def build(log: SessionLogView | None, live: LiveSession | None) -> MemoryPage:
        page = fact_page(log, live.memory if live else [], offset, limit)
        check_offset(offset, page.total)
        return MemoryPage(session_id=session_id, facts=page.items, total=page.total,
                          next_cursor=encode_cursor("memory", session_id, page.next_offset))

    return await log_then_live(logs, session_id, lambda: _snapshot(client, session_id, tuning),
                               build)


@router.get("/{session_id}/history", response_model=HistoryPage)
async def history(session_id: SessionIdDep, client: ClientDep, tuning: TuningDep,
                  logs: LogViewsDep, request: Request, response: Response,
                  fresh: FreshnessDep, limit: LimitQuery = DEFAULT_LIMIT,
                  cursor: CursorQuery = None,
                  consistency: ConsistencyQuery = "read_model") -> HistoryPage:
    """The session's status changes (with their FCMP events), oldest first, from the
    read model (`consistency=live`: the log overlaid by the workflow's query). 404
    for an unknown session."""
    offset = decode_cursor(cursor, "history", session_id)
    if consistency == "read_model":
        store = store_of(request.app.state)
        items, total, following, seq = await _entries(
            request, response, client, tuning, session_id, fresh, "history_total",
            store.history, offset, limit)
        return HistoryPage.model_validate({
            "session_id": session_id, "status_history": items, "total": total, "seq": seq,
            "next_cursor": encode_cursor("history", session_id, following)})

    def build(log: SessionLogView | None, live: LiveSession | None) -> HistoryPage:
        page = history_page(log, live.status_history if live else [], offset, limit)
        check_offset(offset, page.total)
        return HistoryPage(
            session_id=session_id, total=page.total,
            status_history=[StatusChangeView.model_validate(c.model_dump(mode="json"))
                            for c in page.items],
            next_cursor=encode_cursor("history", session_id, page.next_offset))

    return await log_then_live(logs, session_id, lambda: _snapshot(client, session_id, tuning),
                               build)


async def _snapshot(client: Client, session_id: str, tuning: ApiTuning) -> LiveSession:
    with temporal_errors(session_id):
        return await client.get_workflow_handle(session_id).query(
            "snapshot", result_type=LiveSession, rpc_timeout=tuning.query_timeout)
