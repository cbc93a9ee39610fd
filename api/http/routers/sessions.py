"""Sessions: start, list, show, and what a person or an application sends them.

Replies, messages and ends go through the workflow's update validators: a refused
one is a 409 that says why, and it never reaches history (the session is unchanged).
Who may do what is checked first (``api.http.authority``): a principal who may not is
a 403 naming the rule, recorded in the session's log; the validator checks a reply
again (its 403, 409 and 422 are mapped in ``api.http.errors``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request, Response
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy

from api.http import stuck as stuck_sessions
from api.http.authority import (
    PEOPLE_MEMO,
    SeenSessionDep,
    check_act,
    check_answer,
    forbidden,
    refuse,
    require_see,
    seen_of,
    seen_people,
    session_access,
    you,
)
from api.http.command_policy import refusal_message, refused_commands
from api.http.deps import (
    ApiTuning,
    ClientDep,
    LogViewsDep,
    OnChange,
    OnChangeDep,
    PageRead,
    PageReadDep,
    PrincipalDep,
    SessionIdDep,
    SettingsDep,
    TuningDep,
)
from api.http.errors import SESSION_STUCK, ApiError, retry_not_ready, temporal_errors
from api.http.idempotency import HEADER as KEY_HEADER
from api.http.idempotency import IdempotencyKeyDep, uncertain_headers, update_id
from api.http.limits import check_input_size
from api.http.models import (
    NOT_UNICODE,
    SESSION_ID_PATTERN,
    Accepted,
    CancelAccepted,
    EndRequest,
    ErrorBody,
    ForkedFromView,
    ForkView,
    MessageRequest,
    ReplyRequest,
    SessionCreated,
    SessionView,
    StandingList,
    StepActionRequest,
    lone_surrogate,
)
from api.http.paging import (
    check_offset,
    decode_cursor,
    encode_cursor,
)
from api.http.reads import read_log, store_call, with_duration
from api.http.routers.session_list import execution_status_of, status_of
from api.http.routers.session_reads import describe, query, stored_page, stored_row
from api.settings import HitlflowSettings
from observation.fork import lineage_of
from observation.log_pages import contract_page
from observation.log_reader import LogViews
from observation.log_view import SessionLogView
from observation.projections import ExecutionSnapshot
from workflows.config import SessionConfig
from workflows.messages import (
    CURRENT_BEHAVIOUR,
    Ack,
    EndInput,
    LiveSession,
    MessageInput,
    ReplyInput,
    RevokeInput,
    SessionInput,
)
from workflows.operators import static_details, static_summary
from workflows.people import (
    People,
    Principal,
    Refusal,
    StandingDecision,
    may_answer,
    may_start,
)
from workflows.plan import replay
from workflows.search_attributes import SESSION_STATUS
from workflows.session_state import SessionState
from workflows.statechart import (
    SessionStatus,
)

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


# -- start ------------------------------------------------------------------


#: How many decision rules a session may hold, the server's included.
MAX_RULES = 100


def with_people(config: SessionConfig, principal: Principal,
                settings: HitlflowSettings) -> SessionConfig:
    """The config as it starts: its owner is the principal who starts it (a body's
    other owner only when an operator or a service starts it for someone), empty
    approvers and viewers take the server's defaults, and the server's rules go
    before the session's own (the operator's policy wins)."""
    asked = config.people
    if asked.owner and asked.owner != principal.subject and not (
            principal.at_least("operator") or principal.kind == "service"):
        raise forbidden(Refusal(rule="people.owner", message=(
            f"{principal.subject} may not start a session owned by {asked.owner}: the "
            "owner is who starts it (an operator or a service may start one for someone)")))
    people = People(owner=asked.owner or principal.subject,
                    approvers=asked.approvers or list(settings.default_approvers),
                    viewers=asked.viewers or list(settings.default_viewers))
    rules = [*settings.rules, *config.rules]
    if len(rules) > MAX_RULES:
        raise ApiError(422, "validation_error", f"rules: the server's {len(settings.rules)} "
                       f"and the session's {len(config.rules)} rules are more than "
                       f"{MAX_RULES}")
    return config.model_copy(update={"people": people, "rules": rules})


@router.post("", status_code=201, response_model=SessionCreated, responses={
    403: {"model": ErrorBody, "description": "The config runs a command the server does "
          "not allow (`commands_not_allowed`, HITLFLOW_API_ALLOWED_COMMANDS), or the "
          "principal may not start sessions (`forbidden`, `rule`: `role.approver`) or not "
          "for that owner (`people.owner`); nothing was started"}})
async def start_session(
    config: Annotated[SessionConfig, Body(
        description="The session config (docs/session-config.md).")],
    response: Response, client: ClientDep, settings: SettingsDep, on_change: OnChangeDep,
    principal: PrincipalDep,
    session_id: Annotated[str | None, Query(
        pattern=SESSION_ID_PATTERN, max_length=128,
        description="The new session's id (default: generated). Never reused.")] = None,
) -> SessionCreated:
    """Start a session. Its `SessionStatus` search attribute is `queued` from the
    start, so it is listed before any worker picks it up. A config that runs a
    command the server does not allow (a plan step's shell command, a tool server
    started from a command) is a 403 `commands_not_allowed` that names it. Starting
    needs the approver role; the principal becomes the session's owner, and empty
    `people.approvers`/`viewers` take the server's defaults
    (`HITLFLOW_DEFAULT_APPROVERS`/`VIEWERS`); the server's rules (`HITLFLOW_RULES`) go
    before the session's."""
    if refusal := may_start(principal):
        raise forbidden(refusal)
    if lone_surrogate(config.model_dump()):
        raise ApiError(422, "validation_error", f"body: {NOT_UNICODE}")
    config = with_people(config, principal, settings)
    if refused := refused_commands(config, settings.api_allowed_commands):
        raise ApiError(403, "commands_not_allowed",
                       refusal_message(refused, settings.api_allowed_commands))
    sid = session_id or f"s-{uuid.uuid4().hex[:12]}"
    start = SessionInput(session_id=sid, config=config, behaviour=CURRENT_BEHAVIOUR)
    check_input_size(client, start, settings.max_input_bytes, "the session config")
    with temporal_errors(sid):
        await client.start_workflow(
            "SessionWorkflow", start,
            id=sid, task_queue=settings.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            memo={PEOPLE_MEMO: config.people.model_dump()},  # until the read model has it
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(SESSION_STATUS, SessionStatus.QUEUED.value)]),
            # What the Temporal UI's list and detail pages say the session is.
            static_summary=static_summary(config), static_details=static_details(config),
        )
    on_change(sid)  # in `up`: the exporter follows it now, not at its next discovery
    response.headers["Location"] = f"/api/sessions/{sid}"
    return SessionCreated(session_id=sid, status=SessionStatus.QUEUED)


