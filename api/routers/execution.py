"""Seed 000's observation endpoints: topology, a session's timeline, one contract."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import APIRouter, Header, Path, Response

from api.deps import ClientDep, SessionIdDep, TuningDep
from api.errors import ApiError, temporal_errors
from observation.projections import ExecutionObserver, ExecutionSnapshot, ExecutionTimeline
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


@router.get("/{session_id}/timeline", response_model=ExecutionTimeline)
async def timeline(session_id: SessionIdDep, client: ClientDep,
                   tuning: TuningDep) -> ExecutionTimeline:
    """Every contract of the session as a snapshot (by `created_at`) and all their
    transitions merged by time. 404 for an unknown session."""
    with temporal_errors(session_id):
        return await client.get_workflow_handle(session_id).query(
            "timeline", result_type=ExecutionTimeline, rpc_timeout=tuning.query_timeout)


@router.get("/{execution_id}/snapshot", response_model=ExecutionSnapshot)
async def snapshot(
    execution_id: Annotated[str, Path(min_length=1, max_length=300)],
    client: ClientDep, tuning: TuningDep,
) -> ExecutionSnapshot:
    """One contract's snapshot; execution ids name their session. 404 when unknown."""
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
        if err.status in (404, 409):  # no such session, or no such contract in it
            raise unknown from err
        raise
