"""Seed 000's observation endpoints: topology, a session's timeline (paged), one
contract. The past comes from the exported log, the current run from live queries."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, Path, Request, Response
from temporalio.client import Client

from api.http.authority import SeenSessionDep, require_see
from api.http.deps import (
    ApiTuning,
    ClientDep,
    ConsistencyQuery,
    FreshnessDep,
    LogViewsDep,
    PageReadDep,
    PrincipalDep,
    TuningDep,
)
from api.http.errors import ApiError
from api.http.models import TimelinePage
from api.http.paging import (
    check_offset,
    decode_cursor,
    encode_cursor,
)
from api.http.reads import Freshness, log_then_live, read_log, store_call, with_duration
from api.http.routers.session_reads import describe, query, stored_page, stored_row
from observation.log_pages import contract_page
from observation.log_view import SessionLogView
from observation.projections import (
    ExecutionObserver,
    ExecutionSnapshot,
    ExecutionTimeline,
    at_reader_clock,
    execution_snapshot,
    merge_transitions,
)
from workflows.config import session_of_execution
from workflows.contract import TransitionRecord
from workflows.fsm import StateMachineTopology
from workflows.messages import ContractQuery

router = APIRouter(prefix="/api/execution", tags=["execution"])

_TOPOLOGY = ExecutionObserver.topology().model_dump_json().encode()
TOPOLOGY_ETAG = f'"{hashlib.sha256(_TOPOLOGY).hexdigest()[:32]}"'
TOPOLOGY_CACHE = "public, max-age=86400"


def _no_execution_data(session_id: str) -> ApiError:
    """Seed 000: a session with no execution data (no contracts yet) is a 404 with
    a message, like an unknown one (whose code stays ``session_not_found``)."""
    return ApiError(404, "execution_data_not_found",
                    f"session {session_id!r} has no execution data (no contracts yet)")


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
async def timeline(session_id: SeenSessionDep, client: ClientDep, tuning: TuningDep,
                   logs: LogViewsDep, request: Request, response: Response,
                   paged: PageReadDep) -> TimelinePage:
    """Seed 000's timeline, paged by contract (`limit`, `cursor`): the contracts in
    the order they were created, with their transitions merged by time (equal times
    in the order recorded); the counts are over every contract. From the read model
    (`consistency=live`: the exported log overlaid by the live query). 404 for an
    unknown session (`session_not_found`) and for a session with no execution data
    yet (`execution_data_not_found`, seed 000)."""
    offset, limit = decode_cursor(paged.cursor, "timeline", session_id), paged.limit
    if paged.consistency == "read_model":
        return await _stored_timeline(request, response, client, tuning, session_id,
                                      paged.fresh, offset, limit)

    def live() -> Awaitable[ExecutionTimeline]:
        return query(client, session_id, "timeline", ExecutionTimeline, tuning)

    def build(log: SessionLogView | None, now: ExecutionTimeline | None) -> TimelinePage:
        page = contract_page(log, now.contracts if now else [], offset, limit,
                             datetime.now(UTC), now.transitions if now else [])
        if page.total == 0:
            raise _no_execution_data(session_id)
        check_offset(offset, page.total)
        return TimelinePage(
            session_id=session_id, total_contracts=page.total,
            terminal_contracts=page.terminal, active_contracts=page.active,
            has_suspended=page.has_suspended, contracts=page.items,
            transitions=list(page.transitions),
            next_cursor=encode_cursor("timeline", session_id, page.next_offset))

    return await log_then_live(logs, session_id, live, build)


async def _stored_timeline(request: Request, response: Response, client: Client,
                           tuning: ApiTuning, session_id: str, fresh: Freshness, offset: int,
                           limit: int) -> TimelinePage:
    store, row, _ = await stored_row(request, response, tuning, session_id, fresh)
    if row is None:  # not exported yet: known to Temporal (no data yet), else 404
        await describe(client, session_id)
        raise _no_execution_data(session_id)
    total = row["contracts_total"]
    if total == 0:
        raise _no_execution_data(session_id)
    page = await stored_page(store, store.contracts, session_id, offset, limit, total)
    now = datetime.now(UTC)
    transitions = merge_transitions(   # rows come in creation order
        [TransitionRecord.model_validate(t) for t in r["transitions"]] for r in page.items)
    return TimelinePage.model_validate({
        "session_id": session_id, "total_contracts": total,
        "terminal_contracts": row["terminal_contracts"],
        "active_contracts": total - row["terminal_contracts"],
        "has_suspended": row["has_suspended"],
        "contracts": [with_duration(r["snapshot"], now) for r in page.items],
        "transitions": transitions, "seq": row["last_seq"],
        "next_cursor": encode_cursor("timeline", session_id, page.next_offset)})


@router.get("/{execution_id}/snapshot", response_model=ExecutionSnapshot)
async def snapshot(
    execution_id: Annotated[str, Path(min_length=1, max_length=300)],
    client: ClientDep, tuning: TuningDep, logs: LogViewsDep, request: Request,
    response: Response, fresh: FreshnessDep,
    principal: PrincipalDep, consistency: ConsistencyQuery = "read_model",
) -> ExecutionSnapshot:
    """One contract's snapshot, from the read model (`X-Hitlflow-Seq` says how
    fresh). `consistency=live`: the live query's when the contract is in the
    session's current run, else the exported log's. Execution ids name their
    session. 404 when unknown."""
    unknown = ApiError(404, "execution_not_found", f"no contract {execution_id!r}")
    session_id = session_of_execution(execution_id)
    if session_id is None:
        raise unknown
    await require_see(request, principal, session_id)
    if consistency == "read_model":
        store, row, _ = await stored_row(request, response, tuning, session_id, fresh)
        found = await store_call(store, store.contract, session_id, execution_id) \
            if row is not None else None
        if found is None:
            raise unknown
        return ExecutionSnapshot.model_validate(with_duration(found["snapshot"],
                                                              datetime.now(UTC)))
    try:
        live = await query(client, session_id, "contract_snapshot", ExecutionSnapshot, tuning,
                           ContractQuery(execution_id=execution_id))
        # The query's duration is workflow.now()'s, which stands still while the
        # workflow waits: the elapsed time is the reader's clock's.
        return at_reader_clock(live, datetime.now(UTC))
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
    return execution_snapshot(contract, datetime.now(UTC)) if contract is not None else None
