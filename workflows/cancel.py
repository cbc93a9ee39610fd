"""Pure decisions for "cancel cancels" (invariant 8) and for replies that come too
late: what a contract cancelled in flight says, and why a late reply is refused.

No Temporal import: the workflow calls these and records their answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from workflows.contract import ActionType, ExecutionContract
from workflows.outcome import OUTCOME_UNKNOWN
from workflows.safety import SafetyClass, at_most_once

if TYPE_CHECKING:
    from workflows.session_state import UnansweredRequest

CANCELLED = "the session was cancelled"


def runs_at_most_once(contract: ExecutionContract) -> bool:
    """Plan steps run once (never retried); tool calls by their safety class."""
    if contract.action_type is ActionType.PLAN_STEP:
        return True
    safety = contract.action_detail.get("safety")
    return contract.irreversible or (safety is not None and at_most_once(SafetyClass(safety)))


def cancelled_in_flight(contract: ExecutionContract) -> str:
    """The error_message of a contract whose activity was under way when the session
    was cancelled. An at-most-once call may already have had its effect: say the
    outcome is unknown (it is not retried, and it never counts as completed)."""
    if runs_at_most_once(contract):
        return (f"outcome unknown: {CANCELLED} while the call was under way; it may have "
                "run; not retried")
    return f"{CANCELLED} while the call was under way"


def cancelled_in_flight_code(contract: ExecutionContract) -> str | None:
    """The reason code of a contract cancelled in flight: ``outcome_unknown`` when it
    may have had its effect (an at-most-once call), else None."""
    return OUTCOME_UNKNOWN if runs_at_most_once(contract) else None


def _decided(answer: dict) -> str:
    if "approved" in answer:
        return "approved" if answer["approved"] else "rejected"
    if answer.get("choice") == "stop":
        return "stopped the plan"
    if "choice" in answer:
        return f"chose {answer['choice']!r}"
    return "declined"


def late_reply_problem(unanswered: Iterable[UnansweredRequest], request_id: str) -> str | None:
    """Why a reply to a request that ended without the person is refused, or None
    when ``request_id`` is not one of them."""
    for r in unanswered:
        if r.request_id != request_id:
            continue
        at = r.at.isoformat()
        if r.how == "expired":
            return (f"request {request_id!r} expired at {at}: nobody answered in time and "
                    "the session went on without it")
        return (f"request {request_id!r} was auto-decided: {_decided(r.answer or {})} "
                f"(at {at}, nobody answered in time); the session went on")
    return None
