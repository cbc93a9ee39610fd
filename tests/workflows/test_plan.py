"""Seed 002 sections 2-7: ``resolve()``, the ten plan events, ``replay()``, PlanStep.

Every path of ``resolve()`` is walked from ``RESOLVE_PATHS``; the audit findings
V4, V9, V10 and V11 each have a test named after them.
"""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from workflows.plan import (
    PLAN_EVENT_ADAPTER,
    PLAN_EVENT_TYPES,
    RESOLVE_PATHS,
    Action,
    Advance,
    Fail,
    FailReason,
    PlanEvent,
    PlanReplayError,
    PlanState,
    PlanStep,
    Retry,
    StepApproved,
    StepCompleted,
    StepReset,
    StepSkipped,
    StepWaiting,
    TaskReset,
    TaskStarted,
    TaskStopped,
    ToolRun,
    VerifyCmd,
    VerifyOutcome,
    WindowLaunched,
    WindowLost,
    YieldOnFailHuman,
    YieldVerifyHuman,
    apply,
    replay,
    resolve,
)

V = VerifyOutcome
ACTION_CLASSES = typing.get_args(Action)
ACTION_KINDS = {cls.model_fields["kind"].default for cls in ACTION_CLASSES}


# -- resolve(): every path --------------------------------------------------------


@pytest.mark.parametrize(("name", "args", "kind"), RESOLVE_PATHS,
                         ids=[p[0] for p in RESOLVE_PATHS])
def test_seed002_resolve_path(name: str, args: dict, kind: str) -> None:
    """Seed 002 §6: each decision path of resolve() gives its action."""
    action = resolve(**args)
    assert action.kind == kind, name
    assert isinstance(action, ACTION_CLASSES)


def test_seed002_resolve_paths_cover_every_action_and_fail_reason() -> None:
    """Seed 002 §6: the 7 paths cover every Action kind and both Fail reasons."""
    assert len(RESOLVE_PATHS) == 7
    assert len({p[0] for p in RESOLVE_PATHS}) == 7
    assert {p[2] for p in RESOLVE_PATHS} == ACTION_KINDS == {
        "advance", "yield_verify_human", "retry", "yield_on_fail_human", "fail",
    }
    reasons = set()
    for _, args, _ in RESOLVE_PATHS:
        action = resolve(**args)
        if isinstance(action, Fail):
            reasons.add(action.reason)
    assert reasons == set(FailReason)
    # The paths also exercise every verify outcome and every on_fail route.
    assert {p[1]["verify_outcome"] for p in RESOLVE_PATHS} == set(VerifyOutcome)
    assert {p[1]["on_fail"] for p in RESOLVE_PATHS} == {None, "retry", "human"}


def test_seed002_resolve_run_ok_no_verify_advances() -> None:
    """Seed 002 §4: exit_code == 0, no verify -> advance."""
    assert resolve(0, V.NOT_CONFIGURED, None, 0, 0) == Advance()
    assert resolve(0, V.NOT_CONFIGURED, "retry", 5, 1) == Advance()


def test_seed002_resolve_verify_human_yields() -> None:
    """Seed 002 §4: exit_code == 0, verify:human -> StepCompleted(0) + StepWaiting."""
    for on_fail in (None, "retry", "human"):
        assert resolve(0, V.HUMAN_REQUIRED, on_fail, 0, 3) == YieldVerifyHuman()


def test_seed002_resolve_verify_cmd_failure_feedback() -> None:
    """Seed 002 §4: verify:cmd failed -> on_fail with the verify output as feedback."""
    action = resolve(0, V.FAILED, "retry", 0, 2, feedback="3 tests failed")
    assert action == Retry(feedback="3 tests failed", attempt=1)
    action = resolve(0, V.FAILED, "human", 0, 0, feedback="diff is not empty")
    assert action == YieldOnFailHuman(feedback="diff is not empty")
    action = resolve(0, V.FAILED, None, 0, 0)
    assert action == Fail(feedback="verify command failed", reason=FailReason.NO_FAILURE_ROUTE)


@pytest.mark.parametrize("outcome", list(VerifyOutcome), ids=str)
def test_seed002_resolve_run_failure_wins_over_verify_outcome(outcome: VerifyOutcome) -> None:
    """Seed 002 §6: a failed run is a failure whatever the verify outcome says."""
    assert resolve(3, outcome, None, 0, 0) == Fail(
        feedback="run exited with code 3", reason=FailReason.NO_FAILURE_ROUTE,
    )
    assert resolve(3, outcome, "human", 0, 0, feedback="stderr: boom") == YieldOnFailHuman(
        feedback="stderr: boom",
    )
    assert resolve(-9, outcome, "retry", 0, 1).kind == "retry"


