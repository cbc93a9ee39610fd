"""Helpers to run real sessions: a worker with the real activities and MCP servers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from activities.mcp.pool import McpClientPool
from api.runtime.worker import build_worker
from observation.exporter.note import Signer
from workflows.config import SessionConfig
from workflows.messages import (
    CURRENT_BEHAVIOUR,
    LiveSession,
    SessionInput,
    SessionResult,
    Timing,
)
from workflows.statechart import SessionStatus

#: A session's input timing for tests that lose a worker or cannot reach a tool: a lost
#: worker is noticed after 10 s (not 15 s, or 30 s for the LLM), a freely retried
#: activity tries again after 0.1 s, 0.2 s ... (not 1 s, 2 s ...). What fires is the
#: same, sooner.
QUICK = Timing(heartbeat_s=10, retry_s=0.1)


@asynccontextmanager
async def running_worker(client: Client, task_queue: str,
                         pool: McpClientPool | None = None,
                         deltas: Any = None) -> AsyncIterator[None]:
    """``deltas``: the worker's ``DeltaBus`` (the model's text as it is written)."""
    pool = pool or McpClientPool()
    try:
        # In tests a bug in workflow code fails the session at once instead of
        # retrying the workflow task forever (which would hang the test).
        async with build_worker(client, task_queue, pool, deltas=deltas,
                                workflow_failure_exception_types=[Exception]):
            yield
    finally:
        await pool.aclose()


async def start_session(
    client: Client, config: SessionConfig, task_queue: str, **input_kw
) -> WorkflowHandle:
    session_id = f"s-{uuid.uuid4().hex[:12]}"
    return await client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=session_id, config=config,
                     **{"behaviour": CURRENT_BEHAVIOUR, **input_kw}),
        id=session_id,
        task_queue=task_queue,
        result_type=SessionResult,
    )


async def until(
    handle: WorkflowHandle, check: Callable[[LiveSession], bool], limit_s: float = 60
) -> LiveSession:
    """Query the snapshot until ``check`` holds (a condition wait, bounded)."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        snap = await handle.query("snapshot", result_type=LiveSession)
        if check(snap):
            return snap
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not reached; last snapshot: {snap}")
        await asyncio.sleep(0.02)


async def until_status(handle: WorkflowHandle, status: SessionStatus, **kw) -> LiveSession:
    return await until(handle, lambda s: s.status == status, **kw)


@contextmanager
def worker_process(client: Client, task_queue: str,
                   env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """``hitlflow worker`` as its own process on ``task_queue`` (``env`` added to its
    environment), killed with SIGKILL when the block ends (a worker lost without any
    chance to clean up)."""
    env = {**os.environ, "HITLFLOW_TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "HITLFLOW_TASK_QUEUE": task_queue, **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "api.cli", "worker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


async def forget_worker(client: Client, *handles: WorkflowHandle) -> None:
    """Tell Temporal that the worker which ran these sessions is gone with its cache
    (``ResetStickyTaskQueue``, what the server does itself once it sees the worker
    gone): their next workflow task goes to the task queue, for any worker, instead
    of first waiting out the killed worker's sticky queue (10 s). Call it right after
    a worker was killed, before anything schedules a workflow task; what the lost
    worker held still costs its timeout."""
    for h in handles:
        request = ResetStickyTaskQueueRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=h.id))
        try:
            await client.workflow_service.reset_sticky_task_queue(request, retry=True)
        except RPCError as err:  # only a shortcut: without it the sticky timeout passes
            print(f"forget_worker: {h.id}: {err} (the sticky queue times out instead)")


async def until_file(path: Path, limit_s: float = 60) -> None:
    """Wait (bounded) until ``path`` exists: a process under test reached a point."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not path.exists():
        assert asyncio.get_running_loop().time() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


@asynccontextmanager
async def running_exporter(client: Client, data_dir: Path, task_queue: str | None = None,
                           feed: Any = None, signer: Signer | None = None
                           ) -> AsyncIterator[Any]:
    """The exporter with its read model (SQLite in ``data_dir``), following the
    sessions of ``task_queue`` (default: all), as ``hitlflow up`` runs it (with
    ``feed``, a ``LogFeed``, told every committed batch after the read model; with
    ``signer``, signing each log's checkpoint, its verifier key published)."""
    from observation.exporter.follower import SESSION_QUERY
    from observation.exporter.keys import publish_verifier
    from observation.exporter.service import Exporter, start_read_model
    from observation.read_model.sync import AfterReadModel, ReadModelObserver, Tee
    from observation.read_model.writer import GroupWriter

    store = await asyncio.to_thread(start_read_model, data_dir, data_dir / "runs")
    assert store is not None
    writer = GroupWriter(store)  # as run_exporter writes it: in groups, the feed after
    query = SESSION_QUERY + (f' AND TaskQueue = "{task_queue}"' if task_queue else "")
    if signer is not None:
        publish_verifier(data_dir, signer.verifier())
    exporter = Exporter(client, data_dir / "runs", query=query, discover_every_s=0.2,
                        observers=lambda sid: Tee([
                            ReadModelObserver(sid, writer),
                            AfterReadModel(feed.observer(sid), writer) if feed else None]),
                        signer=signer)
    if feed is not None:
        feed.want = exporter.wake
    stop = asyncio.Event()
    task = asyncio.create_task(exporter.run(stop))
    try:
        yield exporter
    finally:
        stop.set()
        await task
        await asyncio.to_thread(writer.close)
        store.close()
