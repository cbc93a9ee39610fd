"""Pure decisions for a once-only tool call that did not report back: did it
provably never leave (retry it under the same idempotency key), or may it have
run (then the person says what happened)?

The ``call_tool`` activity records a durable "sending" mark (a heartbeat naming the
attempt) just before the MCP request is written, and a "sent" one (``written``)
once it was handed to the transport. A failed attempt whose last heartbeat
carries no mark never reached the tool server; one with either may have.

No Temporal import: the workflow passes in what the failure said.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

# Reason codes on a contract (``ExecutionContract.reason_code``) and in the log.
OUTCOME_UNKNOWN = "outcome_unknown"  # it may have run: nobody knows whether it did
NOT_SENT = "not_sent"  # it provably never reached the tool server
CONFIRMED_DONE = "confirmed_by_person"  # the person said it happened
CONFIRMED_NOT_DONE = "denied_by_person"  # the person said it did not happen
RETRIED = "retried_by_person"  # the person asked to run it again (same key)

# Errors the activity raises before the request left: the call did not run.
NOT_SENT_ERRORS = ("McpPoolFullError", "ToolCallNotSent")
# How often a never-sent call is tried in all before it fails as not sent.
MAX_UNSENT_ATTEMPTS = 3

# The question to the person (an ECS ``choose`` request) and its answers.
DONE, NOT_DONE, TRY_AGAIN = "done", "not done", "try again"
OUTCOME_OPTIONS = [DONE, NOT_DONE, TRY_AGAIN]

CallOutcome = Literal["not_sent", "maybe_sent"]


class ToolCallBeat(BaseModel):
    """The heartbeat details of ``call_tool``: which attempt, and whether its MCP
    request left: ``sent`` is None until the "sending" mark (then the attempt's id,
    stored before the request is written: it may have left); ``"maybe"`` in a
    heartbeat that cannot tell. ``written`` is the "sent" mark, stored after the
    request was handed to the transport's write: it left."""

    execution_id: str
    attempt_id: str
    sent: str | None = None
    written: bool = False


def attempt_id_for(execution_id: str, transitions: int, attempt: int) -> str:
    """A unique, deterministic id per activity execution of one contract."""
    return f"{execution_id}/{transitions}.{attempt}"


def failed_call_outcome(
    *, error_type: str | None, heartbeat_details: Sequence[Any] | None, attempt_id: str | None
) -> CallOutcome:
    """What a failed attempt of a once-only call tells about its request.

    ``error_type`` is the activity's error type (an ApplicationError), None for a
    timeout (the worker was lost); ``heartbeat_details`` what its last heartbeat said
    (a timeout's); ``attempt_id`` is None for a call made without sent marks (an
    older workflow): then only a not-sent error proves it never left.
    """
    if error_type in NOT_SENT_ERRORS:
        return "not_sent"
    if attempt_id is None or error_type is not None:
        # An error raised after the request left (a lost connection): it may have run.
        return "maybe_sent"
    beat = _beat(heartbeat_details)
    if heartbeat_details and beat is None:
        return "maybe_sent"  # details of another shape (an older worker): conservative
    if beat is not None and (beat.attempt_id != attempt_id or beat.sent is not None):
        return "maybe_sent"  # the mark, or the SDK's own heartbeat ("maybe")
    return "not_sent"  # no heartbeat yet, or the last one stored says `sent: null`


def _beat(details: Sequence[Any] | None) -> ToolCallBeat | None:
    if not details:
        return None
    try:
        return ToolCallBeat.model_validate(details[-1])
    except ValidationError:
        return None


def outcome_question(summary: str, cause: str) -> str:
    """The prompt of the question to the person about a call that may have run."""
    return (f"It may have happened: {summary}. The request was sent, but no answer came "
            f"back ({cause}). Did it happen? {DONE!r}, {NOT_DONE!r}, or {TRY_AGAIN!r} "
            "(runs it again under the same idempotency key).")


def outcome_request_id(execution_id: str, asked_before: int) -> str:
    return f"{execution_id}-outcome-{asked_before + 1}"


OutcomeAnswer = Literal["done", "not_done", "try_again", "unknown"]


def outcome_answer(answer: dict[str, Any]) -> OutcomeAnswer:
    """The person's answer to the question; anything else (a decline, an automatic
    decision) leaves the outcome unknown."""
    if answer.get("auto"):
        return "unknown"
    return {DONE: "done", NOT_DONE: "not_done", TRY_AGAIN: "try_again"}.get(
        answer.get("choice"), "unknown")  # type: ignore[arg-type, return-value]


def unknown_message(cause: str) -> str:
    return f"outcome unknown: the call did not report back ({cause}); not retried"


def not_sent_message(cause: str, attempts: int) -> str:
    return (f"not sent: the call never reached the tool server in {attempts} attempt(s) "
            f"({cause}); it did not run")