# -- one session -----------------------------------------------------------------------


async def _view_of(client: Client, desc: WorkflowExecutionDescription,
                   session_id: str) -> SessionView:
    """What Temporal alone knows of a session (no worker needed): its last recorded
    status, and why it is stuck when its workflow task keeps failing."""
    return SessionView(
        session_id=session_id, status=status_of(desc.typed_search_attributes.get(SESSION_STATUS)),
        execution_status=execution_status_of(desc.status), live=False,
        stuck=await stuck_sessions.diagnose(client, desc),
    )


def _with_contracts(view: SessionView, log: SessionLogView | None,
                    live: list[ExecutionSnapshot], offset: int, limit: int) -> SessionView:
    page = contract_page(log, live, offset, limit, datetime.now(UTC))
    check_offset(offset, page.total)
    return view.model_copy(update={
        # The log may lag behind the live count (a window of the recent past).
        "contracts": page.items, "contracts_total": max(page.total, view.contracts_total),
        "next_cursor": encode_cursor("contracts", view.session_id, page.next_offset)})


def _from_log(view: SessionView, log: SessionLogView | None) -> SessionView:
    """Without a worker: the counters as far as the log has them."""
    if log is None:
        return view
    return view.model_copy(update={
        "replies": log.replies, "turns": log.turns, "llm_calls": log.llm_calls,
        "failure_reason": log.failure_reason, "last_text": log.last_text})


