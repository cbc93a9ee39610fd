"""The session worker: SessionWorkflow plus the LLM and MCP tool activities.

Any number of workers may run against one Temporal server; nothing here
assumes it is the only one. At start-up a worker asks every session in
``waiting_user`` to check its pending request (restart recovery, seed 004).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.commands import run_command
from activities.llm import LlmActivities
from activities.mcp_pool import McpClientPool
from activities.tools import McpToolActivities
from api.settings import HitlflowSettings
from workflows.messages import RecoverInput
from workflows.session import SessionWorkflow

log = logging.getLogger("hitlflow.worker")


async def connect(settings: HitlflowSettings) -> Client:
    return await Client.connect(
        settings.target, namespace=settings.namespace, data_converter=pydantic_data_converter
    )


def build_worker(
    client: Client, task_queue: str, pool: McpClientPool, **options: Any
) -> Worker:
    tools = McpToolActivities(pool)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[SessionWorkflow],
        activities=[LlmActivities().llm_call, tools.list_tools, tools.call_tool, run_command],
        **options,
    )


def worker_identity() -> str:
    return f"hitlflow-{socket.gethostname()}-{os.getpid()}"


async def recover_waiting_sessions(client: Client) -> int:
    """Signal ``recover`` to every running session in waiting_user; return how many."""
    count = 0
    query = 'WorkflowType = "SessionWorkflow" AND ExecutionStatus = "Running" AND ' \
            'SessionStatus = "waiting_user"'
    async for wf in client.list_workflows(query):
        try:
            await client.get_workflow_handle(wf.id, run_id=wf.run_id).signal(
                "recover", RecoverInput(worker_identity=worker_identity())
            )
            count += 1
        except Exception as err:  # one closed session must not stop the others
            log.warning("recover signal to %s failed: %s", wf.id, err)
    return count


async def run_worker(
    settings: HitlflowSettings, stop: asyncio.Event, client: Client | None = None
) -> None:
    """Run a worker until ``stop`` is set; MCP servers are closed on the way out."""
    client = client or await connect(settings)
    pool = McpClientPool(idle_s=settings.mcp_idle_s, max_servers=settings.mcp_max_servers)
    try:
        async with build_worker(client, settings.task_queue, pool):
            recovered = await recover_waiting_sessions(client)
            log.info("worker started; %d waiting session(s) asked to recover", recovered)
            await stop.wait()
    finally:
        await pool.aclose()
