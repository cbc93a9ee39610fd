"""The HTTP request and response models, kept apart from the workflow's own types.

Requests forbid unknown fields (a typo is a 422, not a silently ignored field).
Responses are built from the workflow's query results by ``model_validate`` of
their JSON form, so a new workflow field never leaks into the API by accident.
The seed 000 observation models (``ExecutionSnapshot``, ``ExecutionTimeline``,
``ExecutionFact``, ``StateMachineTopology``) *are* the public contract of the
observation endpoints and are served as they are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from observation.projections import ExecutionFact, ExecutionSnapshot, ExecutionTimeline
from workflows.config import SESSION_ID_RE
from workflows.people import PrincipalRef, StandingDecision
from workflows.session_state import RequestKind
from workflows.statechart import SessionStatus
from workflows.steering import IfBusy

SESSION_ID_PATTERN = SESSION_ID_RE.pattern
ExecutionStatusName = Literal[
    "running", "completed", "failed", "canceled", "terminated", "continued_as_new", "timed_out"
]


#: What a string with a lone surrogate is told (a JSON ``\\ud800`` escape without its
#: pair is not Unicode text: UTF-8 cannot carry it, nor can the audit log).
NOT_UNICODE = ("a string is not Unicode text: it holds a lone surrogate (a \\ud800-\\udfff "
               "escape without its pair), which UTF-8 cannot carry")


def lone_surrogate(value: Any) -> bool:
    """Whether a string of ``value`` (keys included, at any depth) has a lone surrogate."""
    if isinstance(value, str):
        return not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(lone_surrogate(k) or lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(lone_surrogate(v) for v in value)
    return False


#: A request's digest: ``sha256:`` and 64 lowercase hex digits (workflows.people.digest_of).
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _unicode(self) -> _Request:
        if lone_surrogate(self.model_dump()):
            raise ValueError(NOT_UNICODE)
        return self


# -- errors ----------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str = Field(description="A stable, machine-readable error code.")
    message: str = Field(description="What went wrong, for a person.")
    rule: str | None = Field(default=None, description=(
        "A 403 `forbidden`: the rule that refuses it (e.g. `people.approvers`, "
        "`role.approver`, a decision rule's name)."))
    errors: list[Any] | None = Field(default=None, description=(
        "A 422 `invalid_arguments`: the edited arguments' schema errors."))
    idempotency_key: str | None = Field(default=None, description=(
        "A 503 of a write whose outcome is not known yet: the request's key; resend the "
        "same request with it (`Idempotency-Key`) to get the first one's outcome."))


class ErrorBody(BaseModel):
    """The one shape of every error response."""

    error: ErrorDetail


# -- requests ----------------------------------------------------------------------------


class ReplyRequest(_Request):
    """An answer to the pending request, naming it by ``request_id``.

    approval / confirm: ``approve``; choose: ``choice``; form: ``values``.
    """

    request_id: str = Field(min_length=1, max_length=200)
    approve: bool | None = None
    choice: str | None = Field(default=None, max_length=10_000)
    values: dict[str, Any] | None = None
    comment: str | None = Field(default=None, max_length=10_000)
    by: str = Field(default="user", min_length=1, max_length=200, description=(
        "Accepted for old clients; never the decider: the log names the authenticated "
        "principal."))
    digest: str | None = Field(default=None, pattern=DIGEST_PATTERN, description=(
        "The `digest` of the pending request the person was shown: a reply for a digest "
        "that no longer matches is a 409 `stale_digest`. Clients should send it."))
    arguments: dict[str, Any] | None = Field(default=None, description=(
        "Edit before approve (a request whose rule makes it `editable`): the arguments "
        "that run instead, checked against the tool's input schema (422 otherwise)."))
    remember: Literal["tool", "arguments"] | None = Field(default=None, description=(
        "With an approval: do not ask again in this session for this tool (`tool`) or "
        "for these exact arguments (`arguments`): a standing decision."))


class MessageRequest(_Request):
    text: str = Field(min_length=1, max_length=100_000)
    by: str = Field(default="user", min_length=1, max_length=200)
    if_busy: IfBusy = Field(default="enqueue", description=(
        "What the message does while the agent works: `enqueue` (it waits for the next "
        "LLM call), `interrupt` (the LLM call in flight is cut, as is a read-only or "
        "reversible tool call; an irreversible or at-most-once call is waited for; then "
        "a new turn starts with the message) or `reject` (409 `session_busy`, nothing "
        "changes). While the agent does not work, every message is a plain message."))


class EndRequest(_Request):
    by: str = Field(default="user", min_length=1, max_length=200)
    reason: str = Field(default="", max_length=10_000)


class StepActionRequest(_Request):
    by: str = Field(default="user", min_length=1, max_length=200)
    comment: str | None = Field(default=None, max_length=10_000)


# -- responses ---------------------------------------------------------------------------


class SessionCreated(BaseModel):
    session_id: str
    status: SessionStatus


class Accepted(BaseModel):
    """The session took the request; its effect shows in the session's status soon."""

    session_id: str
    accepted: bool = True
    request_id: str | None = None
    status: SessionStatus | None = Field(
        description="The session's status when the request was taken (before its effect)."
    )
    journal_seq: int | None = Field(default=None, description=(
        "Read your write: pass it as `min_journal_seq` to a later read (null for a cancel: "
        "wait for the status instead)."))


