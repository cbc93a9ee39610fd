"""Fork: a new session from a point of a session's past (issue 27).

The state at the point is rebuilt from what is recorded (``observation.fork``: the
log verified up to it, the history replayed without running anything); the new
session starts from it, its log's first line names the parent, the line and that
line's hash. The parent is not touched."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from pydantic import Field
from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from api.http.authority import PEOPLE_MEMO, forbidden, require_see
from api.http.command_policy import refusal_message, refused_commands
from api.http.deps import ClientDep, OnChangeDep, PrincipalDep, SessionIdDep, SettingsDep
from api.http.errors import ApiError, temporal_errors
from api.http.idempotency import IdempotencyKeyDep
from api.http.limits import check_input_size
from api.http.models import ErrorBody, SessionCreated, _Request
from observation.fork import ForkRefused, rebuild
from workflows.fork import fork_input
from workflows.messages import ForkedFrom
from workflows.operators import static_details, static_summary
from workflows.people import PrincipalRef, may_start
from workflows.search_attributes import SESSION_STATUS
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

router = APIRouter(prefix="/api/sessions", tags=["sessions"])
#: The error code of each refusal of ``observation.fork``.
REFUSED = {404: "session_not_found", 409: "not_a_fork_point", 422: "validation_error"}
#: The memo key that holds a fork's lineage (what a resend with the same key answers).
FORK_MEMO = "hitlflow.forked_from"


def fork_id(parent: str, principal: PrincipalRef, key: str) -> str:
    """The fork's session id: made from the parent, the principal and the request's
    ``Idempotency-Key``, so the same request resent with the same key names the same
    fork (Temporal starts one workflow per id) and another principal's key another."""
    made = hashlib.sha256(
        f"fork\n{parent}\n{principal.issuer}\n{principal.subject}\n{key}".encode())
    return f"s-{made.hexdigest()[:12]}"


async def _started(client: Client, sid: str) -> ForkedFrom | None:
    """The lineage of the fork ``sid`` if it was started already (a resend), else None."""
    try:
        desc = await client.get_workflow_handle(sid).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    value = await desc.memo_value(FORK_MEMO, None)
    return ForkedFrom.model_validate(value) if value is not None else None


class ForkRequest(_Request):
    at_seq: int = Field(ge=1, le=2**53 - 1, description=(
        "The line of the session's log to fork at: where it waits for the person's "
        "next message (a turn boundary; a plan session: a step boundary, where its plan "
        "goes on to the next step or waits for a person at a step), or a person's "
        "`message` line (the fork starts "
        "at the wait it answered, with that message unless `message` replaces it). "
        "Anywhere else is a 409 naming the nearest."))
    message: str | None = Field(default=None, min_length=1, max_length=100_000, description=(
        "The person's message at that point, in place of the one the session got "
        "there; without it the fork waits for one."))


class ForkCreated(SessionCreated):
    forked_from: str
    at_seq: int
    line_hash: str


@router.post("/{session_id}/fork", status_code=201, response_model=ForkCreated, responses={
    403: {"model": ErrorBody, "description": "The principal may not start sessions or "
          "may not see this one; nothing was started"},
    404: {"model": ErrorBody, "description": "No such session (or no log of it yet)"},
    409: {"model": ErrorBody, "description": "`not_a_fork_point`: the line is inside a "
          "turn or past the log's end (the message names the nearest fork points), or "
          "the log does not verify up to it"},
    422: {"model": ErrorBody, "description": "A bad body"}})
async def fork_session(
    session_id: SessionIdDep, body: Annotated[ForkRequest, Body()], request: Request,
    response: Response, client: ClientDep, settings: SettingsDep, on_change: OnChangeDep,
    principal: PrincipalDep, key: IdempotencyKeyDep,
) -> ForkCreated:
    """Start a new session from a point of this one's past: its state there, rebuilt
    from the log and history (no LLM or tool call runs again), owned by the caller.
    Its log's first line (`SESSION_FORKED`) names this session, `at_seq` and that
    line's `line_hash`; `hitlflow log verify` checks the link. This session is not
    touched. Needs the right to start sessions and to see this one. Rewinding in place
    is a fork plus a cancel of this session. The same request resent with the same
    `Idempotency-Key` starts no second fork: it answers the first one's 201."""
    if refusal := may_start(principal):
        raise forbidden(refusal)
    await require_see(request, principal, session_id)
    sid = fork_id(session_id, principal, key)
    with temporal_errors(sid):
        earlier = await _started(client, sid)
    if earlier is not None:
        return _created(response, sid, earlier)
    try:
        rebuilt = await rebuild(client, settings.data_dir / "runs", session_id, body.at_seq,
                                SessionWorkflow)
    except ForkRefused as err:
        raise ApiError(err.status, REFUSED[err.status], str(err)) from None
    lineage = ForkedFrom(session_id=session_id, seq=rebuilt.seq, line_hash=rebuilt.line_hash)
    try:
        start = fork_input(rebuilt.state, sid, lineage, owner=principal.subject,
                           message=body.message if body.message is not None
                           else rebuilt.message, parent_actions=rebuilt.parent_actions)
    except ValueError as err:  # a plan session's fork takes no message
        raise ApiError(422, "validation_error", str(err)) from None
    config = start.config
    assert config is not None
    if refused := refused_commands(config, settings.api_allowed_commands):
        raise ApiError(403, "commands_not_allowed",
                       refusal_message(refused, settings.api_allowed_commands))
    check_input_size(client, start, settings.max_input_bytes, "the fork's state")
    try:
        with temporal_errors(sid):
            # A resend racing the first: USE_EXISTING attaches to the fork it started.
            await client.start_workflow(
                "SessionWorkflow", start, id=sid, task_queue=settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                memo={PEOPLE_MEMO: config.people.model_dump(),
                      FORK_MEMO: lineage.model_dump(mode="json")},
                search_attributes=TypedSearchAttributes(
                    [SearchAttributePair(SESSION_STATUS, SessionStatus.WAITING_USER.value)]),
                static_summary=static_summary(config),
                static_details=static_details(config))
    except ApiError as err:
        # The first request's fork started and already ended: answer it.
        if err.code != "session_exists" or (earlier := await _started(client, sid)) is None:
            raise
        return _created(response, sid, earlier)
    on_change(sid)
    return _created(response, sid, lineage)


def _created(response: Response, sid: str, lineage: ForkedFrom) -> ForkCreated:
    response.headers["Location"] = f"/api/sessions/{sid}"
    return ForkCreated(session_id=sid, status=SessionStatus.WAITING_USER,
                       forked_from=lineage.session_id, at_seq=lineage.seq,
                       line_hash=lineage.line_hash)
