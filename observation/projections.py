"""Read-only projections of ExecutionContracts (seed 000), for readers.

The views the workflow itself uses (snapshots, consequence views, execution facts,
the timeline) are defined in ``workflows.execution_views`` and exported from here
too; what only a reader needs (a snapshot at the reader's clock, a contract's
history, the ``execution_state`` SSE event) is defined here. All pure: nothing reads
a clock, and nothing writes to a contract.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from workflows.contract import (
    CONTRACT_TABLE,
    ExecutionContract,
    ExecutionStatus,
    TransitionRecord,
    summarize_action,
)
from workflows.execution_views import (
    CONSEQUENCE_LABEL,
    SUMMARY_LIMIT,
    ConsequenceLabel,
    ExecutionConsequenceView,
    ExecutionFact,
    ExecutionObserver,
    ExecutionSnapshot,
    ExecutionTimeline,
    consequence_view,
    execution_fact,
    execution_snapshot,
    has_side_effects,
    has_suspended,
    merge_transitions,
    ms_between,
    render_facts_for_prompt,
    render_for_prompt,
    timeline,
    truncate,
    was_suspended,
)

__all__ = [
    "CONSEQUENCE_LABEL",
    "SUMMARY_LIMIT",
    "ConsequenceLabel",
    "ExecutionConsequenceView",
    "ExecutionFact",
    "ExecutionObserver",
    "ExecutionSnapshot",
    "ExecutionStateEvent",
    "ExecutionTimeline",
    "at_reader_clock",
    "consequence_view",
    "execution_fact",
    "execution_snapshot",
    "execution_state_event",
    "has_side_effects",
    "has_suspended",
    "merge_transitions",
    "render_facts_for_prompt",
    "render_for_prompt",
    "timeline",
    "transition_history",
    "truncate",
    "was_suspended",
]


def at_reader_clock(snap: ExecutionSnapshot, now: datetime) -> ExecutionSnapshot:
    """``snap`` with ``duration_in_state_ms`` from the reader's clock: a snapshot
    made inside the workflow (``workflow.now()`` stands still while it waits) or
    stored in the read model is recomputed where it is served."""
    duration = ms_between(now, snap.entered_state_at)
    if duration == snap.duration_in_state_ms:
        return snap
    return snap.model_copy(update={"duration_in_state_ms": duration})


def transition_history(contract: ExecutionContract) -> list[TransitionRecord]:
    """Seed 000's per-execution history (v1-minimal): records in order."""
    return sorted(contract.transitions, key=lambda t: t.timestamp)


class ExecutionStateEvent(BaseModel):
    """The payload of seed 000's ``execution_state`` SSE event, one per transition."""

    model_config = ConfigDict(frozen=True)
    execution_id: str
    action_summary: str
    from_status: ExecutionStatus
    to_status: ExecutionStatus
    trigger: str
    actor_category: str
    is_terminal: bool
    is_resumable: bool
    has_side_effects: bool
    timestamp: datetime


def execution_state_event(
    contract: ExecutionContract, record: TransitionRecord
) -> ExecutionStateEvent:
    return ExecutionStateEvent(
        execution_id=record.execution_id,
        action_summary=summarize_action(contract.action_type, contract.action_detail),
        from_status=record.from_status,
        to_status=record.to_status,
        trigger=record.trigger.value,
        actor_category=record.actor_category,
        is_terminal=record.to_status in CONTRACT_TABLE.terminal,
        is_resumable=record.to_status in CONTRACT_TABLE.resumable,
        has_side_effects=has_side_effects(contract),
        timestamp=record.timestamp,
    )
