"""Waiting for the model provider: whether a failed LLM call is tried again, when,
and what the session says meanwhile. Pure: no Temporal import.

The workflow tries an LLM call again itself (a durable timer, then a new
attempt), so the wait is in history: the session's current details and the
``provider.waiting`` event say what it waits for and until when, and a cancel
ends the wait at once. The rules:

- a rate limit (HTTP 429) waits the provider's delay (``retry-after-ms`` or
  ``Retry-After``), or a backoff of 1, 2, 4, ... 60 s when that is longer (or
  the provider gave none), for at most ``rate_limit_budget_minutes`` in all for
  one model answer;
- a failure that may pass (5xx, 408, 409, a lost connection, a timeout, a lost
  worker) waits the same way, at most ``error_retries`` times;
- anything else (another 4xx, an answer we cannot use, a bad config) fails the
  session at once, with the provider's reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from workflows.config import LLMConfig

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0

WaitReason = Literal["rate_limited", "provider_error"]


class ProviderFailure(BaseModel):
    """One failed attempt of an LLM call, as the workflow learns it."""

    summary: str
    retryable: bool
    http_status: int | None = None
    # The provider's own delay (the activity's ``next_retry_delay``), if it gave one.
    retry_after_s: float | None = None


class ProviderWaits(BaseModel):
    """What one model answer has waited so far (reset for every LLM call)."""

    rate_limited_s: float = 0.0
    rate_limits: int = 0
    errors: int = 0


class ProviderRetry(BaseModel):
    """Wait ``delay_s`` then try again, or (``fail_reason``) give up."""

    delay_s: float = 0.0
    reason: WaitReason | None = None
    waits: ProviderWaits
    fail_reason: str | None = None


def backoff_s(attempt: int) -> float:
    """1, 2, 4, ... 60 s for the 0th, 1st, 2nd, ... wait."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(attempt, 16))


def decide_provider_retry(failure: ProviderFailure, waits: ProviderWaits,
                          llm: LLMConfig) -> ProviderRetry:
    if not failure.retryable:
        return ProviderRetry(waits=waits, fail_reason=(
            f"LLM call failed: {failure.summary} (not retried: a retry cannot help)"))
    budget_s = llm.rate_limit_budget_minutes * 60
    if failure.http_status == 429:
        delay = _delay(failure, waits.rate_limits)
        if waits.rate_limited_s + delay > budget_s:
            return ProviderRetry(waits=waits, fail_reason=(
                f"LLM call failed: rate limited by the model provider for longer than "
                f"the budget of {_minutes(budget_s)} (waited {_minutes(waits.rate_limited_s)}"
                f", it asks for {_seconds(delay)} more): {failure.summary}"))
        return ProviderRetry(delay_s=delay, reason="rate_limited", waits=waits.model_copy(
            update={"rate_limited_s": waits.rate_limited_s + delay,
                    "rate_limits": waits.rate_limits + 1}))
    if waits.errors >= llm.error_retries:
        return ProviderRetry(waits=waits, fail_reason=(
            f"LLM call failed: {failure.summary} (tried {waits.errors + 1} times; "
            f"error_retries is {llm.error_retries})"))
    delay = _delay(failure, waits.errors)
    if delay > budget_s:
        return ProviderRetry(waits=waits, fail_reason=(
            f"LLM call failed: {failure.summary} (the provider asks to wait "
            f"{_seconds(delay)}, longer than the budget of {_minutes(budget_s)})"))
    return ProviderRetry(delay_s=delay, reason="provider_error",
                         waits=waits.model_copy(update={"errors": waits.errors + 1}))


def _delay(failure: ProviderFailure, earlier_waits: int) -> float:
    """The provider's delay, or the backoff when that is longer: never sooner than
    the provider asked, and a provider that asks for 0 s again and again still
    gets a growing pause (the waits are history events; the budget bounds them)."""
    return max(failure.retry_after_s or 0.0, backoff_s(earlier_waits))


def waiting_text(retry: ProviderRetry, retry_at: datetime, failure: ProviderFailure) -> str:
    """The current details (and the event's ``message``) while the session waits."""
    why = "rate limited" if retry.reason == "rate_limited" else "provider error"
    at = retry_at.strftime("%H:%M:%S UTC") if retry_at.utcoffset() == timedelta(0) \
        else retry_at.isoformat()
    return (f"Waiting for the model provider ({why}, retry at {at}, in "
            f"{_seconds(retry.delay_s)}): {failure.summary}")


def _seconds(s: float) -> str:
    return f"{s:g} s"


def _minutes(s: float) -> str:
    return f"{round(s / 60, 2):g} min"
