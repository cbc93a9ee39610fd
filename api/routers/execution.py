"""Seed 000's observation endpoints: topology, a session's timeline (paged), one
contract. The past comes from the exported log, the current run from live queries."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, Path, Response

from api.deps import ClientDep, LogViewsDep, SessionIdDep, TuningDep
from api.errors import ApiError, temporal_errors
from api.models import TimelinePage
from api.paging import (
    DEFAULT_LIMIT,
    CursorQuery,
    LimitQuery,
    check_offset,
    decode_cursor,
    encode_cursor,
)
from api.read_model import log_then_live, read_log
from observation.log_pages import contract_page
from observation.log_view import SessionLogView
from observation.projections import ExecutionObserver, ExecutionSnapshot, ExecutionTimeline
from observation.projections import snapshot as project
from workflows.config import session_of_execution
from workflows.fsm import StateMachineTopology
from workflows.messages import ContractQuery

router = APIRouter(prefix="/api/execution", tags=["execution"])

_TOPOLOGY = ExecutionObserver.topology().model_dump_json().encode()
TOPOLOGY_ETAG = f'"{hashlib.sha256(_TOPOLOGY).hexdigest()[:32]}"'
TOPOLOGY_CACHE = "public, max-age=86400"


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


@router.get("/topology", response_model=StateMachineTopology,
            responses={304: {"description": "Not modified (If-None-Match matched the ETag)"}})
async def topology(
    if_none_match: Annotated[str | None, Header(max_length=8192)] = None,
) -> Response:
    """The contract FSM: 7 states, valid and forbidden transitions. Static, so
    cacheable: an `ETag` and `Cache-Control`; `If-None-Match` gets a 304."""
    headers = {"ETag": TOPOLOGY_ETAG, "Cache-Control": TOPOLOGY_CACHE}
    if _matches(if_none_match, TOPOLOGY_ETAG):
        return Response(status_code=304, headers=headers)
    return Response(_TOPOLOGY, media_type="application/json", headers=headers)


@router.get("/{session_id}/timeline", response_model=TimelinePage)
async def timeline(session_id: SessionIdDep, client: ClientDep, tuning: TuningDep,
                   logs: LogViewsDep, limit: LimitQuery = DEFAULT_LIMIT,
                   cursor: CursorQuery = None) -> TimelinePage:
    """Seed 000's timeline, paged by contract (`limit`, `cursor`): the contracts in
    the order they were created, with their transitions merged by time; the counts
    are over every contract. From the exported log, overlaid by the live query.
    404 for an unknown session."""
    offset = decode_cursor(cursor, "timeline", session_id)

    async def live() -> ExecutionTimeline:
        with temporal_errors(session_id):
            return await client.get_workflow_handle(session_id).query(
                "timeline", result_type=ExecutionTimeline, rpc_timeout=tuning.query_timeout)

    def build(log: SessionLogView | None, now: ExecutionTimeline | None) -> TimelinePage:
        page = contract_page(log, now.contracts if now else [], offset, limit,
                             datetime.now(UTC), now.transitions if now else [])
        check_offset(offset, page.total)
        return TimelinePage(
            session_id=session_id, total_contracts=page.total,
            terminal_contracts=page.terminal, active_contracts=page.active,
            has_suspended=page.has_suspended, contracts=page.items,
            transitions=list(page.transitions),
            next_cursor=encode_cursor("timeline", session_id, page.next_offset))

    return await log_then_live(logs, session_id, live, build)


@router.get("/{execution_id}/snapshot", response_model=ExecutionSnapshot)
async def snapshot(
    execution_id: Annotated[str, Path(min_length=1, max_length=300)],
    client: ClientDep, tuning: TuningDep, logs: LogViewsDep,
) -> ExecutionSnapshot:
    """One contract's snapshot: the live query's when the contract is in the
    session's current run, else the exported log's. Execution ids name their
    session. 404 when unknown."""
    unknown = ApiError(404, "execution_not_found", f"no contract {execution_id!r}")
    session_id = session_of_execution(execution_id)
    if session_id is None:
        raise unknown
    try:
        with temporal_errors(session_id):
            return await client.get_workflow_handle(session_id).query(
                "contract_snapshot", ContractQuery(execution_id=execution_id),
                result_type=ExecutionSnapshot, rpc_timeout=tuning.query_timeout)
    except ApiError as err:
        # Not in the current run (409), no such session (404) or no worker: the log.
        if err.status not in (404, 409) and err.code != "worker_unavailable":
            raise
        logged = await read_log(logs, session_id, lambda log: _logged(log, execution_id))
        if logged is None:
            raise unknown from err
        return logged


def _logged(log: SessionLogView | None, execution_id: str) -> ExecutionSnapshot | None:
    contract = log.contract(execution_id) if log is not None else None
    return project(contract, datetime.now(UTC)) if contract is not None else None
