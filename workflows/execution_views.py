"""What the workflow itself knows of its ExecutionContracts (seed 000): snapshots,
consequence views, execution facts, the timeline, and the prompt text made of them.

Every function here is pure: it takes contracts and a ``now`` and returns a
model. Nothing reads a clock, and nothing writes to a contract. The workflow uses
them (its queries, its memory, what the model is told); ``observation.projections``
serves the same to readers.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from workflows.contract import (
    CONTRACT_TABLE,
    ActionType,
    ExecutionContract,
    ExecutionStatus,
    TransitionRecord,
    summarize_action,
)
from workflows.fsm import StateMachineTopology, derive_topology

ConsequenceLabel = Literal[
    "PENDING", "RUNNING", "WAITING", "SUCCESS", "FAILED", "REJECTED", "CANCELLED"
]

# The one mapping from contract status to what the reasoner is told.
CONSEQUENCE_LABEL: dict[ExecutionStatus, ConsequenceLabel] = {
    ExecutionStatus.PENDING: "PENDING",
    ExecutionStatus.RUNNING: "RUNNING",
    ExecutionStatus.WAITING: "WAITING",
    ExecutionStatus.COMPLETED: "SUCCESS",
    ExecutionStatus.FAILED: "FAILED",
    ExecutionStatus.REJECTED: "REJECTED",
    ExecutionStatus.CANCELLED: "CANCELLED",
}

SUMMARY_LIMIT = 200


class ExecutionSnapshot(BaseModel):
    model_config = ConfigDict(frozen=True)
    execution_id: str
    session_id: str
    action_type: ActionType
    action_summary: str
    current_status: ExecutionStatus
    is_terminal: bool
    is_stable: bool
    is_resumable: bool
    irreversible: bool
    # Seed 000's snapshot meaning (``has_side_effects(contract)``): the action is one
    # that changes the world, whatever its status (a WAITING irreversible call: true).
    has_side_effects: bool
    idempotency_key: str | None
    transition_count: int
    last_trigger: str | None
    last_actor: str | None
    last_actor_category: str | None
    entered_state_at: datetime
    duration_in_state_ms: int
    created_at: datetime
    result: Any = None
    error_message: str | None = None


class ExecutionConsequenceView(BaseModel):
    """What the reasoning step is told about an action (seed 000, invariant 4)."""

    model_config = ConfigDict(frozen=True)
    execution_id: str
    action_type: ActionType
    action_summary: str
    consequence_label: ConsequenceLabel
    irreversible: bool
    # Whether side effects have *happened* (only once the action completed).
    has_side_effects: bool
    was_suspended: bool
    is_still_pending: bool
    result: Any = None
    error_message: str | None = None


class ExecutionTimeline(BaseModel):
    model_config = ConfigDict(frozen=True)
    session_id: str
    total_contracts: int
    terminal_contracts: int
    active_contracts: int
    # Seed 000's meaning (``has_suspended(contracts)``): some contract was suspended
    # (went through WAITING), whether or not it still waits.
    has_suspended: bool
    contracts: list[ExecutionSnapshot]
    transitions: list[TransitionRecord]


class ExecutionFact(BaseModel):
    """A memory entry for a terminal contract: the outcome, never the history."""

    model_config = ConfigDict(frozen=True)
    type: Literal["execution_fact"] = "execution_fact"
    execution_id: str
    action_type: ActionType
    action_summary: str
    final_status: ExecutionStatus
    irreversible: bool
    duration_ms: int
    result_summary: str | None = None
    error_summary: str | None = None
    recorded_at: datetime


def ms_between(later: datetime, earlier: datetime) -> int:
    """Milliseconds from ``earlier`` to ``later``, never negative."""
    return max(0, int((later - earlier).total_seconds() * 1000))


def truncate(text: Any, limit: int = SUMMARY_LIMIT) -> str:
    s = text if isinstance(text, str) else repr(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def has_side_effects(contract: ExecutionContract) -> bool:
    """THE definition of a snapshot's (and the timeline's) ``has_side_effects``
    (seed 000, "Snapshot of a WAITING contract": true for a waiting irreversible
    call): the action changes the world. The consequence view's field of the same
    name says whether they *happened* (seed 000: false while WAITING). The SSE
    ``execution_state`` event uses this one too (log format v2)."""
    return contract.irreversible


def has_suspended(contracts: Iterable[ExecutionContract]) -> bool:
    """THE definition of ``has_suspended`` (timelines, sessions, the read model):
    some contract was suspended at some point (seed 000's ``was_suspended``)."""
    return any(was_suspended(c) for c in contracts)


def merge_transitions(
    per_contract: Iterable[Iterable[TransitionRecord]],
) -> list[TransitionRecord]:
    """Transitions of contracts given in creation order, merged by time. Equal times
    keep the order recorded (creation order, then each contract's own order): a
    step's ``running -> completed`` comes before the next step's transitions at the
    same instant (a stable sort; never by execution id)."""
    return sorted((t for ts in per_contract for t in ts), key=lambda t: t.timestamp)


def execution_snapshot(contract: ExecutionContract, now: datetime) -> ExecutionSnapshot:
    last = contract.transitions[-1] if contract.transitions else None
    entered = last.timestamp if last else contract.created_at
    status = contract.status
    return ExecutionSnapshot(
        execution_id=contract.execution_id,
        session_id=contract.session_id,
        action_type=contract.action_type,
        action_summary=summarize_action(contract.action_type, contract.action_detail),
        current_status=status,
        is_terminal=status in CONTRACT_TABLE.terminal,
        is_stable=status in CONTRACT_TABLE.stable,
        is_resumable=status in CONTRACT_TABLE.resumable,
        irreversible=contract.irreversible,
        has_side_effects=has_side_effects(contract),
        idempotency_key=contract.idempotency_key,
        transition_count=len(contract.transitions),
        last_trigger=last.trigger.value if last else None,
        last_actor=last.actor if last else None,
        last_actor_category=last.actor_category if last else None,
        entered_state_at=entered,
        duration_in_state_ms=ms_between(now, entered),
        created_at=contract.created_at,
        result=contract.result,
        error_message=contract.error_message,
    )


def was_suspended(contract: ExecutionContract) -> bool:
    return any(t.to_status == ExecutionStatus.WAITING for t in contract.transitions)


def consequence_view(contract: ExecutionContract) -> ExecutionConsequenceView:
    status = contract.status
    return ExecutionConsequenceView(
        execution_id=contract.execution_id,
        action_type=contract.action_type,
        action_summary=summarize_action(contract.action_type, contract.action_detail),
        consequence_label=CONSEQUENCE_LABEL[status],
        irreversible=contract.irreversible,
        has_side_effects=contract.irreversible and status == ExecutionStatus.COMPLETED,
        was_suspended=was_suspended(contract),
        is_still_pending=status not in CONTRACT_TABLE.terminal,
        result=contract.result if status == ExecutionStatus.COMPLETED else None,
        error_message=contract.error_message,
    )


def timeline(
    session_id: str, contracts: list[ExecutionContract], now: datetime
) -> ExecutionTimeline:
    ordered = sorted(contracts, key=lambda c: (c.created_at, c.execution_id))
    terminal = sum(1 for c in ordered if c.is_terminal)
    merged = merge_transitions(c.transitions for c in ordered)
    return ExecutionTimeline(
        session_id=session_id,
        total_contracts=len(ordered),
        terminal_contracts=terminal,
        active_contracts=len(ordered) - terminal,
        has_suspended=has_suspended(ordered),
        contracts=[execution_snapshot(c, now) for c in ordered],
        transitions=merged,
    )


def execution_fact(contract: ExecutionContract, now: datetime) -> ExecutionFact:
    """The memory entry of a terminal contract; refused for an open one."""
    if not contract.is_terminal:
        raise ValueError(
            f"contract {contract.execution_id} is {contract.status.value}: "
            "only a terminal contract becomes an execution fact"
        )
    ended = contract.transitions[-1].timestamp if contract.transitions else now
    completed = contract.status == ExecutionStatus.COMPLETED
    return ExecutionFact(
        execution_id=contract.execution_id,
        action_type=contract.action_type,
        action_summary=summarize_action(contract.action_type, contract.action_detail),
        final_status=contract.status,
        irreversible=contract.irreversible,
        duration_ms=ms_between(ended, contract.created_at),
        result_summary=truncate(contract.result) if completed and contract.result is not None
        else None,
        error_summary=None if completed else truncate(
            contract.error_message or f"ended {contract.status.value}"
        ),
        recorded_at=now,
    )


def render_for_prompt(views: list[ExecutionConsequenceView]) -> str:
    """The text a consequence view puts into the LLM prompt (no raw contracts)."""
    lines = []
    for v in views:
        flags = []
        if v.has_side_effects:
            flags.append("has_side_effects=true")
        if v.was_suspended:
            flags.append("was_suspended=true")
        if v.irreversible and not v.has_side_effects:
            flags.append("irreversible")
        head = f"[{v.consequence_label}] {v.action_summary} (execution {v.execution_id}"
        head += (", " + ", ".join(flags) if flags else "") + ")"
        if v.result is not None:
            head += f": result: {truncate(v.result, 2000)}"
        elif v.error_message:
            head += f": error: {truncate(v.error_message, 2000)}"
        lines.append(head)
    return "\n".join(lines)


def render_facts_for_prompt(facts: list[ExecutionFact]) -> str:
    lines = []
    for f in facts:
        line = f"- {f.action_summary}: {f.final_status.value}"
        if f.irreversible:
            line += " (irreversible)"
        if f.result_summary:
            line += f"; result: {f.result_summary}"
        if f.error_summary:
            line += f"; error: {f.error_summary}"
        lines.append(line)
    return "\n".join(lines)


class ExecutionObserver:
    """Seed 000's observer over one session's contracts, at one instant."""

    def __init__(self, session_id: str, contracts: list[ExecutionContract], now: datetime):
        self.session_id = session_id
        self._contracts = list(contracts)
        self._now = now

    def snapshot(self, execution_id: str) -> ExecutionSnapshot:
        for c in self._contracts:
            if c.execution_id == execution_id:
                return execution_snapshot(c, self._now)
        raise KeyError(execution_id)

    def consequence_views(self) -> list[ExecutionConsequenceView]:
        ordered = sorted(self._contracts, key=lambda c: (c.created_at, c.execution_id))
        return [consequence_view(c) for c in ordered]

    def timeline(self) -> ExecutionTimeline:
        return timeline(self.session_id, self._contracts, self._now)

    @staticmethod
    def topology() -> StateMachineTopology:
        return derive_topology(CONTRACT_TABLE)
