"""A session's state and the pure operations on it (no Temporal import).

The workflow owns one :class:`SessionState` and changes it only through
``workflows.session_book.SessionBook``, passing ``workflow.now()`` in. Everything here is
deterministic and testable without a server; the same state is what
continue-as-new carries and what the queries project.

The state holds only live state (DESIGN invariant 7): open contracts, the pending
request, counters, the journal position, and bounded windows of the recent past
(closed contracts, status changes, replies, facts, the model's context). The
whole past is in history and the log; nothing here grows with the session.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from workflows.config import EcsRequest, FormField, SessionConfig, ToolCallRequest
from workflows.contract import (
    ExecutionContract,
    ExecutionStatus,
    ExecutionStep,
)
from workflows.execution_views import ExecutionFact
from workflows.io import ChatMessage, ToolSpec
from workflows.people import PrincipalRef, StandingDecision
from workflows.plan import PlanEvent
from workflows.safety import SafetyClass
from workflows.statechart import FcmpEvent, SessionEvent, SessionStatus

RequestKind = Literal["approval", "confirm", "choose", "form", "message", "step", "window"]


class PendingRequest(BaseModel):
    """What the session waits for. ``request_id`` is what a reply must name."""

    request_id: str
    kind: RequestKind
    prompt: str
    execution_id: str | None = None
    options: list[str] = Field(default_factory=list)
    fields: list[FormField] = Field(default_factory=list)
    created_at: datetime
    # What the person must look at to decide (a plan step's output for `verify: human`).
    output: str | None = None
    # Why the session asks, as a code: ``outcome_unknown`` when it asks whether a
    # call that may have run did happen (``workflows.outcome``). Left out when None.
    reason_code: str | None = None
    # Who decides (workflows.people); each left out while it has its default, so
    # requests recorded before them read the same.
    # The digest of exactly what is asked (``people.digest_of(asked)``), and that.
    digest: str | None = None
    asked: dict[str, Any] | None = None
    # Who may answer, from the rule that matched (empty: the session's people).
    approvers: list[str] = Field(default_factory=list)
    rule: str | None = None
    approvals_required: int = 1
    separation_of_duties: bool = False
    # The approvals given so far (two-person rule): who, in order.
    approvals: list[PrincipalRef] = Field(default_factory=list)
    # Edit before approve: the tool's input schema the edited arguments must meet.
    editable: bool = False
    input_schema: dict[str, Any] | None = None
    # The wait's steps done (workflows.wait_policy; issue 26): each fires once, and
    # continue-as-new carries them here. Escalation also widens ``approvers``.
    reminded_at: datetime | None = None
    escalated_at: datetime | None = None

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name, default in _PENDING_DEFAULTS.items():
            if name in data and data[name] == default:
                data.pop(name)
        return data


#: The fields of a request left out of its JSON while they hold these.
_PENDING_DEFAULTS: dict[str, Any] = {
    "reason_code": None, "digest": None, "asked": None, "approvers": [], "rule": None,
    "approvals_required": 1, "separation_of_duties": False, "approvals": [],
    "editable": False, "input_schema": None, "reminded_at": None, "escalated_at": None,
}


class StatusChange(BaseModel):
    from_status: SessionStatus
    to_status: SessionStatus
    event: SessionEvent
    at: datetime
    fcmp: list[FcmpEvent] = Field(default_factory=list)


class ReplyRecord(BaseModel):
    """An accepted reply, kept once in the state (invariant 6)."""

    request_id: str
    kind: RequestKind
    answer: dict[str, Any]
    by: str
    at: datetime
    auto: bool = False
    # Who decided (issue 24): the principal the API set, or Temporal access. Left out
    # of the JSON while None (replies recorded before it).
    principal: PrincipalRef | None = None

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("principal") is None:
            data.pop("principal", None)
        return data


class UnansweredRequest(BaseModel):
    """A request that ended without the person's reply, so that a late reply is
    told what became of it (expired, or the auto-decision taken)."""

    request_id: str
    how: Literal["expired", "auto_decided"]
    at: datetime
    answer: dict[str, Any] | None = None


UNANSWERED_KEPT = 20  # bounded: continue-as-new carries only these last few


class QueuedAction(BaseModel):
    """One action of an LLM answer still to process: a tool call or an ECS request."""

    tool_call: ToolCallRequest | None = None
    ecs_request: EcsRequest | None = None


JournalKind = Literal[
    "session.status", "contract.created", "contract.transition", "reply.accepted",
    "message.accepted", "assistant.text", "plan.event", "llm.waiting", "reply.refused",
    # issue 24: one approval of several (two-person rule); a tool call decided without
    # a request (a rule, a standing decision); a standing decision revoked
    "approval.recorded", "request.decided", "standing.revoked",
    # issue 26: the wait's steps (workflows.wait_policy): a reminder, an escalation
    "request.reminded", "request.escalated",
    # issue 27: a message with if_busy interrupt ended the agent's turn (workflows.steering)
    "turn.interrupted",
]


class JournalEntry(BaseModel):
    """One fact the exporter cannot read off history by itself (DESIGN: history is
    the truth). The workflow writes these into history with ``upsert_memo``."""

    seq: int
    kind: JournalKind
    at: datetime
    data: dict[str, Any]


JOURNAL_RESULT_LIMIT = 4000
JOURNAL_MEMO_KEY = "hitlflow.journal"
# How much of the recent past the state keeps (closed contracts, status changes,
# replies, trace steps): enough for the live view and the current turn.
RECENT = 50
# A once-only result is kept this long in the idempotency ledger (for the model's
# "already done" message); the whole result is in history.
LEDGER_RESULT_LIMIT = 300


class OnceDone(BaseModel):
    """A completed once-only action (irreversible or at most once): never again."""

    execution_id: str
    result: Any = None


class SessionState(BaseModel):
    session_id: str
    config: SessionConfig
    status: SessionStatus = SessionStatus.QUEUED
    status_history: list[StatusChange] = Field(default_factory=list)
    contracts: list[ExecutionContract] = Field(default_factory=list)
    execution_trace: list[ExecutionStep] = Field(default_factory=list)
    memory: list[ExecutionFact] = Field(default_factory=list)
    conversation: list[ChatMessage] = Field(default_factory=list)
    replies: list[ReplyRecord] = Field(default_factory=list)
    pending: PendingRequest | None = None
    # Messages from the person not yet taken into a turn.
    inbox: list[str] = Field(default_factory=list)
    # Actions of the current LLM answer still to process, in order.
    queued_actions: list[QueuedAction] = Field(default_factory=list)
    tool_catalog: list[ToolSpec] | None = None
    llm_calls: int = 0
    turn_llm_calls: int = 0
    turns: int = 0
    # Model answers in a row with a mistake (AgentDriver.max_consecutive_mistakes).
    consecutive_mistakes: int = 0
    failure_reason: str | None = None
    continued_runs: int = 0
    # Totals of the whole session (the lists above keep only a recent window).
    contracts_total: int = 0
    replies_total: int = 0
    # Conversation messages dropped from the model's context (ContextPolicy).
    messages_dropped: int = 0
    # Idempotency keys of completed once-only actions (invariant 5), by key.
    once_done: dict[str, OnceDone] = Field(default_factory=dict)
    # A plan session's event log: its cursor is replay(plan_events) (seed 002).
    plan_events: list[PlanEvent] = Field(default_factory=list)
    # Journal entries not yet written to history, and how many ever were.
    journal_outbox: list[JournalEntry] = Field(default_factory=list)
    journal_seq: int = 0
    # The last UNANSWERED_KEPT requests that ended without a reply (newest last).
    unanswered: list[UnansweredRequest] = Field(default_factory=list)
    # "Approve, and do not ask again" (workflows.decisions; at most MAX_STANDING).
    standing_decisions: list[StandingDecision] = Field(default_factory=list)
    # Who sent each message of ``inbox`` (same order; None or missing: not known).
    inbox_from: list[PrincipalRef | None] = Field(default_factory=list)

    @model_validator(mode="after")
    def _upgrade(self) -> SessionState:
        # A state carried by an older version has whole lists but no totals and no
        # ledger: derive them, so its completed once-only actions stay done.
        self.contracts_total = max(self.contracts_total, len(self.contracts))
        self.replies_total = max(self.replies_total, len(self.replies))
        for c in self.contracts:
            record = once_done_record(c)
            if record is not None and c.idempotency_key not in self.once_done:
                self.once_done[c.idempotency_key] = record  # type: ignore[index]
        return self

    def carried(self) -> SessionState:
        """What the next run needs (DESIGN invariant 7): open contracts, the latest
        status change (when the wait began), the model's context, the counters.
        Closed contracts, the trace and the replies stay in history and the log."""
        return self.model_copy(update={
            "contracts": self.open_contracts(),
            "status_history": self.status_history[-1:],
            "execution_trace": [],
            "replies": [],
        })

    def contract(self, execution_id: str) -> ExecutionContract:
        for c in self.contracts:
            if c.execution_id == execution_id:
                return c
        raise KeyError(execution_id)

    def open_contracts(self) -> list[ExecutionContract]:
        return [c for c in self.contracts if not c.is_terminal]


def once_done_record(contract: ExecutionContract) -> OnceDone | None:
    """The ledger entry of a completed once-only action: irreversible, or at most
    once (a commit, never run twice either); None for anything else."""
    once = contract.irreversible or \
        contract.action_detail.get("safety") == SafetyClass.AT_MOST_ONCE.value
    if not (once and contract.idempotency_key and contract.status == ExecutionStatus.COMPLETED):
        return None
    return OnceDone(execution_id=contract.execution_id,
                    result=clip_result(contract.result, LEDGER_RESULT_LIMIT))


def clip_result(result: Any, limit: int = JOURNAL_RESULT_LIMIT) -> Any:
    """Results go into the journal whole unless large; the full value stays in the
    activity's completion event in history."""
    text = json.dumps(result, default=str)
    return result if len(text) <= limit else text[:limit] + "…"