def test_seed002_resolve_retry_boundary() -> None:
    """Seed 002 §2 rule 5: retry while retries are left, then fail (retries exhausted)."""
    assert resolve(1, V.NOT_CONFIGURED, "retry", 0, 3) == Retry(
        feedback="run exited with code 1", attempt=1,
    )
    assert resolve(1, V.NOT_CONFIGURED, "retry", 2, 3).attempt == 3  # type: ignore[union-attr]
    exhausted = resolve(1, V.NOT_CONFIGURED, "retry", 3, 3, feedback="flaky")
    assert exhausted == Fail(feedback="flaky", reason=FailReason.RETRIES_EXHAUSTED)
    # on_fail: retry with max_retries 0 fails at once, and says why.
    assert resolve(1, V.NOT_CONFIGURED, "retry", 0, 0).reason is FailReason.RETRIES_EXHAUSTED  # type: ignore[union-attr]


def test_seed002_resolve_on_fail_human_never_counts_retries() -> None:
    """Seed 002 §2 rule 5: a failure routed to the person yields, whatever the count."""
    for count in (0, 5, 100):
        assert resolve(2, V.NOT_CONFIGURED, "human", count, 0).kind == "yield_on_fail_human"


def test_seed002_resolve_actions_are_immutable() -> None:
    """Seed 002 §6: an Action is a value (decide purely, act separately)."""
    action = resolve(1, V.NOT_CONFIGURED, "retry", 0, 1)
    with pytest.raises(ValidationError):
        action.feedback = "changed"  # type: ignore[misc]


# -- the ten events -------------------------------------------------------------------

SAMPLE_EVENTS: dict[str, dict] = {
    "TaskStarted": {"task": "build", "steps": 3},
    "TaskStopped": {"reason": "completed"},
    "StepCompleted": {"step": 0, "exit_code": 0, "duration_s": 1.5, "stdout": "ok"},
    "StepApproved": {"step": 1},
    "StepSkipped": {"step": 1, "by": "alice"},
    "StepWaiting": {"step": 1, "reason": "gate"},
    "WindowLaunched": {"step": 2, "command": "npm run dev"},
    "WindowLost": {"step": 2, "reason": "health check failed"},
    "StepReset": {"step": 2, "to_step": 0, "reason": "human"},
    "TaskReset": {},
}


def test_seed002_exactly_ten_event_types() -> None:
    """Seed 002 §3/§5: 10 events are the final set (VerifyFailed is gone)."""
    assert len(PLAN_EVENT_TYPES) == 10 == len(set(PLAN_EVENT_TYPES))
    assert set(PLAN_EVENT_TYPES) == set(SAMPLE_EVENTS)
    assert "VerifyFailed" not in PLAN_EVENT_TYPES
    # The discriminated union has exactly these members.
    union = typing.get_args(typing.get_args(PlanEvent)[0])
    assert {cls.model_fields["type"].default for cls in union} == set(PLAN_EVENT_TYPES)
    with pytest.raises(ValidationError):
        PLAN_EVENT_ADAPTER.validate_python({"type": "VerifyFailed", "step": 0})


@pytest.mark.parametrize("kind", PLAN_EVENT_TYPES)
def test_seed002_event_adapter_round_trip(kind: str) -> None:
    """Seed 002 §2 rule 1: every event is stored and read back unchanged (replay input)."""
    event = PLAN_EVENT_ADAPTER.validate_python({"type": kind, **SAMPLE_EVENTS[kind]})
    assert type(event).__name__ == kind
    assert event.type == kind
    dumped = PLAN_EVENT_ADAPTER.dump_json(event)
    assert PLAN_EVENT_ADAPTER.validate_json(dumped) == event


@pytest.mark.parametrize("kind", PLAN_EVENT_TYPES)
def test_seed002_event_extra_fields_rejected(kind: str) -> None:
    """Seed 002 §3: the events are a closed vocabulary: unknown fields are refused."""
    with pytest.raises(ValidationError):
        PLAN_EVENT_ADAPTER.validate_python({"type": kind, **SAMPLE_EVENTS[kind], "extra": 1})


