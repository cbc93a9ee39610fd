"""Where a plan session may be forked (issue 27): pure, and light enough for
``observation`` to import (no LLM, tool or schema libraries).

A plan session (seed 002) forks at a step boundary: where the plan waits at the gate
before step ``k`` (its cursor at ``k``, nothing of step ``k`` run)."""

from __future__ import annotations

from workflows.plan import StepWaiting, replay
from workflows.session_state import SessionState


def at_a_gate(state: SessionState) -> bool:
    """``state`` is a plan session waiting at the gate before its cursor's step, with
    no step in flight: the gate's contract is the only open one and the last plan
    event is the gate's wait."""
    plan, pending = state.config.plan, state.pending
    if plan is None or pending is None or pending.kind != "step" or not state.plan_events:
        return False
    at = replay(len(plan.steps), state.plan_events)
    last = state.plan_events[-1]
    return (at.waiting == "gate" and not at.window_open and isinstance(last, StepWaiting)
            and last.reason == "gate" and last.step == at.current_step
            and pending.execution_id is not None
            and [c.execution_id for c in state.open_contracts()] == [pending.execution_id])