async def _recorded_view(client: Client, session_id: str) -> SessionView:
    return await _view_of(client, await describe(client, session_id), session_id)


@router.get("/{session_id}", response_model=SessionView)
async def get_session(session_id: SessionIdDep, client: ClientDep, tuning: TuningDep,
                      logs: LogViewsDep, request: Request, response: Response,
                      paged: PageReadDep, principal: PrincipalDep) -> SessionView:
    """The session: canonical status, pending request, counters, and one page of its
    contracts as snapshots (`limit`, `cursor`; `contracts_total` counts them all),
    from the read model (no worker needed; `seq` says how fresh; `min_journal_seq`
    reads your writes). Before the exporter has reached a new session, Temporal's
    record of it (`seq` 0). `consistency=live`: the workflow's query (`live` true;
    `stuck` when its workflow task keeps failing). `you`: what the principal may do
    to it now; 403 `forbidden` for a session they may not see."""
    people = await seen_people(request, principal, session_id,
                               memo=not principal.at_least("operator"))
    view = await _session_view(session_id, client, tuning, logs, request, response, paged)
    pending = view.pending.model_dump(mode="json") if view.pending is not None else None
    lineage = _lineage(request.app.state, session_id, 0 if view.live else view.seq)
    return view.model_copy(update={"you": you(principal, people, pending), "forked_from":
                                   ForkedFromView(**lineage) if lineage else None,
                                   "forks": await _forks(request, principal, session_id)})


#: Sessions whose lineage ``_lineage`` keeps (the oldest go first).
LINEAGES_KEPT = 4096


def _lineage(state: Any, session_id: str, seq: int) -> dict[str, Any] | None:
    """``lineage_of`` the session's log: read from its line 1 once that line is durable
    (the read model's answer has a line of it: ``seq`` >= 1; 0 for any other answer),
    then kept, since a log's first line never changes; read each time before."""
    kept: dict[str, dict[str, Any] | None] | None = getattr(state, "lineages", None)
    if kept is None:
        kept = state.lineages = {}
    if session_id in kept:
        return kept[session_id]
    lineage = lineage_of(state.settings.data_dir / "runs" / session_id)
    if seq >= 1:
        if len(kept) >= LINEAGES_KEPT:
            del kept[next(iter(kept))]
        kept[session_id] = lineage
    return lineage


async def _forks(request: Request, principal: Principal, session_id: str) -> list[ForkView]:
    store = getattr(request.app.state, "read_model", None)
    if store is None:
        return []
    children = await store_call(store, store.children, session_id)
    seen = set(await seen_of(request, principal, [c["session_id"] for c in children]))
    return [ForkView(**c) for c in children if c["session_id"] in seen]


async def _session_view(session_id: str, client: Client, tuning: ApiTuning, logs: LogViews,
                        request: Request, response: Response, paged: PageRead
                        ) -> SessionView:
    offset, limit = decode_cursor(paged.cursor, "contracts", session_id), paged.limit
    if paged.consistency == "live":
        return await _live_session(session_id, client, tuning, logs, offset, limit)
    store, row, stale = await stored_row(request, response, tuning, session_id, paged.fresh)
    if row is None:
        recorded = await _recorded_view(client, session_id)
        check_offset(offset, 0)
        return recorded.model_copy(update={"stale": stale})
    page = await stored_page(store, store.contracts, session_id, offset, limit,
                             row["contracts_total"])
    now = datetime.now(UTC)
    return SessionView.model_validate({
        "session_id": session_id, "status": row["status"],
        "execution_status": row["execution_status"], "live": False, "mode": row["mode"],
        "pending": row["pending"], "replies": row["replies"], "turns": row["turns"],
        "llm_calls": row["llm_calls"], "failure_reason": row["failure_reason"],
        "last_text": row["last_text"], "waiting_since": row["waiting_since"],
        "contracts": [with_duration(r["snapshot"], now) for r in page.items],
        "contracts_total": row["contracts_total"],
        "next_cursor": encode_cursor("contracts", session_id, page.next_offset),
        "seq": row["last_seq"], "journal_seq": row["journal_seq"], "stale": stale,
        "stuck": await request.app.state.stuck_watch.view(client, session_id)
        if row["execution_status"] == "running" else None})