class CancelAccepted(Accepted):
    """The session is cancelling: its cancellation is requested (now, or already)."""

    cancellation: Literal["requested", "already_requested"] = Field(
        description="`requested` by this call, or `already_requested` before it (a repeat "
        "cancel changes nothing)."
    )


class FormFieldView(BaseModel):
    name: str
    label: str = ""
    type: str = "string"
    required: bool = True


class PendingRequestView(BaseModel):
    """What the session waits for; a reply must name ``request_id``."""

    request_id: str
    kind: RequestKind  # one place: workflows.session_state
    prompt: str
    execution_id: str | None = None
    options: list[str] = Field(default_factory=list)
    fields: list[FormFieldView] = Field(default_factory=list)
    created_at: datetime
    reason_code: str | None = Field(default=None, description=(
        "Why the session asks, as a code: `outcome_unknown` when it asks whether a call "
        "that may have run happened (options done / not done / try again)."))
    output: str | None = Field(default=None, description=(
        "What the person must look at to decide: a `verify: human` plan step's output."))
    asked: dict[str, Any] | None = Field(default=None, description=(
        "Exactly what is asked: a tool call's `{server, tool, arguments}`, a plan step's "
        "`{step, command}`, a question's `{kind, prompt, options, fields}`."))
    digest: str | None = Field(default=None, description=(
        "The digest of exactly what is asked (`sha256:` and the sha256 of `asked` in "
        "canonical JSON); send it back with the reply."))
    approvers: list[str] = Field(default_factory=list, description=(
        "Who may answer, from the rule that matched (empty: the session's owner and "
        "approvers, or an operator)."))
    rule: str | None = Field(default=None, description="The decision rule that asks.")
    approvals_required: int = Field(default=1, description=(
        "Distinct approvals it needs (two-person rule)."))
    approvals: list[PrincipalRef] = Field(default_factory=list, description=(
        "Who has approved it so far."))
    separation_of_duties: bool = False
    editable: bool = False
    reminded_at: datetime | None = Field(default=None, description=(
        "When the wait reminded the request's addressees (`remind_after_s`)."))
    escalated_at: datetime | None = Field(default=None, description=(
        "When the wait escalated it (`escalate_after_s`): `approvers` holds its "
        "addressees from then on."))
    escalated_to: list[str] = Field(default_factory=list, description=(
        "The entries the escalation added (`escalate_to`, less those already asked)."))


class FcmpEventView(BaseModel):
    type: str
    payload: dict[str, Any]


class StatusChangeView(BaseModel):
    from_status: SessionStatus
    to_status: SessionStatus
    event: str
    at: datetime
    fcmp: list[FcmpEventView] = Field(default_factory=list)


SEQ = ("The log line the answer reflects (0: none yet); also the `X-Hitlflow-Seq` header. "
       "Pass it as `min_seq` to read at least as fresh again.")
STALE = ("The `min_seq`/`min_journal_seq` asked for was not reached within the wait: this is "
         "the older answer (also `X-Hitlflow-Stale: true`).")

NEXT_CURSOR = Field(default=None, description=(
    "Pass as `cursor` for the next page (opaque); null on the last page."))


class StuckView(BaseModel):
    """The session's workflow task fails on every attempt (a bug, a non-determinism,
    a payload over Temporal's limit): it takes no requests until the cause is fixed."""

    since: datetime | None = Field(
        description="When the first failure of this streak was recorded (null if unknown).")
    failed_attempts: int = Field(
        ge=1, description="How many times in a row the workflow task has failed so far.")
    cause: str | None = Field(
        description="The last failure's cause, Temporal's WorkflowTaskFailedCause without "
        "its prefix (e.g. `WORKFLOW_WORKER_UNHANDLED_FAILURE`, `PAYLOADS_TOO_LARGE`), or "
        "`TIMED_OUT_<type>`.")
    message: str | None = Field(description="The last failure's message.")
    reason: str = Field(description="`<cause>: <message>`, for a person.")


class RefusalView(BaseModel):
    rule: str
    message: str


