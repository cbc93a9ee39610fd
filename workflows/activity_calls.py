"""How the agent turn calls its activities: retry policies and timeouts, and what
an activity's failure says (not sent, the tool call's outcome, a provider failure).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from workflows.messages import Timing
    from workflows.outcome import failed_call_outcome
    from workflows.provider_wait import ProviderFailure

RETRY_FREELY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
AT_MOST_ONCE = RetryPolicy(maximum_attempts=1)
# One attempt per LLM activity: the workflow waits and tries again itself
# (workflows/provider_wait.py), so the wait is in history and says so.
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
TOOL_TIMEOUT = timedelta(minutes=5)
TOOL_HEARTBEAT = timedelta(seconds=15)
# Listing the tools (starting their servers first) heartbeats every 2 s from its
# start: a worker lost meanwhile costs this, not the listing's 2-minute timeout.
LIST_TOOLS_HEARTBEAT = timedelta(seconds=10)
# The LLM activity heartbeats every few seconds while it runs (a streamed answer, or
# a model that thinks long before its first token): a lost worker is seen within
# this, not after the whole call's timeout.
LLM_HEARTBEAT = timedelta(seconds=30)


def heartbeat(default: timedelta, timing: Timing | None) -> timedelta:
    """An activity's heartbeat timeout: ``default``, unless the session's input
    sets a shorter one (``Timing.heartbeat_s``: tests)."""
    if timing is None or timing.heartbeat_s is None:
        return default
    return timedelta(seconds=timing.heartbeat_s)


def retry_freely(timing: Timing | None) -> RetryPolicy:
    """``RETRY_FREELY``, starting at ``Timing.retry_s`` when the session's input
    sets it (tests); the same number of attempts either way."""
    if timing is None or timing.retry_s is None:
        return RETRY_FREELY
    return RetryPolicy(initial_interval=timedelta(seconds=timing.retry_s),
                       maximum_interval=RETRY_FREELY.maximum_interval,
                       maximum_attempts=RETRY_FREELY.maximum_attempts)


# Errors raised before a tool call was sent (the worker's MCP pool was full): the
# outcome is known, the call did not run. (Runs without sent marks only.)
NOT_SENT_ERRORS = ("McpPoolFullError",)


def not_sent(err: ActivityError) -> bool:
    return isinstance(err.cause, ApplicationError) and err.cause.type in NOT_SENT_ERRORS


# Failures of a freely retried tool call that say its tool was not reached (the worker
# could not start or keep its server, the pool was full): tried again for the window.
UNREACHED_ERRORS = ("McpPoolFullError", "McpNotSentError", "McpTransportError",
                    "ToolCallNotSent")


def unreached(err: ActivityError) -> bool:
    """The call failed only because no worker could reach its tool: a lost worker (a
    heartbeat timeout) or a transport failure; not a slow tool, not a bug."""
    cause = err.cause
    if isinstance(cause, ActivityTimeout):
        return cause.type == TimeoutType.HEARTBEAT
    return isinstance(cause, ApplicationError) and cause.type in UNREACHED_ERRORS


def call_outcome(err: ActivityError, attempt_id: str | None):
    cause = err.cause
    if isinstance(cause, ActivityTimeout):
        return failed_call_outcome(error_type=None, attempt_id=attempt_id,
                                   heartbeat_details=cause.last_heartbeat_details)
    error_type = cause.type if isinstance(cause, ApplicationError) else type(cause).__name__
    return failed_call_outcome(error_type=error_type or "error", attempt_id=attempt_id,
                               heartbeat_details=None)


def failure_text(err: BaseException) -> str:
    inner = err.__cause__ or err
    return str(getattr(inner, "message", None) or inner) or type(inner).__name__


def provider_failure(err: ActivityError) -> ProviderFailure:
    """A failed LLM attempt in the provider-wait rules' terms. The activity's own
    failures carry the LLM_CALL_FAILED payload and the provider's delay; anything
    else (a timeout: the worker was lost) may pass."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        detail = cause.details[0] if cause.details and isinstance(cause.details[0], dict) \
            else {}
        delay = cause.next_retry_delay
        return ProviderFailure(
            summary=failure_text(err), retryable=not cause.non_retryable,
            http_status=detail.get("http_status"),
            retry_after_s=delay.total_seconds() if delay is not None else None)
    return ProviderFailure(summary=failure_text(err), retryable=True)