async def _live_session(session_id: str, client: Client, tuning: ApiTuning, logs: LogViews,
                        offset: int, limit: int) -> SessionView:
    """The workflow's query overlaid on the log fold (needs a worker; without one,
    Temporal's record and the log)."""
    try:
        snap = await query(client, session_id, "snapshot", LiveSession, tuning)
    except ApiError as err:
        if err.code not in ("worker_unavailable", SESSION_STUCK):
            raise
        recorded = await _recorded_view(client, session_id)
        return await read_log(logs, session_id, lambda log: _with_contracts(
            _from_log(recorded, log), log, [], offset, limit))
    view = SessionView.model_validate({
        **snap.model_dump(mode="json", exclude={"contracts", "memory", "status_history"}),
        "live": True})
    return await read_log(logs, session_id, lambda log: _with_contracts(
        view, log, snap.contracts, offset, limit))


async def _refusal_for_closed(client: Client, session_id: str, code: str,
                              what: str) -> ApiError:
    """An update hit a closed session (or none): 409 with its status, or 404."""
    view = await _recorded_view(client, session_id)
    status = view.status.value if view.status else view.execution_status
    return ApiError(409, code, f"{what}: the session is {status}")


@dataclass(frozen=True)
class Actor:
    """Who sends an update, and as what (``action`` names it in a recorded refusal)."""

    principal: Principal
    action: str
    request_id: str | None = None
    #: The request's idempotency key (``api.http.idempotency``): the update's id.
    key: str | None = None


async def _update(client: Client, session_id: str, name: str, arg: object, *, code: str,
                  closed: str, tuning: ApiTuning, changed: OnChange, limit: int,
                  actor: Actor, result_type: type | None = Ack) -> Any:
    """Send an update (``_send_update``); every error answer names its idempotency key."""
    try:
        return await _send_update(client, session_id, name, arg, code=code, closed=closed,
                                  tuning=tuning, changed=changed, limit=limit,
                                  actor=actor, result_type=result_type)
    except ApiError as err:
        if actor.key:
            err.headers = {**(err.headers or {}), KEY_HEADER: actor.key}
        raise


async def _send_update(client: Client, session_id: str, name: str, arg: object, *,
                       code: str, closed: str, tuning: ApiTuning, changed: OnChange,
                       limit: int, actor: Actor, result_type: type | None) -> Any:
    """Send an update. Its validator's refusals: a 403 (recorded) when the workflow
    finds the principal may not (``errors``: ANSWER_FORBIDDEN), a 409 with the
    conflict's code, a 422 for invalid edited arguments, else a 409 ``code``."""
    check_input_size(client, arg, limit, "the request")
    handle = client.get_workflow_handle(session_id)
    uid = update_id(name, actor.principal, actor.key) if actor.key else None
    try:
        with temporal_errors(session_id):
            ack = await retry_not_ready(lambda: handle.execute_update(
                name, arg, id=uid, result_type=result_type, rpc_timeout=tuning.update_timeout))
        changed(session_id)
        return ack
    except ApiError as err:
        if err.status == 403:
            rule = str(err.extra.get("rule") or "forbidden")
            raise await refuse(client, session_id, actor.principal, actor.action,
                               Refusal(rule=rule, message=err.message),
                               actor.request_id, changed) from None
        if isinstance(err.__cause__, WorkflowUpdateFailedError) and err.code != "refused":
            raise  # the validator's conflict (409) or invalid arguments (422), as mapped
        if err.code == "refused":
            raise ApiError(409, code, err.message) from None
        if err.code == "session_not_found":  # "workflow execution already completed"
            raise await _refusal_for_closed(client, session_id, code, closed) from None
        answer = await stuck_sessions.explain(client, session_id, err, key=actor.key,
                                              update_id=uid)
        if answer.status == 503 and answer.headers is None:  # Temporal unreachable...
            answer.headers = uncertain_headers(actor.key, stuck_sessions.RETRY_AFTER_S)
            answer.extra = {**answer.extra, "idempotency_key": actor.key}
        raise answer from None