class YouView(BaseModel):
    """What the principal who reads the session may do to it now (the inbox shows
    why a request is not theirs instead of a button that fails)."""

    may_answer: bool = Field(description="They may answer the pending request.")
    refusal: RefusalView | None = Field(default=None, description=(
        "Why they may not answer it (null when they may, or nothing is pending)."))
    may_cancel: bool
    may_end: bool


class StandingList(BaseModel):
    """The session's standing decisions ("approve, and do not ask again")."""

    session_id: str
    standing: list[StandingDecision]


class ForkedFromView(BaseModel):
    """The session a fork began from: its id, the line of its log (``seq``) and that
    line's ``line_hash`` (the fork's log's line 1, ``SESSION_FORKED``)."""

    session_id: str
    seq: int
    line_hash: str


class ForkView(BaseModel):
    """A session forked from this one, and the line of this session's log it began at."""

    session_id: str
    seq: int


class SessionView(BaseModel):
    """A session: canonical status, pending request, counters, and one page of its
    contracts as snapshots (the log's, overlaid by the live query's). Memory and
    status history are paged separately (`/memory`, `/history`).

    ``live`` is false when no worker answered: the status is Temporal's record of
    the session and everything else comes from its exported log (if any).
    ``stuck`` is set (and ``live`` false) when its workflow task keeps failing:
    ``status`` is then the last status the session recorded.
    """

    session_id: str
    status: SessionStatus | None
    execution_status: ExecutionStatusName | None = None
    live: bool = True
    mode: str | None = None
    pending: PendingRequestView | None = None
    contracts: list[ExecutionSnapshot] = Field(default_factory=list)
    contracts_total: int = 0
    next_cursor: str | None = NEXT_CURSOR
    replies: int = 0
    turns: int = 0
    llm_calls: int = 0
    failure_reason: str | None = None
    last_text: str | None = None
    stuck: StuckView | None = Field(
        default=None, description="Set when the session's workflow task keeps failing.")
    waiting_since: datetime | None = None
    seq: int = Field(default=0, description=SEQ)
    journal_seq: int = Field(default=0, description="Journal entries the answer reflects.")
    stale: bool = Field(default=False, description=STALE)
    you: YouView | None = Field(default=None, description=(
        "What the principal reading it may do to it now."))
    forked_from: ForkedFromView | None = Field(default=None, description=(
        "A fork's parent: the session and the line of its log it began at."))
    forks: list[ForkView] = Field(default_factory=list, description=(
        "The sessions forked from this one that the reader may see (at most 100), each "
        "with the line of this session's log it began at (from the read model)."))


class MemoryPage(BaseModel):
    """The session's memory `execution_fact`s (seed 000), oldest first."""

    session_id: str
    facts: list[ExecutionFact]
    total: int
    next_cursor: str | None = NEXT_CURSOR
    seq: int = Field(default=0, description=SEQ)


class HistoryPage(BaseModel):
    """The session's status changes with their FCMP events, oldest first."""

    session_id: str
    status_history: list[StatusChangeView]
    total: int
    next_cursor: str | None = NEXT_CURSOR
    seq: int = Field(default=0, description=SEQ)


class TimelinePage(ExecutionTimeline):
    """Seed 000's timeline, one page of contracts at a time: the counts are over
    every contract; `transitions` are those of the contracts on this page."""

    next_cursor: str | None = NEXT_CURSOR
    seq: int = Field(default=0, description=SEQ)


class SessionSummary(BaseModel):
    session_id: str
    status: SessionStatus | None = Field(
        description="The SessionStatus search attribute (null if the session never set it)."
    )
    execution_status: ExecutionStatusName | None
    started_at: datetime | None = None
    closed_at: datetime | None = None
    waiting_since: datetime | None = None
    task_queue: str | None = None
    pending: PendingRequestView | None = Field(default=None, description=(
        "What the session waits for (from the read model; null when listed through "
        "Temporal visibility, i.e. with `stuck`)."))
    problems: list[str] = Field(
        default_factory=list,
        description="Temporal's `TemporalReportedProblems` search attribute (server 1.28+), "
        "e.g. `category=WorkflowTaskFailed`: set once the workflow task has failed several "
        "times in a row, cleared when a task succeeds.")
    stuck: bool = Field(default=False, description="`problems` is not empty: the session's "
                        "workflow task keeps failing (GET the session for why).")
    seq: int | None = Field(default=None, description="The log line the read model's row "
                            "reflects (null when listed through Temporal visibility).")


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    next_cursor: str | None = NEXT_CURSOR
    next_page_token: str | None = Field(
        default=None, json_schema_extra={"deprecated": True},
        description="Deprecated (until the next release): `next_cursor` under its old name.")

    @model_validator(mode="after")
    def _old_name(self) -> SessionList:
        self.next_page_token = self.next_cursor
        return self


class TemporalHealth(BaseModel):
    reachable: bool
    target: str
    namespace: str
    error: str | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    temporal: TemporalHealth
