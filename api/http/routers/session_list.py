"""``GET /api/sessions``: the sessions, newest first, from the read model, or (with
``stuck``) through Temporal visibility; and the status names both lists and one
session's view (``api.http.routers.sessions``) answer with."""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from api.http import stuck as stuck_sessions
from api.http.authority import audience, forbidden
from api.http.deps import ClientDep, PrincipalDep
from api.http.errors import ApiError, temporal_errors
from api.http.models import SessionList, SessionSummary
from api.http.paging import ListCursorQuery, PageTokenQuery, invalid_cursor
from api.http.reads import store_call, store_of
from observation.read_model import ReadStore
from observation.read_model.list_token import InvalidPageToken
from observation.read_model.store import Audience
from observation.tokens import (
    TokenError,
    decode_page_token,
    decode_token,
    encode_page_token,
    encode_token,
)
from workflows.people import Refusal
from workflows.search_attributes import SESSION_STATUS, WAITING_SINCE
from workflows.statechart import (
    CLIENT_STATUS_NAMES,
    SessionStatus,
    is_terminal,
    status_from_client,
)

router = APIRouter(prefix="/api/sessions", tags=["sessions"])

#: A visibility list's cursors (``observation.tokens``): the position is Temporal's own
#: token (base64url) and the scope it is digested with is that token again, so one the
#: API did not give out never reaches Temporal (which refuses one it cannot parse only
#: after seconds of retries).
VISIBILITY = "visibility"


def status_of(value: object) -> SessionStatus | None:
    try:
        return SessionStatus(str(value)) if value is not None else None
    except ValueError:
        return None


def execution_status_of(status: WorkflowExecutionStatus | None) -> str | None:
    return status.name.lower() if status is not None else None


# The status names a filter takes, declared as an enum so the OpenAPI schema lists them.
StatusName = StrEnum("StatusName", {name: name for name in CLIENT_STATUS_NAMES})


def _status_filter(value: StatusName | None) -> SessionStatus | None:
    """A ``status`` filter in hitlflow's or seed 003's spelling (workflows.statechart)."""
    if value is None:
        return None
    try:
        return status_from_client(value.value)[0]
    except ValueError as err:
        raise ApiError(422, "validation_error", f"status: {err}") from None


def visibility_cursor(token: bytes) -> str:
    position = encode_token(token)
    return encode_page_token(VISIBILITY, position, position)


_LEGACY_TAG = b"v1"  # the release before's visibility tokens: tag, digest, token


def _temporal_token(cursor: str | None, param: str) -> bytes | None:
    if not cursor:
        return None
    try:
        raw = decode_token(cursor)
    except TokenError as err:
        raise invalid_cursor(str(err), param) from None
    tag, digest, legacy = raw[:2], raw[2:10], raw[10:]
    if tag == _LEGACY_TAG and legacy and \
            hashlib.sha256(_LEGACY_TAG + legacy).digest()[:8] == digest:
        return legacy  # until the next release
    position = raw.decode(errors="replace").rpartition(":")[2]
    try:
        decode_page_token(cursor, VISIBILITY, position)
        token = decode_token(position)
    except TokenError:
        raise invalid_cursor("it does not page a list with `stuck`", param) from None
    if not token or visibility_cursor(token) != cursor:
        raise invalid_cursor("it does not page a list with `stuck`", param)
    return token


async def _visibility_page(client: Client, query: str, limit: int, token: bytes | None,
                           param: str) -> tuple[list[WorkflowExecution], bytes | None]:
    """One page of a visibility list. With a token: one attempt (a token Temporal
    refuses is no reason to retry; it answers "Unknown" for one it cannot parse)."""
    if token is None:
        it = client.list_workflows(query, page_size=limit)
        await it.fetch_next_page()
        return list(it.current_page or []), it.next_page_token
    try:
        resp = await client.workflow_service.list_workflow_executions(
            ListWorkflowExecutionsRequest(namespace=client.namespace, page_size=limit,
                                          next_page_token=token, query=query), retry=False)
    except RPCError as err:
        if err.status in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.UNKNOWN):
            raise invalid_cursor(f"Temporal refused it ({err.message})", param) from None
        raise
    # Private in the SDK: pinned, and checked by tests/api/runtime/test_sdk_private_api.py.
    return [WorkflowExecution._from_raw_info(info, client.namespace, client.data_converter)
            for info in resp.executions], resp.next_page_token or None


