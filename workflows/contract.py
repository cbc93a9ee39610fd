"""The ExecutionContract of seed 001: one per executable action, a 7-state FSM.

The transition table is declared once (``CONTRACT_TABLE``); everything else —
validation, topology, docs — is derived from it. Timestamps are always passed
in (the workflow passes ``workflow.now()``): nothing here reads a clock.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from workflows.canonical import canonical_json
from workflows.fsm import Edge, InvalidTransitionError, TransitionTable


class ExecutionStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


class Trigger(StrEnum):
    START = "start"
    SUCCEED = "succeed"
    FAIL = "fail"
    REJECT = "reject"
    SUSPEND = "suspend"
    RESUME = "resume"
    CANCEL = "cancel"
    TIMEOUT = "timeout"


class ActionType(StrEnum):
    TOOL_CALL = "tool_call"
    ECS_REQUEST = "ecs_request"
    PLAN_STEP = "plan_step"


class Actor(StrEnum):
    """Who fired a trigger. Each actor belongs to one category (``ACTOR_CATEGORY``)."""

    REASONING = "reasoning"
    TOOL_NODE = "tool_node"
    ECS_NODE = "ecs_node"
    USER = "user"
    SYSTEM = "system"
    TIMER = "timer"
    PLAN = "plan"
    VERIFY = "verify"
    WINDOW = "window"


ACTOR_CATEGORY: dict[Actor, str] = {
    Actor.REASONING: "agent",
    Actor.TOOL_NODE: "tool",
    Actor.ECS_NODE: "interaction",
    Actor.USER: "human",
    Actor.SYSTEM: "system",
    Actor.TIMER: "system",
    Actor.PLAN: "machine",
    Actor.VERIFY: "machine",
    Actor.WINDOW: "environment",
}

# Each category's actor where it has one only; ``system`` and ``machine`` have two.
_ACTOR_OF_CATEGORY: dict[str, Actor] = {
    "agent": Actor.REASONING, "tool": Actor.TOOL_NODE, "interaction": Actor.ECS_NODE,
    "human": Actor.USER, "environment": Actor.WINDOW,
}


def actor_of(category: str, trigger: str, *, gate: bool | None = None) -> str:
    """The actor (seed 001's names: ``tool_node``, ``reasoning``, ``user``...) of a
    transition known by its category and trigger only, as seed 000's
    ``execution_state`` carries it. The one mapping every reader uses (the log's
    fold, the command line). ``system`` resumes and times out by its timer;
    ``machine`` is the plan but for a ``verify: human`` suspension (``gate`` False;
    None: not known, taken for the plan)."""
    if category == "system":
        return (Actor.TIMER if trigger in ("resume", "timeout") else Actor.SYSTEM).value
    if category == "machine":
        return (Actor.VERIFY if trigger == "suspend" and gate is False else Actor.PLAN).value
    actor = _ACTOR_OF_CATEGORY.get(category)
    return actor.value if actor is not None else category


S, T = ExecutionStatus, Trigger

CONTRACT_TABLE: TransitionTable[ExecutionStatus, Trigger] = TransitionTable(
    name="execution_contract",
    states=ExecutionStatus,
    triggers=Trigger,
    initial=S.PENDING,
    terminal=frozenset({S.COMPLETED, S.FAILED, S.REJECTED, S.CANCELLED}),
    # WAITING can remain indefinitely; terminal states never change again.
    stable=frozenset({S.WAITING, S.COMPLETED, S.FAILED, S.REJECTED, S.CANCELLED}),
    resumable=frozenset({S.WAITING}),
    edges=(
        Edge(S.PENDING, T.START, S.RUNNING, doc="the action begins"),
        Edge(S.RUNNING, T.SUCCEED, S.COMPLETED, doc="the action produced its result"),
        Edge(S.RUNNING, T.FAIL, S.FAILED, doc="the action raised or returned an error"),
        Edge(S.RUNNING, T.REJECT, S.REJECTED, doc="the person declined it"),
        Edge(S.RUNNING, T.SUSPEND, S.WAITING, doc="it needs the person first"),
        Edge(S.RUNNING, T.CANCEL, S.CANCELLED, doc="the session was cancelled"),
        Edge(S.WAITING, T.RESUME, S.RUNNING, doc="the person answered"),
        Edge(S.WAITING, T.CANCEL, S.CANCELLED, doc="the session was cancelled"),
        Edge(S.WAITING, T.TIMEOUT, S.CANCELLED, doc="nobody answered in time"),
    ),
)


class TransitionRecord(BaseModel):
    execution_id: str
    from_status: ExecutionStatus
    to_status: ExecutionStatus
    trigger: Trigger
    actor: str
    actor_category: str
    timestamp: datetime


class ExecutionStep(BaseModel):
    """One entry of a session's ``execution_trace`` (seed 001)."""

    node_id: str
    action: dict[str, Any]
    timestamp: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_record(cls, record: TransitionRecord, **metadata: Any) -> ExecutionStep:
        return cls(
            node_id=record.actor,
            action={
                "contract_id": record.execution_id,
                "from": record.from_status.value,
                "to": record.to_status.value,
                "trigger": record.trigger.value,
            },
            timestamp=record.timestamp,
            metadata={"actor_category": record.actor_category, **metadata},
        )


class ResumeRefusedError(ValueError):
    """Resume asked of a contract that is not WAITING (seed 001): nothing runs."""


class ExecutionContract(BaseModel):
    execution_id: str
    session_id: str
    action_type: ActionType
    action_detail: dict[str, Any] = Field(default_factory=dict)
    irreversible: bool = False
    idempotency_key: str | None = None
    status: ExecutionStatus = ExecutionStatus.PENDING
    result: Any = None
    error_message: str | None = None
    # Why it ended (or waits) as it did, as a code (``workflows.outcome``): e.g.
    # ``outcome_unknown`` for a call that may have run; None for the ordinary cases.
    reason_code: str | None = None
    transitions: list[TransitionRecord] = Field(default_factory=list)
    created_at: datetime

    @property
    def is_terminal(self) -> bool:
        return CONTRACT_TABLE.is_terminal(self.status)

    def transition(
        self,
        trigger: Trigger | str,
        *,
        actor: Actor | str,
        timestamp: datetime,
        result: Any = None,
        error_message: str | None = None,
        reason_code: str | None = None,
    ) -> TransitionRecord:
        """Fire ``trigger``; on a transition not in the table raise and change nothing."""
        target = CONTRACT_TABLE.target(self.status, trigger)
        actor_name = str(actor)
        category = ACTOR_CATEGORY.get(actor_name, "external")  # type: ignore[call-overload]
        record = TransitionRecord(
            execution_id=self.execution_id,
            from_status=self.status,
            to_status=target,
            trigger=Trigger(trigger),
            actor=actor_name,
            actor_category=category,
            timestamp=timestamp,
        )
        self.status = target
        self.transitions.append(record)
        if result is not None:
            self.result = result
        if error_message is not None:
            self.error_message = error_message
        if reason_code is not None:
            self.reason_code = reason_code
        return record

    def resume(self, *, actor: Actor | str, timestamp: datetime) -> TransitionRecord:
        """WAITING -> RUNNING after the person answered; refused from any other status."""
        if self.status != ExecutionStatus.WAITING:
            raise ResumeRefusedError(
                f"contract {self.execution_id} is {self.status.value}, not waiting: "
                "there is nothing to resume"
            )
        return self.transition(Trigger.RESUME, actor=actor, timestamp=timestamp)


# -- idempotency of irreversible actions (seed 001) ---------------------------


class IdempotencyDecision(BaseModel):
    allowed: bool
    reason: str
    completed_execution_id: str | None = None
    completed_result: Any = None


def idempotency_key_for(action_detail: dict[str, Any]) -> str:
    """A key that is the same for the same operation: sha256 of its canonical JSON."""
    canonical = canonical_json(action_detail, ascii_only=True, default=str)
    return "idem-" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def already_done_reason(execution_id: str) -> str:
    return (f"already completed: this irreversible operation ran as {execution_id} "
            "and will not run again")


def check_idempotency(
    contracts: list[ExecutionContract], idempotency_key: str | None
) -> IdempotencyDecision:
    """May a new contract with ``idempotency_key`` be created among ``contracts``?

    Refused when an irreversible contract with that key already COMPLETED; allowed
    otherwise (a FAILED one may be retried under a new ``execution_id``).
    """
    if idempotency_key is not None:
        for c in contracts:
            if (
                c.irreversible
                and c.idempotency_key == idempotency_key
                and c.status == ExecutionStatus.COMPLETED
            ):
                return IdempotencyDecision(
                    allowed=False,
                    reason=already_done_reason(c.execution_id),
                    completed_execution_id=c.execution_id,
                    completed_result=c.result,
                )
    return IdempotencyDecision(allowed=True, reason="no completed irreversible run with this key")


def summarize_action(action_type: ActionType | str, detail: dict[str, Any]) -> str:
    """A readable sentence for ``action_detail`` (seed 000's ``action_summary``)."""
    kind = ActionType(action_type)
    if kind is ActionType.TOOL_CALL:
        tool = detail.get("tool", "?")
        server = detail.get("server")
        args = detail.get("arguments") or {}
        shown = ", ".join(f"{k}={_short(v)}" for k, v in sorted(args.items()))
        where = f" on {server}" if server else ""
        return f"Call tool {tool}({shown}){where}"
    if kind is ActionType.ECS_REQUEST:
        verbs = {
            "confirm": "Ask the person to confirm",
            "choose": "Ask the person to choose",
            "form": "Ask the person to fill in",
            "approve": "Ask the person to approve",
        }
        verb = verbs.get(str(detail.get("kind", "")), "Ask the person")
        prompt = detail.get("prompt") or detail.get("title") or ""
        return f"{verb}: {prompt}" if prompt else verb
    step = detail.get("step", "?")
    run = detail.get("run") or detail.get("name") or ""
    return f"Run plan step {step}: {_short(run)}" if run else f"Run plan step {step}"


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = repr(text) if isinstance(value, str) else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "ACTOR_CATEGORY",
    "CONTRACT_TABLE",
    "ActionType",
    "Actor",
    "ExecutionContract",
    "ExecutionStatus",
    "ExecutionStep",
    "IdempotencyDecision",
    "InvalidTransitionError",
    "ResumeRefusedError",
    "TransitionRecord",
    "Trigger",
    "actor_of",
    "check_idempotency",
    "idempotency_key_for",
    "summarize_action",
]
