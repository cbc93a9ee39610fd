"""How long a call that could not be sent keeps trying, and how often: pure.

A once-only call whose request provably never left (``workflows.outcome``:
"not sent") is tried again under the same idempotency key, with a backoff, for a
window: the session's ``send_window_s`` if it sets one, else as long as its wait
policy would have waited for the person (``reply_timeout_s``), else
``DEFAULT_WINDOW_S``. Past the window an approved call is handed to the person
("send again" or "drop") instead of failing unseen; one that ran without asking
fails as not sent, and the agent is told.

No Temporal import: the workflow passes in the clock's readings.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from workflows.config import SessionConfig

# The window when the session would wait for the person forever.
DEFAULT_WINDOW_S = 900.0
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0

# The question to the person and its answers (an ECS ``choose`` request).
SEND_AGAIN, DROP = "send again", "drop"
UNSENT_OPTIONS = [SEND_AGAIN, DROP]
DROPPED = "dropped_by_person"  # the reason code when the person drops it

UnsentAnswer = Literal["send_again", "drop", "unknown"]


def window_s(config: SessionConfig) -> float:
    """Seconds a call that was not sent keeps being tried."""
    if config.send_window_s is not None:
        return config.send_window_s
    if config.reply_timeout_s is not None:
        return config.reply_timeout_s
    return DEFAULT_WINDOW_S


def delay_before(attempt: int) -> timedelta:
    """The wait before attempt ``attempt + 1``: 1 s, 2 s, 4 s … at most a minute."""
    if attempt < 1:
        raise ValueError(f"attempts count from 1, got {attempt}")
    return timedelta(seconds=min(FIRST_DELAY_S * 2 ** min(attempt - 1, 30), MAX_DELAY_S))


def next_try(*, first_failed_at: datetime, now: datetime, attempt: int,
             window: float) -> timedelta | None:
    """How long to wait before trying again after ``attempt`` failed unsent, or None
    when the next try would start past the window (``window`` seconds from the first
    failure): then the person is asked, or the call fails as not sent."""
    delay = delay_before(attempt)
    if (now - first_failed_at) + delay > timedelta(seconds=window):
        return None
    return delay


def unsent_question(summary: str, cause: str, attempts: int, window: float) -> str:
    return (f"It could not be sent: {summary}. The tool server was not reached in "
            f"{attempts} attempt(s) over {window:g} s ({cause}); it did not run. "
            f"{SEND_AGAIN!r} tries again under the same idempotency key, {DROP!r} gives "
            "it up.")


def unsent_request_id(execution_id: str, asked_before: int) -> str:
    return f"{execution_id}-unsent-{asked_before + 1}"


def unsent_answer(answer: dict[str, Any]) -> UnsentAnswer:
    """The person's answer; anything else (a decline, an automatic decision) leaves
    it not sent."""
    if answer.get("auto"):
        return "unknown"
    return {SEND_AGAIN: "send_again", DROP: "drop"}.get(
        answer.get("choice"), "unknown")  # type: ignore[arg-type, return-value]
