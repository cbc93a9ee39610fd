"""Failures of an LLM call: the error taxonomy, the one retry classification table,
the provider's ``Retry-After``, and the LLM_CALL_FAILED error with the key redacted.

A failure is raised as an ``ApplicationError`` whose single detail is the
LLM_CALL_FAILED payload (``LLMCallFailed``), whose ``non_retryable`` flag follows
:func:`classify_error` and whose ``next_retry_delay`` is the provider's own delay
(``retry-after-ms`` / ``Retry-After``) when it gave one: the workflow, not the SDK,
decides when to try again (``workflows/provider_wait.py``).
"""

from __future__ import annotations

import time
import traceback
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from temporalio.exceptions import ApplicationError

from activities.command_env import redact
from workflows.io import LLMCallFailed

ERROR_DETAILS_MAX_CHARS = 4000
ERROR_SUMMARY_MAX_CHARS = 500


class LLMError(Exception):
    """A failure this package detects itself (not the SDK's)."""

    def __init__(self, message: str, *, http_status: int | None = None, retryable: bool = False,
                 retry_after_s: float | None = None):
        super().__init__(message)
        self.http_status = http_status
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class LLMConfigError(LLMError):
    """The call cannot be made as configured (e.g. the key's variable is not set)."""


class LLMResponseError(LLMError):
    """The model answered something we cannot use at all (no choice, a non-function
    tool call). Unusable tool-call arguments are not this: they are model mistakes,
    returned as calls with ``arguments_error`` set, which go back to the model."""


class ScriptedProviderError(LLMError):
    """A provider failure simulated by a scripted response with ``error`` set."""


_RETRYABLE_HTTP_STATUSES = frozenset({408, 409, 429})


def retryable_status(http_status: int | None) -> bool:
    """No status (network, timeout), 408/409/429 and 5xx: a retry may help; other 4xx not."""
    return http_status is None or http_status in _RETRYABLE_HTTP_STATUSES or http_status >= 500


def classify_error(exc: BaseException) -> tuple[int | None, bool]:
    """The one classification table: ``(http_status, retryable)`` for any failure."""
    if isinstance(exc, LLMError):
        return exc.http_status, exc.retryable
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code, retryable_status(exc.status_code)
    if isinstance(exc, openai.APIResponseValidationError):
        return exc.status_code, False
    if isinstance(exc, openai.APIConnectionError | TimeoutError | ConnectionError):
        return None, True  # includes openai.APITimeoutError
    return None, False


RETRY_AFTER_MAX_S = 7 * 24 * 3600  # a provider's delay is capped (a week is "give up")


def retry_after_s(headers: Any, now: float | None = None) -> float | None:
    """The provider's delay from a response's headers: ``retry-after-ms`` (OpenAI,
    Azure), else ``Retry-After`` in seconds or as an HTTP date; None without one
    (or with one that is not a delay: negative, not a number)."""
    seconds: float | None = None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None and float(ms) >= 0:
            seconds = float(ms) / 1000
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if seconds is None and value is not None:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            try:
                at = parsedate_to_datetime(value)
                seconds = max(0.0, at.timestamp() - (time.time() if now is None else now))
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
    if seconds is None or not seconds >= 0:  # also NaN
        return None
    return min(seconds, RETRY_AFTER_MAX_S)


def _retry_after(exc: BaseException) -> float | None:
    if isinstance(exc, LLMError):
        return exc.retry_after_s
    if isinstance(exc, openai.APIStatusError):
        return retry_after_s(exc.response.headers)
    return None


def _summary(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = exc.message
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and isinstance(inner.get("message"), str):
                message = inner["message"]
        text = f"HTTP {exc.status_code}: {message}"
    else:
        text = str(exc) or type(exc).__name__
    return text.strip()


def call_failed(
    exc: BaseException, call_id: str, latency_ms: int, secret: str | None
) -> ApplicationError:
    """The error an LLM call raises for ``exc``: LLM_CALL_FAILED as its detail,
    ``secret`` (the API key) out of every text."""
    http_status, retryable = classify_error(exc)
    secrets = [secret] if secret else []
    summary = redact(_summary(exc), secrets)[:ERROR_SUMMARY_MAX_CHARS]
    details = redact("".join(traceback.format_exception(exc)), secrets)
    if len(details) > ERROR_DETAILS_MAX_CHARS:
        details = "…(truncated)\n" + details[-ERROR_DETAILS_MAX_CHARS:]
    failed = LLMCallFailed(
        call_id=call_id,
        latency_ms=latency_ms,
        error_class=type(exc).__name__,
        error_summary=summary,
        retryable=retryable,
        error_details=details,
        http_status=http_status,
    )
    delay = _retry_after(exc) if retryable else None
    return ApplicationError(
        summary,
        failed.model_dump(mode="json"),
        type=failed.error_class,
        non_retryable=not retryable,
        # The provider's own delay (Retry-After): the workflow waits at least that long.
        next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
    )
