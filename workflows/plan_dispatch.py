"""What a plan session does with a decision: the events it records and what
comes next. Pure: ``resolve()`` decides, ``dispatch()`` says how to act on it,
the workflow only carries it out (seed 002 section 6).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from workflows.io import CommandResult
from workflows.plan import (
    Action,
    Advance,
    Fail,
    PlanEvent,
    PlanState,
    Retry,
    StepApproved,
    StepCompleted,
    StepReset,
    StepSkipped,
    StepWaiting,
    TaskReset,
    TaskStopped,
    WindowLost,
    YieldOnFailHuman,
    YieldVerifyHuman,
)

Next = Literal["advance", "retry", "wait_verify_human", "wait_on_fail_human", "stop"]
STEP_CHOICES = ["approve", "skip", "reset", "reset_task"]


class Dispatch(BaseModel):
    events: list[PlanEvent]
    then: Next
    feedback: str = ""


def completed(step: int, exit_code: int, out: CommandResult | None, feedback: str = "",
              verify_failed: bool = False) -> StepCompleted:
    """StepCompleted with the run output; a failed verify reports exit 1 and only
    the verify command's output, as stderr: seed 002 section 4, "the run's
    stdout/stderr are intentionally discarded, the diagnosis comes from verify"
    (the run's duration is kept: it is not output)."""
    if out is None or verify_failed:
        return StepCompleted(step=step, exit_code=exit_code,
                             duration_s=out.duration_s if out is not None else None,
                             stderr=feedback or None)
    return StepCompleted(step=step, exit_code=exit_code, duration_s=out.duration_s,
                         stdout=out.stdout, stderr=feedback or out.stderr)


def dispatch(step: int, action: Action, out: CommandResult | None, exit_code: int,
             window_lost: str | None = None, *, verify_failed: bool = False) -> Dispatch:
    """The events for ``action`` at ``step`` and what the session does next.
    ``verify_failed``: the run succeeded and its verify command failed, so the
    failure records the verify's output only (seed 002 section 4)."""
    failed: list[PlanEvent] = (
        [WindowLost(step=step, reason=window_lost)] if window_lost is not None else
        [completed(step, exit_code, out, getattr(action, "feedback", ""), verify_failed)]
    )
    match action:
        case Advance():
            return Dispatch(events=[completed(step, 0, out)], then="advance")
        case YieldVerifyHuman():
            return Dispatch(events=[completed(step, 0, out),
                                    StepWaiting(step=step, reason="verify_human")],
                            then="wait_verify_human")
        case Retry():
            return Dispatch(events=[*failed, StepReset(step=step, to_step=step, reason="retry",
                                                       retry_count=action.attempt)],
                            then="retry", feedback=action.feedback)
        case YieldOnFailHuman():
            return Dispatch(events=[*failed, StepWaiting(step=step, reason="on_fail_human",
                                                         feedback=action.feedback)],
                            then="wait_on_fail_human", feedback=action.feedback)
        case Fail():
            return Dispatch(events=[*failed, TaskStopped(reason=action.reason.value, step=step,
                                                         feedback=action.feedback)],
                            then="stop", feedback=action.feedback)
    raise AssertionError(f"unhandled action {action!r}")


OUTPUT_SHOWN = 2000  # characters of a step's output shown to the person who verifies it


def step_output(events: list[PlanEvent]) -> dict[str, Any] | None:
    """What a step's run produced (its ``StepCompleted``): the contract's result."""
    done = next((e for e in events if isinstance(e, StepCompleted)), None)
    if done is None:
        return None
    return {"exit_code": done.exit_code, "stdout": done.stdout or "",
            "stderr": done.stderr or ""}


def output_text(output: dict[str, Any] | None) -> str | None:
    """The output as a person reads it: stdout, then stderr (its end, when long)."""
    if output is None:
        return None
    text = "\n".join(x for x in (output["stdout"].rstrip(), output["stderr"].rstrip()) if x)
    text = text or f"(no output; exit code {output['exit_code']})"
    return text if len(text) <= OUTPUT_SHOWN else "…" + text[-OUTPUT_SHOWN:]


def step_command_problem(state: PlanState, choice: str | None, values: dict[str, Any] | None
                         ) -> str | None:
    """Why a person's command cannot apply now (seed 002: no reset forward or out of
    the plan), or None."""
    if choice not in STEP_CHOICES:
        return f"`choice` must be one of {STEP_CHOICES}"
    if choice == "reset":
        to = (values or {}).get("to_step", state.current_step)
        if not isinstance(to, int) or isinstance(to, bool):
            return "`values.to_step` must be a step index (an integer)"
        if to < 0 or to >= state.steps:
            return f"there is no step {to}: the plan has steps 0 to {state.steps - 1}"
        if to > state.current_step:
            return f"reset to step {to} would move forward past the cursor ({state.current_step})"
    return None


def person_command(state: PlanState, choice: str, values: dict[str, Any] | None, by: str
                   ) -> list[PlanEvent]:
    """The event of a person's command at the cursor (validated before)."""
    step = state.current_step
    if choice == "approve":
        return [StepApproved(step=step, by=by)]
    if choice == "skip":
        return [StepSkipped(step=step, by=by)]
    if choice == "reset":
        to = (values or {}).get("to_step", step)
        return [StepReset(step=step, to_step=to, reason="human")]
    return [TaskReset(by=by)]
