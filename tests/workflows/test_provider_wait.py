"""Waiting for the model provider: the pure rules (workflows/provider_wait.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from workflows.config import LLMConfig
from workflows.provider_wait import (
    ProviderFailure,
    ProviderRetry,
    ProviderWaits,
    backoff_s,
    decide_provider_retry,
    waiting_text,
)

LLM = LLMConfig(provider="openai", base_url="http://127.0.0.1:1/v1")


def rate_limited(retry_after_s: float | None = None) -> ProviderFailure:
    return ProviderFailure(summary="HTTP 429: slow down", retryable=True, http_status=429,
                           retry_after_s=retry_after_s)


def test_backoff_doubles_from_one_second_up_to_a_minute():
    assert [backoff_s(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_s(10_000) == 60


@pytest.mark.parametrize(("retry_after", "earlier", "delay"), [
    (20.0, 0, 20.0),    # the provider's delay, honoured
    (2.0, 0, 2.0),      # not the 1 s backoff: never sooner than asked
    (0.3, 0, 1.0),      # a provider asking for less still gets the backoff
    (2.0, 3, 8.0),      # ... which grows: a 0 s Retry-After cannot spin
    (None, 2, 4.0),     # no Retry-After: the backoff
])
def test_a_rate_limit_waits_the_providers_delay_or_the_backoff(retry_after, earlier, delay):
    waits = ProviderWaits(rate_limits=earlier, rate_limited_s=10)
    retry = decide_provider_retry(rate_limited(retry_after), waits, LLM)
    assert (retry.fail_reason, retry.reason, retry.delay_s) == (None, "rate_limited", delay)
    assert retry.waits == ProviderWaits(rate_limits=earlier + 1, rate_limited_s=10 + delay)


def test_rate_limits_have_their_own_budget_in_minutes():
    llm = LLM.model_copy(update={"rate_limit_budget_minutes": 1})
    within = decide_provider_retry(rate_limited(20), ProviderWaits(rate_limited_s=40), llm)
    assert within.delay_s == 20 and within.waits.rate_limited_s == 60
    past = decide_provider_retry(rate_limited(20), ProviderWaits(rate_limited_s=41), llm)
    assert past.delay_s == 0 and past.fail_reason == (
        "LLM call failed: rate limited by the model provider for longer than the budget of "
        "1 min (waited 0.68 min, it asks for 20 s more): HTTP 429: slow down")
    # Errors do not spend the rate-limit budget, nor rate limits the error retries.
    error = ProviderFailure(summary="HTTP 503: busy", retryable=True, http_status=503)
    assert decide_provider_retry(error, ProviderWaits(rate_limited_s=600), llm).delay_s == 1


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409, None])
def test_errors_that_may_pass_are_retried_error_retries_times(status):
    failure = ProviderFailure(summary="boom", retryable=True, http_status=status)
    llm = LLM.model_copy(update={"error_retries": 2})
    first = decide_provider_retry(failure, ProviderWaits(), llm)
    second = decide_provider_retry(failure, first.waits, llm)
    third = decide_provider_retry(failure, second.waits, llm)
    assert (first.delay_s, second.delay_s) == (1, 2)
    assert (first.reason, second.waits.errors) == ("provider_error", 2)
    assert third.fail_reason == "LLM call failed: boom (tried 3 times; error_retries is 2)"


def test_an_error_asking_for_more_than_the_budget_fails_at_once():
    failure = ProviderFailure(summary="HTTP 503: maintenance", retryable=True, http_status=503,
                              retry_after_s=3600)
    retry = decide_provider_retry(failure, ProviderWaits(), LLM)
    assert retry.fail_reason == ("LLM call failed: HTTP 503: maintenance (the provider asks to "
                                 "wait 3600 s, longer than the budget of 10 min)")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, None])
def test_what_a_retry_cannot_help_fails_at_once_with_the_reason(status):
    failure = ProviderFailure(summary=f"HTTP {status}: no", retryable=False, http_status=status,
                              retry_after_s=5)
    retry = decide_provider_retry(failure, ProviderWaits(), LLM)
    assert retry.fail_reason == f"LLM call failed: HTTP {status}: no (not retried: a retry " \
                                "cannot help)"


def test_waiting_text_says_why_and_until_when():
    retry = ProviderRetry(delay_s=20, reason="rate_limited", waits=ProviderWaits())
    at = datetime(2026, 1, 1, 10, 20, 15, tzinfo=UTC)
    assert waiting_text(retry, at, rate_limited(20)) == (
        "Waiting for the model provider (rate limited, retry at 10:20:15 UTC, in 20 s): "
        "HTTP 429: slow down")
    error = retry.model_copy(update={"reason": "provider_error", "delay_s": 2})
    assert waiting_text(error, at, rate_limited()).startswith(
        "Waiting for the model provider (provider error, retry at 10:20:15 UTC, in 2 s)")


@pytest.mark.parametrize("bad", [{"rate_limit_budget_minutes": 0},
                                 {"rate_limit_budget_minutes": -1},
                                 {"error_retries": -1}, {"error_retries": 101}])
def test_the_budgets_are_validated(bad):
    with pytest.raises(ValueError):
        LLMConfig(provider="openai", base_url="http://x/v1", **bad)
