"""Stuck sessions: a session whose workflow task fails on every attempt.

A bug, a non-determinism or a continue-as-new input over Temporal's payload limit
(``PAYLOADS_TOO_LARGE``) makes the workflow task fail and Temporal retry it for ever.
Temporal and the worker are up, but the session takes nothing: the server refuses
queries and updates with "Workflow Task in failed state", and the session's
``SessionStatus`` search attribute keeps its last value.

Temporal alone knows why: the pending workflow task's ``attempt`` (describe) and the
last ``WorkflowTaskFailed`` event of the history (its ``cause`` and failure message).
:func:`diagnose` reads them, and only reads history when describe already shows a
failed attempt; the routes call it only once a query or an update was refused (or
when they describe the session anyway), never on a healthy read.

Lost workers are not failures. A worker killed while it held the workflow task makes
the task time out (``WorkflowTaskTimedOut``) and Temporal retries it on another worker,
with the same growing ``attempt``; a few causes of ``WorkflowTaskFailed`` are just as
transient (:data:`TRANSIENT_CAUSES`: a signal or update that arrived while the task
completed, a sticky queue reset). None of them makes a session stuck: a session is stuck
only when, since its last completed workflow task, at least one attempt *failed* for
another cause (a bug, a non-determinism, a payload over the limit). Requests meanwhile
are uncertain, not refused (:func:`explain`: 503 with ``Retry-After``).

Listing: Temporal 1.28+ sets the system search attribute ``TemporalReportedProblems``
(e.g. ``["category=WorkflowTaskFailed", "cause=WorkflowTaskFailedCause..."]``) once a
workflow task has failed ``system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute``
times in a row (server default 5, ``hitlflow up`` 2) and removes it when a task
succeeds again.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    TimeoutType,
    UpdateWorkflowExecutionLifecycleStage,
    WorkflowTaskFailedCause,
)
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryReverseRequest,
    PollWorkflowExecutionUpdateRequest,
)
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from api.http.errors import SESSION_STUCK, ApiError, temporal_errors
from api.http.idempotency import HEADER, uncertain_headers
from api.http.models import StuckView

log = logging.getLogger("hitlflow.api")

#: Set by the Temporal server (1.28+) on a workflow whose task keeps failing.
REPORTED_PROBLEMS = SearchAttributeKey.for_keyword_list("TemporalReportedProblems")

#: The visibility query of every stuck session (``GET /api/sessions?stuck=true``).
STUCK_QUERY = "TemporalReportedProblems IS NOT NULL"
HEALTHY_QUERY = "TemporalReportedProblems IS NULL"

#: How many of the newest history events are read to find the failures (events a
#: stuck session still records after its failure are signals, cancel requests...).
HISTORY_SCAN = 200

_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
_TIMED_OUT = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED

#: Failure causes that say nothing about the session: the task is retried and goes on.
TRANSIENT_CAUSES = frozenset({
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_UPDATE,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FAILOVER_CLOSE_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW,
})

#: The 503 of a write to a stuck session that Temporal holds all the same: not refused
#: (it is applied if the session recovers), not applied yet.
STUCK_HELD = "stuck_request_held"

#: Seconds a client waits before it resends an uncertain request (``Retry-After``):
#: about a workflow task's retry after a lost worker.
RETRY_AFTER_S = 2


def is_failure(event: HistoryEvent) -> bool:
    """A workflow task attempt that failed for a cause of the session's own (not a
    timeout after a lost worker, not a transient cause)."""
    return event.event_type == _FAILED and \
        event.workflow_task_failed_event_attributes.cause not in TRANSIENT_CAUSES


def _cause(event: HistoryEvent) -> tuple[str, str]:
    """(cause, message) of a WorkflowTaskFailed or WorkflowTaskTimedOut event."""
    if event.event_type == _FAILED:
        attrs = event.workflow_task_failed_event_attributes
        cause = WorkflowTaskFailedCause.Name(attrs.cause).removeprefix(
            "WORKFLOW_TASK_FAILED_CAUSE_")
        return cause, attrs.failure.message or "(no message)"
    kind = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type
                            ).removeprefix("TIMEOUT_TYPE_")
    return f"TIMED_OUT_{kind}", ("the worker that took the workflow task did not complete "
                                 f"it in time ({kind.lower()})")


async def diagnose(client: Client, desc: WorkflowExecutionDescription) -> StuckView | None:
    """Why the session's workflow task keeps failing, or None when it does not.

    Stuck means: the workflow is running, its pending workflow task is past its
    first attempt, and since the last completed task at least one attempt failed
    for a cause of its own (:func:`is_failure`); attempts that only timed out (a
    lost worker) or failed transiently are a worker's recovery, not stuck. Reads one
    page of history, newest first, only when the task is past its first attempt.
    ``failed_attempts`` is the task's attempt minus one (Temporal records only the
    first of a streak of failures as an event).
    """
    raw = desc.raw_description
    if not raw.HasField("pending_workflow_task") or raw.pending_workflow_task.attempt < 2:
        return None
    failed = raw.pending_workflow_task.attempt - 1
    with temporal_errors(desc.id):
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=desc.id, run_id=desc.run_id),
                maximum_page_size=HISTORY_SCAN))
    last: HistoryEvent | None = None
    first_at: datetime | None = None
    problems = failures = 0
    for event in page.history.events:  # newest first, back to the last good task
        if event.event_type == _COMPLETED:
            break
        if event.event_type in (_FAILED, _TIMED_OUT):
            problems += 1
            if is_failure(event):
                failures += 1
                last = last or event
                first_at = event.event_time.ToDatetime(tzinfo=UTC)
    if problems and not failures:  # only lost workers (or transient causes)
        return None
    if last is None:
        return StuckView(failed_attempts=failed, since=None, cause=None, message=None,
                         reason="the workflow task keeps failing (its failure is older than "
                         f"the last {HISTORY_SCAN} history events: see the worker logs)")
    cause, message = _cause(last)
    return StuckView(failed_attempts=failed, since=first_at, cause=cause, message=message,
                     reason=f"{cause}: {message}")


async def admitted(client: Client, session_id: str, update_id: str) -> bool:
    """Temporal holds an update ``update_id`` of the session (admitted, accepted or
    done): a request answered 503 before and resent now may still be applied."""
    try:
        await client.workflow_service.poll_workflow_execution_update(
            PollWorkflowExecutionUpdateRequest(
                namespace=client.namespace,
                update_ref=UpdateRef(workflow_execution=WorkflowExecution(
                    workflow_id=session_id), update_id=update_id),
                identity=client.identity,
                wait_policy=WaitPolicy(lifecycle_stage=UpdateWorkflowExecutionLifecycleStage
                                       .UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED)),
            timeout=timedelta(seconds=2))
    except RPCError as err:  # unknown: not held; anything else: cannot tell (uncertain)
        return err.status != RPCStatusCode.NOT_FOUND
    return True


def uncertain(session_id: str, key: str | None, why: str,
              code: str = "worker_unavailable") -> ApiError:
    """A 503 whose request may or may not be applied yet: resend it with its key."""
    again = (f"send the same request again with {HEADER}: {key} (it returns the first "
             "one's outcome, never a second effect)") if key else "send it again"
    return ApiError(503, code, f"session {session_id}: {why}; {again}",
                    headers=uncertain_headers(key, RETRY_AFTER_S),
                    extra={"idempotency_key": key} if key else None)


def recovering(session_id: str, key: str | None) -> ApiError:
    """A 503 for a request the server did not take because the session's workflow task
    is being retried after a lost worker (it is not stuck)."""
    return uncertain(session_id, key, "its workflow task is being retried on another "
                     "worker (the last one was lost); the request was not taken",
                     code="session_recovering")


async def explain(client: Client, session_id: str, err: ApiError, *,
                  key: str | None = None, update_id: str | None = None) -> ApiError:
    """The error to answer for a query or an update (``key``/``update_id``: its
    idempotency key and Temporal update id) that failed with ``err``.

    - No worker answered in time (``worker_unavailable``): an update Temporal holds
      (:func:`admitted`) may still be applied when a worker takes the task, so it is
      a 503 with ``Retry-After`` and the key, never a refusal (to a stuck session:
      503 ``stuck_request_held``, the message says why it is stuck). For a stuck
      session and an update it does not hold, the 409 that says why. A query to a
      stuck session is that 409 too.
    - The server refused at once ("Workflow Task in failed state", from the third
      attempt of a failing or timing-out task on): one describe and one page of
      history tell whether the session is stuck (:func:`diagnose`). Stuck: the 409
      that says why, unless an update with this id is already held (a resend of a
      request answered 503 before: uncertain, 503). Not stuck (lost workers): 503
      ``session_recovering``, the request was not taken.

    Any other error is answered as it is.
    """
    if err.code not in (SESSION_STUCK, "worker_unavailable"):
        return err
    try:
        with temporal_errors(session_id):
            desc = await client.get_workflow_handle(session_id).describe()
        stuck = await diagnose(client, desc)
    except ApiError:
        stuck = None
    if err.code == "worker_unavailable":
        if update_id is None:
            return refusal(session_id, stuck) if stuck is not None else err
        if stuck is not None and not await admitted(client, session_id, update_id):
            return refusal(session_id, stuck)  # the server refused it (third attempt on)
        if stuck is not None:
            return uncertain(session_id, key, (
                f"it is stuck ({stuck.reason}); Temporal holds the request, and applies "
                "it only if an operator makes the session recover"), code=STUCK_HELD)
        return uncertain(session_id, key, "no worker answered in time; the request may "
                         "still be applied")
    if stuck is None:
        return recovering(session_id, key)
    if update_id is not None and await admitted(client, session_id, update_id):
        return uncertain(session_id, key, (
            f"it is stuck ({stuck.reason}); Temporal holds this request from an earlier "
            "send, and applies it only if an operator makes the session recover"),
            code=STUCK_HELD)
    return refusal(session_id, stuck)


def refusal(session_id: str, stuck: StuckView | None) -> ApiError:
    """The 409 of a request to a stuck session, saying why it is stuck."""
    if stuck is None:  # it recovered between the refusal and the describe
        return ApiError(409, SESSION_STUCK, f"session {session_id} could not take the request: "
                        "its workflow task was failing a moment ago; try again")
    since = f" since {stuck.since.isoformat()}" if stuck.since else ""
    return ApiError(409, SESSION_STUCK, (
        f"session {session_id} is stuck: its workflow task has failed {stuck.failed_attempts} "
        f"time(s) in a row{since} ({stuck.reason}); it takes no requests until the cause is "
        "fixed (an operator fixes the worker, or resets or terminates the session)"))


class StuckWatch:
    """Which sessions Temporal reports as stuck, asked at most once per ``ttl_s`` for
    every reader (one visibility query, whatever the read load), so that the read
    model's answers can say `stuck` too: the read model cannot know it, history has
    no event for a task that keeps failing."""

    def __init__(self, ttl_s: float = 5.0) -> None:
        self.ttl_s = ttl_s
        self._ids: frozenset[str] = frozenset()
        self._at: float | None = None
        self._lock = asyncio.Lock()
        self.supported = True

    async def ids(self, client: Client) -> frozenset[str]:
        loop = asyncio.get_running_loop()
        if not self.supported or (self._at is not None and loop.time() - self._at < self.ttl_s):
            return self._ids
        async with self._lock:
            if self._at is not None and loop.time() - self._at < self.ttl_s:
                return self._ids
            query = f'WorkflowType = "SessionWorkflow" AND ExecutionStatus = "Running" ' \
                    f"AND {STUCK_QUERY}"
            try:
                self._ids = frozenset([wf.id async for wf in client.list_workflows(query)])
            except RPCError as err:
                if err.status == RPCStatusCode.INVALID_ARGUMENT:  # no such attribute here
                    self.supported = False
                    log.warning("stuck sessions cannot be listed on this server: %s", err)
                else:  # keep the last answer; ask again next time
                    log.warning("listing stuck sessions failed: %s", err)
                    return self._ids
            self._at = loop.time()
            return self._ids

    async def view(self, client: Client, session_id: str) -> StuckView | None:
        """The session's stuck view when Temporal reports it stuck, else None."""
        if session_id not in await self.ids(client):
            return None
        try:
            desc = await client.get_workflow_handle(session_id).describe()
            return await diagnose(client, desc)
        except (ApiError, RPCError):
            return None