def _decider(principal: Principal) -> str:
    """``by`` as the log's old field shows it: the principal's name, never the body's."""
    return (principal.name or principal.subject)[:200]


_REFUSALS: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorBody, "description": "The principal may not do this (`forbidden`, "
          "`rule` names the rule); the refused attempt is recorded in the session's log "
          "and nothing else changed"},
}
_REPLY_REFUSALS: dict[int | str, dict[str, Any]] = {
    **_REFUSALS,
    409: {"model": ErrorBody, "description": "Nothing is pending, the reply names another "
          "request or does not fit it (`reply_refused`), the digest no longer matches "
          "(`stale_digest`), or the principal has already approved it "
          "(`already_approved`); nothing changed"},
    422: {"model": ErrorBody, "description": "The request does not validate, or edited "
          "`arguments` fail the tool's input schema (`invalid_arguments`, `errors`)"},
}


@router.post("/{session_id}/reply", status_code=202, response_model=Accepted,
             responses=_REPLY_REFUSALS)
async def reply(session_id: SessionIdDep, body: ReplyRequest, client: ClientDep,
                tuning: TuningDep, changed: OnChangeDep, settings: SettingsDep,
                principal: PrincipalDep, request: Request,
                key: IdempotencyKeyDep) -> Accepted:
    """Answer the pending request (name it by `request_id`, and send its `digest`).
    The decider is the authenticated principal (a `by` in the body changes nothing).
    403 `forbidden` (naming the rule; the refusal is recorded) when they may not
    answer it; 409 when nothing is pending, when it names another request, when the
    answer does not fit the request, for a stale digest (`stale_digest`) or a second
    approval by the same person (`already_approved`); 422 `invalid_arguments` for
    edited arguments that fail the tool's schema. The session is unchanged then."""
    await check_answer(request, client, principal, session_id, body.request_id)
    answer = ReplyInput(**{**body.model_dump(), "by": _decider(principal)},
                        principal=principal)
    ack = await _update(client, session_id, "reply", answer,
                        code="reply_refused", closed="nothing is pending",
                        tuning=tuning, changed=changed, limit=settings.max_input_bytes,
                        actor=Actor(principal, "reply", body.request_id, key))
    return Accepted(session_id=session_id, request_id=ack.request_id, status=ack.status,
                    journal_seq=ack.journal_seq)


_MESSAGE_REFUSALS: dict[int | str, dict[str, Any]] = {
    **_REFUSALS,
    409: {"model": ErrorBody, "description": "The session ended (`message_refused`), the "
          "agent is working and the message says `if_busy: reject` (`session_busy`), or "
          "it says `interrupt` to a plan session started before plans could be "
          "interrupted, while its plan runs (`not_interruptible`); nothing changed"},
}


@router.post("/{session_id}/messages", status_code=202, response_model=Accepted,
             responses=_MESSAGE_REFUSALS)
async def send_message(session_id: SessionIdDep, body: MessageRequest, client: ClientDep,
                       tuning: TuningDep, changed: OnChangeDep, settings: SettingsDep,
                       principal: PrincipalDep, request: Request,
                       key: IdempotencyKeyDep) -> Accepted:
    """A new message from the person; it starts a turn (at once when the session
    waits for a message, else after the current one). While the agent works,
    `if_busy` says what it does: `enqueue` (the default: it waits for the next LLM
    call), `interrupt` (the turn is cut and a new one starts with it) or `reject`
    (409 `session_busy`, nothing changes). 409 once the session ended; 403 for a
    principal who is not its owner, an approver or an operator."""
    await check_act(request, client, principal, session_id, "message")
    message = MessageInput(**{**body.model_dump(), "by": _decider(principal)},
                           principal=principal)
    ack = await _update(client, session_id, "send_message", message,
                        code="message_refused", closed="it takes no messages",
                        tuning=tuning, changed=changed, limit=settings.max_input_bytes,
                        actor=Actor(principal, "message", key=key))
    return Accepted(session_id=session_id, status=ack.status, journal_seq=ack.journal_seq)


