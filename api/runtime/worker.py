"""The session worker: SessionWorkflow plus the LLM and MCP tool activities.

Any number of workers may run against one Temporal server; nothing here
assumes it is the only one. A worker that starts while no other polls its task
queue (a cold start of the orchestrator) asks every session in ``waiting_user``
to check its pending request with one batch operation (seed 004; ``api.runtime.recovery``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from temporalio.client import Client
from temporalio.worker import Worker

from activities.command_env import PRIVATE_KEY_PREFIX, remember_secret, remember_secret_file
from activities.commands import run_command
from activities.deltas import DeltaBus, cluster_delta_bus
from activities.llm.activity import LlmActivities
from activities.mcp.pool import McpClientPool
from activities.mcp.tools import McpToolActivities
from api.runtime.process import connect
from api.runtime.recovery import other_workers, start_recovery
from api.runtime.sandbox import sandbox_runner
from api.settings import HitlflowSettings
from workflows.journal_carrier import INTERCEPTORS
from workflows.session import SessionWorkflow

log = logging.getLogger("hitlflow.worker")
#: observation.exporter.keys.KEY_NAME, not imported: the exporter package is heavy.
CHECKPOINT_KEY_FILE = "checkpoint.key"

#: The sandbox (``api.runtime.sandbox``) with ``workflows.session`` passed through: its
#: re-import for every new session was, measured, the largest part of a new session's
#: cost on the worker.
SESSION_RUNNER = sandbox_runner("workflows.session")


def build_worker(
    client: Client, task_queue: str, pool: McpClientPool, *, deltas: DeltaBus | None = None,
    **options: Any
) -> Worker:
    """``deltas``: where the LLM activity's text goes while it is written (SSE
    ``text.delta``); without one, nowhere."""
    tools = McpToolActivities(pool)
    llm = LlmActivities(deltas)  # llm_cut_text reads what this one's llm_call streamed
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[SessionWorkflow],
        interceptors=[*INTERCEPTORS, *options.pop("interceptors", [])],
        workflow_runner=options.pop("workflow_runner", SESSION_RUNNER),
        activities=[llm.llm_call, llm.llm_cut_text, tools.list_tools, tools.call_tool,
                    run_command],
        **options,
    )


def remember_worker_secrets(settings: HitlflowSettings) -> None:
    """The secrets this worker holds by its settings (options as well as the
    environment), redacted from every command's output (activities.command_env)."""
    remember_secret(settings.api_token)
    if settings.read_model_url:
        remember_secret(urlsplit(settings.read_model_url).password)
    key = (settings.checkpoint_key or "").strip()
    if key.startswith(PRIVATE_KEY_PREFIX):
        remember_secret(key)
    else:  # read at each command: `up`'s exporter may create it after the worker starts
        remember_secret_file(Path(key) if key else settings.data_dir / CHECKPOINT_KEY_FILE)


def worker_identity() -> str:
    """Unique per worker (several may share a process in tests)."""
    return f"hitlflow-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


async def run_worker(
    settings: HitlflowSettings, stop: asyncio.Event, client: Client | None = None,
    deltas: DeltaBus | None = None, on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run a worker until ``stop`` is set; MCP servers are closed on the way out;
    ``deltas``: see :func:`build_worker` (default: PostgreSQL's ``NOTIFY`` when the
    read model is there, for the API processes of a cluster); ``on_ready(identity)``
    once it polls."""
    client = client or await connect(settings)
    own = cluster_delta_bus(settings.read_model_url) if deltas is None else None
    deltas = deltas or own
    identity = worker_identity()
    remember_worker_secrets(settings)
    pool = McpClientPool(idle_s=settings.mcp_idle_s, max_servers=settings.mcp_max_servers)
    try:
        try:  # before this worker polls: a poller seen now is another worker
            others = await other_workers(client, settings.task_queue,
                                         timedelta(seconds=settings.live_poller_window_s))
        except Exception as err:  # cannot tell: recover (a duplicate check is harmless)
            log.warning("cannot list the task queue's pollers: %s", err)
            others = []
        async with build_worker(client, settings.task_queue, pool, identity=identity,
                                deltas=deltas,
                                max_cached_workflows=settings.worker_max_cached_workflows):
            if others:
                log.info("worker %s started next to %d live worker(s): nothing to recover",
                         identity, len(others))
            else:
                job = await start_recovery(client, settings.task_queue, identity)
                log.info("worker %s started cold; waiting sessions asked to recover "
                         "(batch %s)", identity, job)
            if on_ready is not None:
                on_ready(identity)
            await stop.wait()
    finally:
        await pool.aclose()
        if own is not None:
            await asyncio.to_thread(own.close)