@router.get("", response_model=SessionList)
async def list_sessions(
    client: ClientDep, request: Request, principal: PrincipalDep,
    status: Annotated[StatusName | None, Query(
        description="Only sessions in this status: hitlflow's (`queued`, "
        "`running`, `waiting_user`, `succeeded`, `failed`, `canceled`) or seed 003's "
        "spelling (`CREATED`, `DONE`, `FAILED`, `CANCELLED`; its document-pipeline states "
        "such as `DRAFTING` are accepted and match no session)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: ListCursorQuery = None,
    page_token: PageTokenQuery = None,
    stuck: Annotated[bool | None, Query(
        description="Only sessions whose workflow task keeps failing (true) or the others "
        "(false), by Temporal's `TemporalReportedProblems` search attribute (server 1.28+); "
        "operators only")
    ] = None,
    waiting_for: Annotated[Literal["me"] | None, Query(
        description="`me`: only sessions whose pending request the principal may answer "
        "(\"waiting for you\")")] = None,
) -> SessionList:
    """List sessions, newest first, from the read model (a session shows once the
    exporter has written its first lines, a moment after it started): those the
    principal may see (operators: all). With `stuck`, through Temporal visibility
    instead (the read model does not know whether a workflow task keeps failing;
    operators only, 403 otherwise). With `waiting_for`, `stuck=true` lists nothing (a
    stuck session takes no answers) and `stuck=false` is left out."""
    who = audience(principal, waiting_for == "me")
    param = "cursor" if cursor or not page_token else "page_token"
    given = cursor or page_token
    wanted = _status_filter(status)
    if wanted is None and status is not None:  # a seed 003 state no session is ever in
        return SessionList(sessions=[])
    if stuck is None or waiting_for is not None:
        if stuck:  # a stuck session takes no answers: none waits for anyone
            return SessionList(sessions=[])
        return await _listed_from_read_model(store_of(request.app.state), wanted, limit,
                                             given, param, who)
    if not principal.at_least("operator"):
        raise forbidden(Refusal(rule="role.operator", message=(
            f"{principal.subject} is a {principal.role}: listing sessions by `stuck` "
            "needs the operator role")))
    query = 'WorkflowType = "SessionWorkflow" AND ExecutionStatus != "ContinuedAsNew"'
    if wanted is not None:
        query += f' AND SessionStatus = "{wanted.value}"'
        if not is_terminal(wanted):  # a terminated session keeps its last status
            query += ' AND ExecutionStatus = "Running"'
    query += f" AND {stuck_sessions.STUCK_QUERY if stuck else stuck_sessions.HEALTHY_QUERY}"
    token = _temporal_token(given, param)
    try:
        with temporal_errors():
            found, token = await _visibility_page(client, query, limit, token, param)
    except ApiError as err:
        if isinstance(err.__cause__, RPCError) and \
                err.__cause__.status == RPCStatusCode.INVALID_ARGUMENT:
            raise ApiError(400, "unsupported_filter", "this Temporal server cannot filter by "
                           "TemporalReportedProblems (it needs server 1.28+)") from None
        raise
    sessions = [
        SessionSummary(
            session_id=wf.id, status=status_of(wf.typed_search_attributes.get(SESSION_STATUS)),
            execution_status=execution_status_of(wf.status), started_at=wf.start_time,
            closed_at=wf.close_time, waiting_since=wf.typed_search_attributes.get(WAITING_SINCE),
            task_queue=wf.task_queue,
            problems=wf.typed_search_attributes.get(stuck_sessions.REPORTED_PROBLEMS) or [],
            stuck=bool(wf.typed_search_attributes.get(stuck_sessions.REPORTED_PROBLEMS)),
        )
        for wf in found
    ]
    return SessionList(sessions=sessions, next_cursor=visibility_cursor(token) if token else None)


async def _listed_from_read_model(store: ReadStore, status: SessionStatus | None, limit: int,
                                  cursor: str | None, param: str, who: Audience
                                  ) -> SessionList:
    # An operator's plain list is everyone's: no filter at all (the same query as before).
    filtered = None if who.sees_all and not who.waiting_for else who
    try:
        rows, token = await store_call(store, store.list_sessions,
                                       status.value if status else None, limit, cursor,
                                       *([filtered] if filtered is not None else []))
    except InvalidPageToken:
        raise invalid_cursor("it does not name a place in this list", param) from None
    return SessionList(sessions=[SessionSummary(
        session_id=r["session_id"], status=status_of(r["status"]),
        execution_status=r["execution_status"], started_at=r["started_at"] or None,
        closed_at=r["closed_at"], waiting_since=r["waiting_since"], task_queue=r["task_queue"],
        pending=r["pending"], seq=r["last_seq"]) for r in rows], next_cursor=token)
