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

Listing: Temporal 1.28+ sets the system search attribute ``TemporalReportedProblems``
(e.g. ``["category=WorkflowTaskFailed", "cause=WorkflowTaskFailedCause..."]``) once a
workflow task has failed ``system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute``
times in a row (server default 5, ``hitlflow up`` 2) and removes it when a task
succeeds again.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from api.http.errors import SESSION_STUCK, ApiError, temporal_errors
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

    Stuck means: the workflow is running and its pending workflow task is past its
    first attempt, i.e. the last one failed or timed out (from the third attempt on,
    the server refuses queries and updates). Reads one page of history, newest
    first, only in that case.
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
    for event in page.history.events:  # newest first, back to the last good task
        if event.event_type == _COMPLETED:
            break
        if event.event_type in (_FAILED, _TIMED_OUT):
            last = last or event
            first_at = event.event_time.ToDatetime(tzinfo=UTC)
    if last is None:
        return StuckView(failed_attempts=failed, since=None, cause=None, message=None,
                         reason="the workflow task keeps failing (its failure is older than "
                         f"the last {HISTORY_SCAN} history events: see the worker logs)")
    cause, message = _cause(last)
    return StuckView(failed_attempts=failed, since=first_at, cause=cause, message=message,
                     reason=f"{cause}: {message}")


async def explain(client: Client, session_id: str, err: ApiError) -> ApiError:
    """The error to answer for a query or an update that failed with ``err``.

    The server refuses them at once ("Workflow Task in failed state", 409
    ``session_stuck``) from the third attempt of a failing task on; on the second
    attempt they wait for the worker and time out (503 ``worker_unavailable``). For
    both, one describe tells whether the session is stuck: then the answer is the 409
    that says why. Any other error is answered as it is.
    """
    if err.code not in (SESSION_STUCK, "worker_unavailable"):
        return err
    try:
        with temporal_errors(session_id):
            desc = await client.get_workflow_handle(session_id).describe()
        stuck = await diagnose(client, desc)
    except ApiError:
        return err
    if stuck is None and err.code != SESSION_STUCK:
        return err
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
