"""The session worker's sandbox passes ``workflows.session`` through: the sandbox
re-imports a workflow's module for every new workflow instance unless it is passed
through (measured: most of the cost of a new session on the worker)."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner

from activities.mcp.pool import McpClientPool
from api.runtime.worker import SESSION_RUNNER, build_worker


def test_the_session_runner_passes_the_workflow_module_through():
    assert "workflows.session" in SESSION_RUNNER.restrictions.passthrough_modules


async def test_build_worker_uses_the_session_runner_unless_told(dev_env: WorkflowEnvironment):
    pool = McpClientPool()
    worker = build_worker(dev_env.client, "sandbox-config", pool)
    assert worker.config()["workflow_runner"] is SESSION_RUNNER
    other = UnsandboxedWorkflowRunner()
    worker = build_worker(dev_env.client, "sandbox-config-other", pool, workflow_runner=other)
    assert worker.config()["workflow_runner"] is other
