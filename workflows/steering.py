"""Steering while the agent works (issue 27): what a message's ``if_busy`` does, given
what the session is doing when it comes, and what an interrupt may cut.

Pure: the session's handlers ask :func:`steer` (in the update's validator, so the
workflow's own state decides, never a racy read by the API) and the agent driver
records what :func:`cut_of` and :func:`interrupted_entry` say.

- ``enqueue`` (the default): the message waits in the inbox for the next LLM call.
- ``reject``: refused (409 ``session_busy``) while the agent works; nothing changes.
- ``interrupt``: the LLM call in flight is cut (its activity cancelled), as is a
  read-only or reversible tool call; an irreversible or at-most-once call in flight is
  never cut: the interrupt waits for its outcome. Either way the turn ends there (the
  old turn's queued actions do not run) and a new one starts with the message.

While the agent does not work (it waits for the person, or the turn has not started)
every message is a plain message, whatever its ``if_busy``.

A plan session (seed 002) has no LLM turn: ``interrupt`` while its plan runs cuts the
step in flight when the step's class allows (:func:`step_safety`: read-only or
reversible; an irreversible or at-most-once step is never cut, the interrupt waits for
its outcome), then the plan stops at that step boundary and waits for the person, as
after a failed step (``on_fail_human``: ``reset`` runs the step again, ``skip`` goes on
without it, ``approve`` counts it as done; or the person ends the session). Sessions
started before this (``Behaviour.PLAN_INTERRUPT``) refuse it (409 ``not_interruptible``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from workflows.decisions import ANSWER_CONFLICT, AnswerProblem
from workflows.safety import SafetyClass, at_most_once, classify
from workflows.statechart import SessionStatus

IfBusy = Literal["enqueue", "interrupt", "reject"]
IF_BUSY: tuple[str, ...] = ("enqueue", "interrupt", "reject")
#: The reason code of a contract an interrupt cancelled.
INTERRUPTED = "interrupted"

Steer = Literal["enqueue", "cut", "after_call", "refuse"]


class InFlight(BaseModel):
    """What the agent's turn awaits now: an LLM call or a tool call."""

    kind: Literal["llm_call", "tool_call", "plan_step"]
    id: str  # the LLM call's call_id, or the tool call's (the plan step's) execution_id
    step: int | None = None  # a plan step's index
    tool: str | None = None
    server: str | None = None
    safety: str | None = None  # a tool call's SafetyClass value
    # A cut LLM call: the text it had streamed (clipped to PARTIAL_LIMIT) and its length,
    # as the worker that ran it knew them (None: not known here)
    partial_text: str | None = None
    partial_chars: int | None = None

    def cuttable(self) -> bool:
        """An LLM call, a read-only or a reversible tool call (or plan step) may be
        cut; an irreversible or at-most-once one is never cut (its outcome is awaited)."""
        if self.kind == "llm_call":
            return True
        return self.safety is not None and not at_most_once(SafetyClass(self.safety))

    def described(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


#: The most of a cut call's streamed text the log and the conversation keep.
PARTIAL_LIMIT = 4000


class CutTextInput(BaseModel):
    """The ``llm_cut_text`` local activity's input: which cut call's text."""

    session_id: str
    call_id: str


class CutText(BaseModel):
    """What a cut LLM call had streamed, as the worker that ran it knew it."""

    text: str | None = None
    chars: int = 0


def with_partial(cut: InFlight, text: CutText | None) -> InFlight:
    """The cut LLM call with the text it had streamed, clipped, when known."""
    if text is None or text.text is None:
        return cut
    return cut.model_copy(update={"partial_text": text.text[:PARTIAL_LIMIT],
                                  "partial_chars": text.chars})


def cut_text_message(partial: str, by: str) -> str:
    """What the conversation keeps of a cut answer: its text, marked as cut."""
    return f"{partial}\n\n[cut: interrupted by {by} before the answer was finished]"


class Interrupted(Exception):
    """Raised in the agent's turn where an interrupt ends it; ``cut``: the call it cut
    (None: it ended the turn between two steps, or after a call it never cuts)."""

    def __init__(self, cut: InFlight | None = None) -> None:
        super().__init__("the turn was interrupted")
        self.cut = cut


class SteerDecision(BaseModel):
    action: Steer
    problem: AnswerProblem | None = None


def busy(status: SessionStatus) -> bool:
    """The agent works: its turn is under way (an LLM call, a tool call, queued actions
    or a wait for the model provider)."""
    return status == SessionStatus.RUNNING


def steer(if_busy: str, status: SessionStatus, *, plan: bool,
          in_flight: InFlight | None, plan_interrupt: bool = False) -> SteerDecision:
    """What a message with ``if_busy`` does now. ``plan_interrupt``: a plan session
    that may be interrupted (``Behaviour.PLAN_INTERRUPT``)."""
    if if_busy == "enqueue" or not busy(status):
        return SteerDecision(action="enqueue")
    if if_busy == "reject":
        return SteerDecision(action="refuse", problem=AnswerProblem(
            type=ANSWER_CONFLICT, details={"code": "session_busy"},
            message="the agent is working (if_busy: reject): the message was not taken"))
    if plan and not plan_interrupt:
        return SteerDecision(action="refuse", problem=AnswerProblem(
            type=ANSWER_CONFLICT, details={"code": "not_interruptible"},
            message="a plan session has no agent turn to interrupt while its plan runs: "
                    "send the message with if_busy enqueue"))
    if in_flight is None or in_flight.cuttable():
        return SteerDecision(action="cut")
    return SteerDecision(action="after_call")


def interrupted_entry(*, by: str, principal: dict[str, Any] | None,
                      cut: InFlight | None, waited_for: InFlight | None,
                      cancelled: list[str], dropped: list[dict[str, Any]],
                      turn: int) -> dict[str, Any]:
    """The ``turn.interrupted`` journal entry: what was cut, why, by whom."""
    entry: dict[str, Any] = {
        "reason": "interrupt", "by": by, "turn": turn,
        "cut": cut.described() if cut is not None else None,
    }
    if principal is not None:
        entry["principal"] = principal
    if waited_for is not None:  # a call never cut: the interrupt waited for its outcome
        entry["waited_for"] = waited_for.described()
    if cancelled:  # approved calls of the old turn that had not run
        entry["cancelled"] = cancelled
    if dropped:  # the old turn's queued actions that never got a contract
        entry["dropped"] = dropped
    return entry


def cancelled_message(by: str) -> str:
    """The error message of a contract of the old turn an interrupt cancelled."""
    return f"interrupted by {by}: the turn ended before this call ran; it did not run"


def cut_message(by: str) -> str:
    """The error message of a read-only or reversible call an interrupt cut."""
    return f"interrupted by {by} while the call was under way; cut"


def dropped_tool_text(by: str) -> str:
    """What the model is told of a tool call of its answer that never ran."""
    return f"Not run: {by} interrupted the turn before this call ran."


def step_safety(safety: str | None, run: Any, tools: list[Any]) -> str:
    """A plan step's class for an interrupt: its own ``safety``; else, for a tool call
    step, the plan's override for that tool (``tool_overrides``); else irreversible (a
    command may do anything, and MCP takes a tool that says nothing for destructive)."""
    if safety is not None:
        return safety
    server = getattr(run, "server", None)
    override = next((t.tool_overrides.get(run.tool) for t in tools
                     if server is not None and t.name == server), None)
    return classify(None, override).value  # no annotations: irreversible


def plan_stop_text(by: str, step: int, cut: InFlight | None, message: str) -> str:
    """Why the plan stopped at ``step`` for the person (the ``StepWaiting`` feedback
    and the request's prompt): who interrupted, whether the step was cut, the message."""
    what = (f"step {step} was cut while it ran; it did not finish" if cut is not None
            else f"the plan stopped before step {step}")
    return (f"interrupted by {by}: {what}. Message: {message[:500]} "
            "(reset runs the step again, skip goes on without it)")