def test_seed002_event_field_rules() -> None:
    """Seed 002 §3: events validate their fields (steps are indexes, reasons are closed)."""
    with pytest.raises(ValidationError):
        PLAN_EVENT_ADAPTER.validate_python({"type": "StepCompleted", "step": -1, "exit_code": 0})
    with pytest.raises(ValidationError):
        PLAN_EVENT_ADAPTER.validate_python({"type": "StepWaiting", "step": 0, "reason": "nap"})
    with pytest.raises(ValidationError):
        PLAN_EVENT_ADAPTER.validate_python({"type": "TaskStopped", "reason": "bored"})
    with pytest.raises(ValidationError):
        PLAN_EVENT_ADAPTER.validate_python({"type": "Nope"})
    event = StepApproved(step=0)
    with pytest.raises(ValidationError):
        event.step = 1  # type: ignore[misc]


def test_seed002_every_fail_reason_has_a_task_stopped_reason() -> None:
    """V9/V10: each way resolve() fails can be recorded as its own TaskStopped reason."""
    for reason in FailReason:
        assert TaskStopped(reason=reason.value).reason == reason.value


# -- replay() -------------------------------------------------------------------------


def started(steps: int = 3) -> list:
    return [TaskStarted(task="t", steps=steps)]


def test_seed002_replay_happy_path() -> None:
    """Seed 002 §2 rule 1: state = replay(log)."""
    log = [*started(2), StepCompleted(step=0, exit_code=0), StepCompleted(step=1, exit_code=0),
           TaskStopped(reason="completed")]
    state = replay(2, log)
    assert state == PlanState(steps=2, current_step=2, started=True, stopped="completed",
                              completed_steps=[0, 1])
    assert state.finished
    assert replay(2, log) == state


def test_seed002_replay_failure_does_not_move_the_cursor() -> None:
    """Seed 002 §2 rule 3: a failure (StepCompleted != 0, WindowLost) keeps the cursor."""
    log = [*started(), StepCompleted(step=0, exit_code=0), WindowLaunched(step=1, command="x"),
           WindowLost(step=1, reason="gone"), StepCompleted(step=1, exit_code=2)]
    state = replay(3, log)
    assert state.current_step == 1
    assert state.completed_steps == [0]
    assert state.window_open is False


def test_seed002_replay_window_open_and_closed() -> None:
    """Seed 002 §3: WindowLaunched observes the window; a completion closes it."""
    state = replay(3, [*started(), WindowLaunched(step=0, command="npm run dev")])
    assert state.window_open is True
    state = apply(state, StepCompleted(step=0, exit_code=0))
    assert state.window_open is False and state.current_step == 1


@pytest.mark.parametrize("event", [
    StepCompleted(step=0, exit_code=0), StepCompleted(step=2, exit_code=0),
    StepApproved(step=0), StepSkipped(step=2), WindowLaunched(step=0, command="x"),
    WindowLost(step=2, reason="r"), StepWaiting(step=2, reason="gate"),
], ids=lambda e: f"{e.type}({e.step})")
def test_seed002_replay_cursor_only_moves_forward(event: object) -> None:
    """Seed 002 §2 rule 2: an event for any step but the cursor's is refused."""
    state = replay(3, [*started(), StepCompleted(step=0, exit_code=0)])
    assert state.current_step == 1
    before = state.model_dump()
    with pytest.raises(PlanReplayError, match="cursor is at 1"):
        apply(state, event)  # type: ignore[arg-type]
    assert state.model_dump() == before


def test_seed002_replay_approved_and_skipped_advance() -> None:
    """Seed 002 §3: StepApproved and StepSkipped advance; only Approved counts as done."""
    state = replay(3, [*started(), StepWaiting(step=0, reason="gate"), StepApproved(step=0),
                       StepSkipped(step=1)])
    assert state.current_step == 2
    assert state.completed_steps == [0]
    assert state.waiting is None


def test_seed002_replay_reset_moves_the_cursor_back() -> None:
    """Seed 002 §2 rule 2: only an explicit Reset moves the cursor back."""
    log = [*started(), StepCompleted(step=0, exit_code=0), StepCompleted(step=1, exit_code=0),
           StepCompleted(step=2, exit_code=1),
           StepReset(step=2, to_step=1, reason="human")]
    state = replay(3, log)
    assert state.current_step == 1
    assert state.completed_steps == [0]
    assert state.retry_count == 0


