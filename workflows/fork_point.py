"""Where a plan session may be forked (issue 27): pure, and light enough for
``observation`` to import (no LLM, tool or schema libraries).

A plan session (seed 002) forks at a step boundary, the point before step ``k``:

- ``boundary``: step ``k - 1`` ended (done, approved or skipped by a person, reset)
  and the plan goes on to run step ``k``, nothing of it run yet: no request, no open
  contract, no window;
- ``gate``: the plan waits at the gate of step ``k`` (only the gate's contract open);
- ``verify_human``: step ``k`` ran and waits for a person to verify it (only its
  contract open, suspended);
- ``on_fail_human``: step ``k`` failed (or was interrupted) and waits for a person to
  decide (no contract open).

A fork at a wait asks the person again in its own log (``workflows.fork.fork_input``)."""

from __future__ import annotations

from typing import Literal

from workflows.plan import StepWaiting, replay
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

PlanPoint = Literal["boundary", "gate", "verify_human", "on_fail_human"]
#: The plan's waits a fork asks again at.
PLAN_WAITS: tuple[str, ...] = ("gate", "verify_human", "on_fail_human")


def plan_point(state: SessionState) -> PlanPoint | None:
    """Which kind of step boundary ``state`` is at, or None (not a plan session, a
    step in flight, a window open, the plan over, or not at rest)."""
    plan, pending = state.config.plan, state.pending
    if plan is None or not state.plan_events:
        return None
    at = replay(len(plan.steps), state.plan_events)
    if at.finished or at.window_open:
        return None
    open_ids = [c.execution_id for c in state.open_contracts()]
    if state.status == SessionStatus.RUNNING:
        ok = (pending is None and not open_ids and at.waiting is None
              and at.current_step < len(plan.steps) and not plan.steps[at.current_step].gate)
        return "boundary" if ok else None
    last = state.plan_events[-1]
    if (state.status != SessionStatus.WAITING_USER or pending is None
            or pending.kind != "step" or not isinstance(last, StepWaiting)
            or last.reason != at.waiting or last.step != at.current_step):
        return None
    if last.reason == "on_fail_human":
        return "on_fail_human" if not open_ids else None
    if pending.execution_id is None or open_ids != [pending.execution_id]:
        return None
    return last.reason


def at_a_gate(state: SessionState) -> bool:
    """``state`` is a plan session waiting at the gate before its cursor's step, with
    no step in flight: the gate's contract is the only open one and the last plan
    event is the gate's wait."""
    return plan_point(state) == "gate"
