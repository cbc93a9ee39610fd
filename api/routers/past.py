"""A session's past, paged: its memory facts and its status history.

Served from the exported log (the past) with the live query's entries the log
has not reached yet appended (see ``observation.log_pages``); from the log alone
once it shows the session ended, or when no worker answers.
"""

from __future__ import annotations

from fastapi import APIRouter
from temporalio.client import Client

from api.deps import ApiTuning, ClientDep, LogViewsDep, SessionIdDep, TuningDep
from api.errors import temporal_errors
from api.models import HistoryPage, MemoryPage, StatusChangeView
from api.paging import (
    DEFAULT_LIMIT,
    CursorQuery,
    LimitQuery,
    check_offset,
    decode_cursor,
    encode_cursor,
)
from api.read_model import log_then_live
from observation.log_pages import fact_page, history_page
from observation.log_view import SessionLogView
from workflows.messages import SessionSnapshot as WorkflowSnapshot

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


@router.get("/{session_id}/memory", response_model=MemoryPage)
async def memory(session_id: SessionIdDep, client: ClientDep, tuning: TuningDep,
                 logs: LogViewsDep, limit: LimitQuery = DEFAULT_LIMIT,
                 cursor: CursorQuery = None) -> MemoryPage:
    """The memory `execution_fact`s of the session's terminal contracts, in the order
    they were recorded. 404 for an unknown session."""
    offset = decode_cursor(cursor, "memory", session_id)

    def build(log: SessionLogView | None, live: WorkflowSnapshot | None) -> MemoryPage:
        page = fact_page(log, live.memory if live else [], offset, limit)
        check_offset(offset, page.total)
        return MemoryPage(session_id=session_id, facts=page.items, total=page.total,
                          next_cursor=encode_cursor("memory", session_id, page.next_offset))

    return await log_then_live(logs, session_id, lambda: _snapshot(client, session_id, tuning),
                               build)


@router.get("/{session_id}/history", response_model=HistoryPage)
async def history(session_id: SessionIdDep, client: ClientDep, tuning: TuningDep,
                  logs: LogViewsDep, limit: LimitQuery = DEFAULT_LIMIT,
                  cursor: CursorQuery = None) -> HistoryPage:
    """The session's status changes (with their FCMP events), oldest first. 404 for an
    unknown session."""
    offset = decode_cursor(cursor, "history", session_id)

    def build(log: SessionLogView | None, live: WorkflowSnapshot | None) -> HistoryPage:
        page = history_page(log, live.status_history if live else [], offset, limit)
        check_offset(offset, page.total)
        return HistoryPage(
            session_id=session_id, total=page.total,
            status_history=[StatusChangeView.model_validate(c.model_dump(mode="json"))
                            for c in page.items],
            next_cursor=encode_cursor("history", session_id, page.next_offset))

    return await log_then_live(logs, session_id, lambda: _snapshot(client, session_id, tuning),
                               build)


async def _snapshot(client: Client, session_id: str, tuning: ApiTuning) -> WorkflowSnapshot:
    with temporal_errors(session_id):
        return await client.get_workflow_handle(session_id).query(
            "snapshot", result_type=WorkflowSnapshot, rpc_timeout=tuning.query_timeout)