@router.post("/{session_id}/end", status_code=202, response_model=Accepted,
             responses=_REFUSALS)
async def end(session_id: SessionIdDep, client: ClientDep, tuning: TuningDep,
              changed: OnChangeDep, settings: SettingsDep, principal: PrincipalDep,
              request: Request, key: IdempotencyKeyDep,
              body: Annotated[EndRequest | None, Body()] = None) -> Accepted:
    """End the conversation while the session waits for the person (it succeeds).
    409 otherwise (cancel a running session instead); 403 for a principal who is not
    its owner, an approver or an operator."""
    await check_act(request, client, principal, session_id, "end")
    ending = EndInput(**{**(body or EndRequest()).model_dump(), "by": _decider(principal)},
                      principal=principal)
    ack = await _update(client, session_id, "end", ending,
                        code="end_refused", closed="it cannot be ended",
                        tuning=tuning, changed=changed, limit=settings.max_input_bytes,
                        actor=Actor(principal, "end", key=key))
    return Accepted(session_id=session_id, status=ack.status, journal_seq=ack.journal_seq)


@router.post("/{session_id}/cancel", status_code=202, response_model=CancelAccepted,
             responses=_REFUSALS)
async def cancel(session_id: SessionIdDep, client: ClientDep, changed: OnChangeDep,
                 principal: PrincipalDep, request: Request) -> CancelAccepted:
    """Cancel the session: what is in flight is cancelled, open contracts are
    cancelled, nothing new starts, the status becomes `canceled`. A repeat while it
    is cancelling is a 202 `already_requested`; 409 when it has already ended, or
    when it is stuck (nothing is recorded then: a stuck session cannot carry out a
    cancel); 403 for a principal who is not its owner or an operator."""
    await check_act(request, client, principal, session_id, "cancel")
    desc = await describe(client, session_id)
    view = await _view_of(client, desc, session_id)
    if view.execution_status != "running":
        status = view.status.value if view.status else view.execution_status
        raise ApiError(409, "session_closed", f"the session already ended: it is {status}")
    if view.stuck is not None:
        raise stuck_sessions.refusal(session_id, view.stuck)
    # Temporal keeps one cancel request: a second would be a silent no-op, so say so.
    already = desc.raw_description.workflow_extended_info.cancel_requested
    if not already:
        with temporal_errors(session_id):
            await client.get_workflow_handle(session_id).cancel()
        changed(session_id)
    return CancelAccepted(session_id=session_id, status=view.status,
                          cancellation="already_requested" if already else "requested")


@router.post("/{session_id}/steps/{index}/{action}", status_code=202, response_model=Accepted,
             responses=_REFUSALS)
