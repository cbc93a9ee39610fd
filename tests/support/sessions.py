"""Helpers to run real sessions: a worker with the real activities and MCP servers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from temporalio.client import Client, WorkflowHandle

from activities.mcp_pool import McpClientPool
from api.worker import build_worker
from workflows.config import SessionConfig
from workflows.messages import SessionInput, SessionResult, SessionSnapshot
from workflows.statechart import SessionStatus


@asynccontextmanager
async def running_worker(client: Client, task_queue: str) -> AsyncIterator[None]:
    pool = McpClientPool()
    try:
        # In tests a bug in workflow code fails the session at once instead of
        # retrying the workflow task forever (which would hang the test).
        async with build_worker(client, task_queue, pool,
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
        SessionInput(session_id=session_id, config=config, **input_kw),
        id=session_id,
        task_queue=task_queue,
        result_type=SessionResult,
    )


async def until(
    handle: WorkflowHandle, check: Callable[[SessionSnapshot], bool], limit_s: float = 60
) -> SessionSnapshot:
    """Query the snapshot until ``check`` holds (a condition wait, bounded)."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        snap = await handle.query("snapshot", result_type=SessionSnapshot)
        if check(snap):
            return snap
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not reached; last snapshot: {snap}")
        await asyncio.sleep(0.02)


async def until_status(handle: WorkflowHandle, status: SessionStatus, **kw) -> SessionSnapshot:
    return await until(handle, lambda s: s.status == status, **kw)