def test_seed002_replay_retry_reset_keeps_the_retry_count() -> None:
    """Seed 002 §2 rule 5: a retry is a Reset to the same step with its attempt count."""
    log = [*started(), StepCompleted(step=0, exit_code=1),
           StepReset(step=0, to_step=0, reason="retry", retry_count=1)]
    state = replay(3, log)
    assert (state.current_step, state.retry_count) == (0, 1)
    state = apply(state, StepCompleted(step=0, exit_code=0))
    assert (state.current_step, state.retry_count) == (1, 0)


def test_seed002_v11_reset_past_the_cursor_raises() -> None:
    """V11: StepReset may not set current_step to an arbitrary value (past the cursor)."""
    state = replay(3, [*started(), StepCompleted(step=0, exit_code=0)])
    with pytest.raises(PlanReplayError, match="past the cursor"):
        apply(state, StepReset(step=1, to_step=2, reason="human"))


def test_seed002_v11_reset_beyond_the_plan_raises() -> None:
    """V11: StepReset may not set current_step beyond the plan."""
    state = replay(2, [*started(2), StepCompleted(step=0, exit_code=0),
                       StepCompleted(step=1, exit_code=0)])
    assert state.current_step == 2
    with pytest.raises(PlanReplayError):
        apply(state, StepReset(step=2, to_step=2, reason="human"))
    # Back into the plan is fine.
    assert apply(state, StepReset(step=2, to_step=0, reason="human")).current_step == 0


@pytest.mark.parametrize("event", [
    StepCompleted(step=2, exit_code=0), StepApproved(step=2), StepSkipped(step=2),
    StepWaiting(step=2, reason="gate"), WindowLaunched(step=2, command="x"),
], ids=lambda e: e.type)
def test_seed002_v11_no_event_moves_the_cursor_beyond_the_plan(event: object) -> None:
    """V11: once every step is done the cursor stays at len(plan): later steps are refused."""
    state = replay(2, [*started(2), StepCompleted(step=0, exit_code=0),
                       StepCompleted(step=1, exit_code=0)])
    with pytest.raises(PlanReplayError, match="plan has 2 steps"):
        apply(state, event)  # type: ignore[arg-type]


def test_seed002_v4_verify_human_yield_point() -> None:
    """Seed 002 §5 / V4: StepCompleted(0) + StepWaiting(verify_human) marks the yield point."""
    state = replay(3, [*started(), StepCompleted(step=0, exit_code=0, stdout="built")])
    assert (state.current_step, state.completed_steps) == (1, [0])
    state = apply(state, StepWaiting(step=0, reason="verify_human"))
    assert state.current_step == 0
    assert state.completed_steps == []
    assert state.waiting == "verify_human"
    state = apply(state, StepApproved(step=0))
    assert (state.current_step, state.completed_steps, state.waiting) == (1, [0], None)


def test_seed002_v4_only_verify_human_may_mark_the_previous_step() -> None:
    """V4: the yield point exception is for verify_human only, right after StepCompleted(0)."""
    state = replay(3, [*started(), StepCompleted(step=0, exit_code=0)])
    with pytest.raises(PlanReplayError):
        apply(state, StepWaiting(step=0, reason="on_fail_human"))
    skipped = replay(3, [*started(), StepSkipped(step=0)])
    with pytest.raises(PlanReplayError):
        apply(skipped, StepWaiting(step=0, reason="verify_human"))


def test_seed002_on_fail_human_waits_at_the_cursor() -> None:
    """Seed 002 §2 rule 5: a failure routed to the person yields at the failed step."""
    state = replay(3, [*started(), StepCompleted(step=0, exit_code=1, stderr="boom"),
                       StepWaiting(step=0, reason="on_fail_human", feedback="boom")])
    assert (state.current_step, state.waiting) == (0, "on_fail_human")
    state = apply(state, StepSkipped(step=0))
    assert (state.current_step, state.waiting) == (1, None)


def dispatch_log(steps: int, on_fail: str | None, max_retries: int,
                 exit_codes: list[int]) -> list:
    """A minimal dispatch: what the workflow appends for each run of step 0."""
    log = started(steps)
    retry_count = 0
    for code in exit_codes:
        log.append(StepCompleted(step=0, exit_code=code))
        action = resolve(code, V.NOT_CONFIGURED, on_fail, retry_count, max_retries)  # type: ignore[arg-type]
        if isinstance(action, Retry):
            retry_count = action.attempt
            log.append(StepReset(step=0, to_step=0, reason="retry", retry_count=retry_count))
        elif isinstance(action, Fail):
            log.append(TaskStopped(reason=action.reason.value, step=0, feedback=action.feedback))
            break
    return log


