"""Restart recovery (seed 004) at a cost that does not grow with the waiting sessions.

A worker that starts while other workers poll its task queue is not an orchestrator
restart: the sessions were never orphaned, so it sends nothing. Only a cold start
(no other poller seen lately) asks the waiting sessions to check themselves, with
ONE server-side batch operation (a ``recover`` signal to every session the
visibility query matches): a fixed number of RPCs per worker start, whatever the
number of waiting sessions. Workers that start cold together may each start a
batch; the workflow's check is idempotent, so a duplicate ``recover`` is harmless.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from temporalio.api.batch.v1 import BatchOperationSignal
from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import PollerInfo, TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    StartBatchOperationRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from workflows.messages import RecoverInput

log = logging.getLogger("hitlflow.worker")

#: A live worker polls again at least every long-poll interval (the server's
#: ``matching.longPollExpirationInterval``, 1 min by default): a poller seen within
#: this window counts as alive.
LIVE_POLLER_WINDOW = timedelta(seconds=90)
#: Retries while another batch operation runs (Temporal allows few per namespace).
BATCH_ATTEMPTS = 5


def recover_query(task_queue: str) -> str:
    """The waiting sessions of ``task_queue`` (its workers check them)."""
    return ('WorkflowType = "SessionWorkflow" AND ExecutionStatus = "Running" AND '
            f'SessionStatus = "waiting_user" AND TaskQueue = "{task_queue}"')


def live_pollers(pollers: Iterable[PollerInfo], now: datetime,
                 window: timedelta = LIVE_POLLER_WINDOW) -> list[str]:
    """The identities of the pollers seen within ``window`` before ``now``."""
    return [p.identity for p in pollers
            if now - p.last_access_time.ToDatetime(tzinfo=UTC) <= window]


async def other_workers(client: Client, task_queue: str,
                        window: timedelta = LIVE_POLLER_WINDOW) -> list[str]:
    """Workers polling ``task_queue`` lately (call it before this worker polls)."""
    resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    return live_pollers(resp.pollers, datetime.now(UTC), window)


async def start_recovery(client: Client, task_queue: str, identity: str) -> str:
    """Start the batch that signals ``recover`` to every waiting session of
    ``task_queue``; return its job id (``temporal batch describe --job-id``)."""
    payloads = await client.data_converter.encode([RecoverInput(worker_identity=identity)])
    job_id = f"hitlflow-recover-{task_queue}-{uuid.uuid4().hex[:12]}"
    request = StartBatchOperationRequest(
        namespace=client.namespace, visibility_query=recover_query(task_queue),
        job_id=job_id, reason=f"restart recovery: {identity} started cold",
        signal_operation=BatchOperationSignal(
            signal="recover", input=Payloads(payloads=payloads), identity=identity))
    for attempt in range(BATCH_ATTEMPTS):
        try:
            await client.workflow_service.start_batch_operation(request)
            return job_id
        except RPCError as err:
            # Another batch runs (the namespace's limit): wait for it, a few times.
            if err.status != RPCStatusCode.RESOURCE_EXHAUSTED or attempt + 1 == BATCH_ATTEMPTS:
                raise
            await asyncio.sleep(2 ** attempt)
    raise AssertionError("unreachable")