async def step_action(
    session_id: SessionIdDep, client: ClientDep, tuning: TuningDep, changed: OnChangeDep,
    settings: SettingsDep, principal: PrincipalDep, request: Request, key: IdempotencyKeyDep,
    index: Annotated[int, Path(ge=0, le=10_000, description="The step's index in the plan")],
    action: Annotated[Literal["approve", "skip", "reset"], Path()],
    body: Annotated[StepActionRequest | None, Body()] = None,
) -> Accepted:
    """Plan sessions (seed 002): the person approves, skips or resets step `index`
    (the decider is the principal; 403 when they may not answer the step's request).
    409 for an agent session."""
    uid = update_id("reply", principal, key)
    if request.headers.get("idempotency-key") and \
            await stuck_sessions.admitted(client, session_id, uid):
        # A resend of a request Temporal holds: its outcome, whatever the step is now.
        ack = await _update(client, session_id, "reply", ReplyInput(
            request_id="(resent)", choice=action, by=_decider(principal),
            principal=principal), code="reply_refused", closed="nothing is pending",
            tuning=tuning, changed=changed, limit=settings.max_input_bytes,
            actor=Actor(principal, "reply", None, key))
        return Accepted(session_id=session_id, request_id=ack.request_id,
                        status=ack.status, journal_seq=ack.journal_seq)
    try:
        state = await query(client, session_id, "state", SessionState, tuning)
    except ApiError as err:
        raise await stuck_sessions.explain(client, session_id, err) from None
    if state.config.plan is None:
        raise ApiError(409, "not_a_plan_session",
                       f"not a plan session: {session_id} is driven by an agent, it has no steps")
    if index >= len(state.config.plan.steps):
        raise ApiError(409, "no_such_step",
                       f"the plan has {len(state.config.plan.steps)} steps; no step {index}")
    pending = state.pending
    cursor = replay(len(state.config.plan.steps), state.plan_events).current_step
    if pending is None or pending.kind not in ("step", "window"):
        raise ApiError(409, "step_not_waiting",
                       f"no step waits for a decision (the cursor is at step {cursor})")
    if action != "reset" and index != cursor:
        raise ApiError(409, "step_not_waiting",
                       f"step {index} is not the one waiting: the cursor is at step {cursor}")
    access = await session_access(request, session_id)
    if refusal := may_answer(principal, access.people, pending.approvers, pending.rule):
        raise await refuse(client, session_id, principal, "reply", refusal,
                           pending.request_id, changed)
    reply = ReplyInput(request_id=pending.request_id, choice=action, by=_decider(principal),
                       values={"to_step": index} if action == "reset" else None,
                       comment=(body.comment if body else None), principal=principal,
                       digest=pending.digest)
    ack = await _update(client, session_id, "reply", reply, code="reply_refused",
                        closed="nothing is pending", tuning=tuning, changed=changed,
                        limit=settings.max_input_bytes,
                        actor=Actor(principal, "reply", pending.request_id, key))
    return Accepted(session_id=session_id, request_id=ack.request_id, status=ack.status,
                    journal_seq=ack.journal_seq)


# -- standing decisions ---------------------------------------------------------------


@router.get("/{session_id}/standing", response_model=StandingList)
async def standing(session_id: SeenSessionDep, client: ClientDep,
                   tuning: TuningDep) -> StandingList:
    """The session's standing decisions ("approve, and do not ask again"): which tool
    (and arguments) runs without asking, who set it and on which request. From the
    workflow's query (needs a worker)."""
    try:
        found = await query(client, session_id, "standing_decisions",
                            list[StandingDecision], tuning)
    except ApiError as err:
        raise await stuck_sessions.explain(client, session_id, err) from None
    return StandingList(session_id=session_id, standing=found)


@router.delete("/{session_id}/standing/{standing_id}", status_code=202,
               response_model=Accepted, responses={
                   **_REFUSALS, 404: {"model": ErrorBody, "description": (
                       "No such session, or no such standing decision in it")}})
async def revoke_standing(
    session_id: SessionIdDep, client: ClientDep, tuning: TuningDep, changed: OnChangeDep,
    settings: SettingsDep, principal: PrincipalDep, request: Request, key: IdempotencyKeyDep,
    standing_id: Annotated[str, Path(min_length=1, max_length=200,
                                     pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")],
) -> Accepted:
    """Revoke a standing decision (operators only: 403 otherwise, recorded): the next
    matching call asks again. Like every request that changes something it says
    `Content-Type: application/json` (it has no body)."""
    if not principal.at_least("operator"):
        await require_see(request, principal, session_id)
        raise await refuse(client, session_id, principal, "revoke_standing", Refusal(
            rule="role.operator", message=f"{principal.subject} is a {principal.role}: "
            "revoking a standing decision needs the operator role"), changed=changed)
    try:
        result = await _update(
            client, session_id, "revoke_standing",
            RevokeInput(standing_id=standing_id, principal=principal),
            code="revoke_refused", closed="it has no standing decisions", tuning=tuning,
            changed=changed, limit=settings.max_input_bytes,
            actor=Actor(principal, "revoke_standing", key=key), result_type=None)
    except ApiError as err:
        if err.code == "revoke_refused" and "no standing decision" in err.message.lower():
            raise ApiError(404, "standing_not_found", err.message) from None
        raise
    ack = result if isinstance(result, dict) else {}
    return Accepted(session_id=session_id, status=ack.get("status"),
                    journal_seq=ack.get("journal_seq"))
