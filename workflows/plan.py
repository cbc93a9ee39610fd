"""The step-plan model of seed 002: pure ``resolve()``, the ten events, ``replay()``.

``resolve`` decides; the workflow's dispatch acts. Its rules are declared once
(``FAILURE_ROUTES`` and the verify branch in ``resolve``) and every path is
enumerable (``RESOLVE_PATHS``), so the tests can cover each one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

# -- the plan as configured ----------------------------------------------------


class VerifyCmd(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cmd: str = Field(min_length=1)


class ToolRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    server: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class PlanStep(BaseModel):
    """One step. ``gate`` means no execution: a person decides (seed 002)."""

    model_config = ConfigDict(extra="forbid")
    name: str = ""
    run: str | ToolRun | None = None
    verify: Literal["human"] | VerifyCmd | None = None
    on_fail: Literal["retry", "human"] | None = None
    max_retries: int = Field(default=0, ge=0, le=100)
    in_window: bool = False
    gate: bool = False
    timeout_s: float = Field(default=3600.0, gt=0, le=30 * 24 * 3600)
    # What an interrupt may do to the step while it runs (issue 27): a read_only or
    # reversible step is cut, an irreversible or at_most_once one never is. Unset: the
    # tool's override in the plan's tools, else irreversible (a command may do
    # anything; MCP's default for a tool that says nothing). Left out while unset.
    safety: Literal["read_only", "reversible", "at_most_once", "irreversible"] | None = None

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if isinstance(out, dict) and out.get("safety", False) is None:
            out.pop("safety")
        return out

    @model_validator(mode="after")
    def _shape(self) -> PlanStep:
        if self.gate:
            if self.run is not None or self.verify is not None or self.on_fail is not None \
                    or self.safety is not None:
                raise ValueError("a gate step has no run, verify, on_fail or safety: "
                                 "a person decides")
            if self.in_window:
                raise ValueError("a gate step cannot be in_window: nothing runs")
        elif self.run is None:
            raise ValueError("a step needs `run` (a command or a tool call) unless it is a gate")
        if self.in_window and not isinstance(self.run, str):
            raise ValueError("an in_window step runs a shell command")
        return self


# -- resolve(): the pure decision ---------------------------------------------


class VerifyOutcome(StrEnum):
    NOT_CONFIGURED = "not_configured"
    PASSED = "passed"
    FAILED = "failed"
    HUMAN_REQUIRED = "human_required"


class FailReason(StrEnum):
    RETRIES_EXHAUSTED = "retries_exhausted"
    NO_FAILURE_ROUTE = "no_failure_route"


class Advance(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["advance"] = "advance"


class YieldVerifyHuman(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["yield_verify_human"] = "yield_verify_human"


class Retry(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["retry"] = "retry"
    feedback: str
    attempt: int


class YieldOnFailHuman(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["yield_on_fail_human"] = "yield_on_fail_human"
    feedback: str


class Fail(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: Literal["fail"] = "fail"
    feedback: str
    reason: FailReason


Action = Advance | YieldVerifyHuman | Retry | YieldOnFailHuman | Fail


def resolve(
    exit_code: int,
    verify_outcome: VerifyOutcome,
    on_fail: Literal["retry", "human"] | None,
    retry_count: int,
    max_retries: int,
    *,
    feedback: str = "",
) -> Action:
    """Decide what a finished step run means. Pure; seed 002 section 6.

    ``feedback`` is the run's stderr when ``exit_code != 0``, the verify output
    when the verify command failed. A run failure wins over any verify outcome
    (verify only runs after a successful run).
    """
    if exit_code == 0:
        if verify_outcome in (VerifyOutcome.NOT_CONFIGURED, VerifyOutcome.PASSED):
            return Advance()
        if verify_outcome is VerifyOutcome.HUMAN_REQUIRED:
            return YieldVerifyHuman()
        text = feedback or "verify command failed"
    else:
        text = feedback or f"run exited with code {exit_code}"
    if on_fail == "retry":
        if retry_count < max_retries:
            return Retry(feedback=text, attempt=retry_count + 1)
        return Fail(feedback=text, reason=FailReason.RETRIES_EXHAUSTED)
    if on_fail == "human":
        return YieldOnFailHuman(feedback=text)
    return Fail(feedback=text, reason=FailReason.NO_FAILURE_ROUTE)


# Every decision path, as (name, arguments, expected action kind): the tests
# walk this list so that a new path added to resolve() without a row fails.
RESOLVE_PATHS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("run ok, no verify", dict(exit_code=0, verify_outcome=VerifyOutcome.NOT_CONFIGURED,
                               on_fail=None, retry_count=0, max_retries=0), "advance"),
    ("run ok, verify cmd passed", dict(exit_code=0, verify_outcome=VerifyOutcome.PASSED,
                                       on_fail=None, retry_count=0, max_retries=0), "advance"),
    ("run ok, verify human", dict(exit_code=0, verify_outcome=VerifyOutcome.HUMAN_REQUIRED,
                                  on_fail=None, retry_count=0, max_retries=0),
     "yield_verify_human"),
    ("failure, retries left", dict(exit_code=2, verify_outcome=VerifyOutcome.NOT_CONFIGURED,
                                   on_fail="retry", retry_count=0, max_retries=2), "retry"),
    ("failure, retries exhausted", dict(exit_code=2, verify_outcome=VerifyOutcome.NOT_CONFIGURED,
                                        on_fail="retry", retry_count=2, max_retries=2), "fail"),
    ("failure, on_fail human", dict(exit_code=0, verify_outcome=VerifyOutcome.FAILED,
                                    on_fail="human", retry_count=0, max_retries=0),
     "yield_on_fail_human"),
    ("failure, no route", dict(exit_code=1, verify_outcome=VerifyOutcome.NOT_CONFIGURED,
                               on_fail=None, retry_count=0, max_retries=0), "fail"),
)


# -- the ten events of seed 002 -------------------------------------------------


class _PlanEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskStarted(_PlanEvent):
    type: Literal["TaskStarted"] = "TaskStarted"
    task: str
    steps: int = Field(ge=0)


class TaskStopped(_PlanEvent):
    """The task ended. ``reason`` says how: V9/V10 each leave their own reason."""

    type: Literal["TaskStopped"] = "TaskStopped"
    reason: Literal["completed", "retries_exhausted", "no_failure_route", "canceled"]
    step: int | None = None
    feedback: str = ""


class StepCompleted(_PlanEvent):
    type: Literal["StepCompleted"] = "StepCompleted"
    step: int = Field(ge=0)
    exit_code: int
    duration_s: float | None = None
    stdout: str | None = None
    stderr: str | None = None


class StepApproved(_PlanEvent):
    type: Literal["StepApproved"] = "StepApproved"
    step: int = Field(ge=0)
    by: str = "user"


class StepSkipped(_PlanEvent):
    type: Literal["StepSkipped"] = "StepSkipped"
    step: int = Field(ge=0)
    by: str = "user"


class StepWaiting(_PlanEvent):
    type: Literal["StepWaiting"] = "StepWaiting"
    step: int = Field(ge=0)
    reason: Literal["verify_human", "on_fail_human", "gate"]
    feedback: str = ""


class WindowLaunched(_PlanEvent):
    type: Literal["WindowLaunched"] = "WindowLaunched"
    step: int = Field(ge=0)
    command: str


class WindowLost(_PlanEvent):
    type: Literal["WindowLost"] = "WindowLost"
    step: int = Field(ge=0)
    reason: str


class StepReset(_PlanEvent):
    type: Literal["StepReset"] = "StepReset"
    step: int = Field(ge=0)
    to_step: int = Field(ge=0)
    reason: Literal["retry", "human"]
    retry_count: int = 0


class TaskReset(_PlanEvent):
    type: Literal["TaskReset"] = "TaskReset"
    by: str = "user"


PlanEvent = Annotated[
    TaskStarted | TaskStopped | StepCompleted | StepApproved | StepSkipped | StepWaiting
    | WindowLaunched | WindowLost | StepReset | TaskReset,
    Field(discriminator="type"),
]
PLAN_EVENT_ADAPTER: TypeAdapter[PlanEvent] = TypeAdapter(PlanEvent)
PLAN_EVENT_TYPES: tuple[str, ...] = (
    "TaskStarted", "TaskStopped", "StepCompleted", "StepApproved", "StepSkipped",
    "StepWaiting", "WindowLaunched", "WindowLost", "StepReset", "TaskReset",
)


# -- state = replay(log) ---------------------------------------------------------


class PlanReplayError(ValueError):
    """The log contains an event that the rules forbid (e.g. a reset past the cursor)."""


class PlanState(BaseModel):
    steps: int
    current_step: int = 0
    started: bool = False
    stopped: str | None = None
    waiting: str | None = None
    retry_count: int = 0
    window_open: bool = False
    completed_steps: list[int] = Field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.stopped is not None


def apply(state: PlanState, event: PlanEvent) -> PlanState:
    """One step of ``replay``: validates the event against the five rules."""
    s = state.model_copy(deep=True)
    at = getattr(event, "step", None)
    if s.stopped is not None and not isinstance(event, TaskReset):
        raise PlanReplayError(f"{event.type} after the task stopped ({s.stopped})")
    # verify:human is StepCompleted(0) then StepWaiting for the step just passed:
    # the waiting marks the yield point and takes the cursor back to it (seed 002 §5).
    yield_point = (
        isinstance(event, StepWaiting)
        and event.reason == "verify_human"
        and at == s.current_step - 1
        and at in s.completed_steps
    )
    # V11: no event acts on a step the plan does not have (the cursor stays in range).
    if at is not None and not isinstance(event, TaskStopped | StepReset) and at >= s.steps:
        raise PlanReplayError(f"{event.type} for step {at}, but the plan has {s.steps} steps")
    off_cursor = at is not None and not isinstance(event, TaskStopped) and at != s.current_step
    if off_cursor and not yield_point:
        raise PlanReplayError(f"{event.type} for step {at}, but the cursor is at {s.current_step}")
    match event:
        case TaskStarted():
            s.started = True
        case StepCompleted(exit_code=0):
            s.window_open = False
            s.completed_steps.append(event.step)
            s.current_step += 1
            s.retry_count = 0
        case StepCompleted():
            s.window_open = False
        case StepApproved() | StepSkipped():
            s.waiting = None
            s.window_open = False
            if isinstance(event, StepApproved):
                s.completed_steps.append(event.step)
            s.current_step += 1
            s.retry_count = 0
        case StepWaiting():
            if yield_point:
                s.current_step = event.step
                s.completed_steps.remove(event.step)
            s.waiting = event.reason
        case WindowLaunched():
            s.window_open = True
        case WindowLost():
            s.window_open = False
        case StepReset():
            if event.to_step > s.current_step or event.to_step >= s.steps:
                raise PlanReplayError(
                    f"reset to step {event.to_step} is past the cursor ({s.current_step})"
                )
            s.current_step = event.to_step
            s.waiting = None
            s.retry_count = event.retry_count if event.reason == "retry" else 0
            s.completed_steps = [i for i in s.completed_steps if i < event.to_step]
        case TaskReset():
            s = PlanState(steps=s.steps, started=True)
        case TaskStopped():
            s.stopped = event.reason
    return s


def replay(steps: int, events: list[PlanEvent]) -> PlanState:
    state = PlanState(steps=steps)
    for event in events:
        state = apply(state, event)
    return state