def test_seed002_v10_retries_exhausted_leaves_an_audit_event() -> None:
    """V10: retry -> terminal leaves TaskStopped(reason=retries_exhausted)."""
    log = dispatch_log(3, "retry", 2, [1, 1, 1])
    assert [e.type for e in log] == [
        "TaskStarted", "StepCompleted", "StepReset", "StepCompleted", "StepReset",
        "StepCompleted", "TaskStopped",
    ]
    state = replay(3, log)
    assert state.stopped == "retries_exhausted"
    assert state.retry_count == 2
    assert log[-1].feedback == "run exited with code 1"


def test_seed002_v9_no_failure_route_leaves_an_audit_event() -> None:
    """V9: the default terminal path (no on_fail) has an explicit TaskStopped event."""
    log = dispatch_log(3, None, 0, [7])
    state = replay(3, log)
    assert state.stopped == "no_failure_route"
    assert state.current_step == 0


def test_seed002_replay_nothing_after_stop_but_task_reset() -> None:
    """Seed 002 §3: after TaskStopped only TaskReset is accepted; it starts afresh."""
    state = replay(3, dispatch_log(3, None, 0, [7]))
    with pytest.raises(PlanReplayError, match="after the task stopped"):
        apply(state, StepCompleted(step=0, exit_code=0))
    with pytest.raises(PlanReplayError):
        apply(state, TaskStopped(reason="canceled"))
    fresh = apply(state, TaskReset())
    assert fresh == PlanState(steps=3, started=True)


def test_seed002_apply_does_not_mutate_its_input() -> None:
    """Seed 002 §2 rule 1: replay is a pure fold; earlier states are never changed."""
    state = replay(3, [*started(), StepCompleted(step=0, exit_code=0)])
    before = state.model_dump()
    apply(state, StepCompleted(step=1, exit_code=0))
    apply(state, StepReset(step=1, to_step=0, reason="human"))
    assert state.model_dump() == before


# -- PlanStep validation ---------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"gate": True, "run": "make"},
    {"gate": True, "verify": "human"},
    {"gate": True, "on_fail": "retry"},
    {"gate": True, "in_window": True},
], ids=["run", "verify", "on_fail", "in_window"])
def test_seed002_gate_step_has_no_execution(fields: dict) -> None:
    """Seed 002 §7 (gate classification): a gate has no run, verify, on_fail or window."""
    with pytest.raises(ValidationError, match="gate"):
        PlanStep(**fields)


def test_seed002_step_without_run_rejected() -> None:
    """Seed 002 §3: a step that is not a gate needs something to run."""
    with pytest.raises(ValidationError, match="needs `run`"):
        PlanStep(name="nothing", verify="human")


def test_seed002_in_window_needs_a_shell_command() -> None:
    """Seed 002 §3: an in_window step runs a shell command, not a tool call."""
    with pytest.raises(ValidationError, match="in_window"):
        PlanStep(run={"server": "fs", "tool": "read_file"}, in_window=True)
    step = PlanStep(run="npm run dev", in_window=True)
    assert step.in_window and step.run == "npm run dev"


def test_seed002_valid_plan_steps() -> None:
    """Seed 002 §3: the step attribute space (run, verify, on_fail, in_window, gate)."""
    assert PlanStep(gate=True).gate
    step = PlanStep.model_validate({"run": {"server": "git", "tool": "git_commit",
                                            "arguments": {"message": "m"}},
                                    "verify": {"cmd": "git log -1"}, "on_fail": "retry",
                                    "max_retries": 2})
    assert isinstance(step.run, ToolRun) and step.run.tool == "git_commit"
    assert step.verify == VerifyCmd(cmd="git log -1")
    assert PlanStep(run="make", verify="human", on_fail="human").verify == "human"


@pytest.mark.parametrize("fields", [
    {"run": "make", "retries": 2},
    {"run": "make", "verify": "robot"},
    {"run": "make", "on_fail": "ignore"},
    {"run": "make", "max_retries": -1},
    {"run": "make", "timeout_s": 0},
    {"run": "make", "verify": {"cmd": ""}},
    {"run": {"server": "fs"}},
], ids=["extra", "verify", "on_fail", "max_retries", "timeout", "empty-cmd", "tool-no-name"])
def test_seed002_plan_step_rejects_bad_fields(fields: dict) -> None:
    """Seed 002 §3: configuration mistakes are refused when the plan is read."""
    with pytest.raises(ValidationError):
        PlanStep.model_validate(fields)
