"""The workers' sandbox (``api.sandbox``): temporalio's, with its code compiled once."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import (
    RestrictedWorkflowAccessError,
    SandboxedWorkflowRunner,
)

from api.sandbox import CompiledSandboxRunner, compiled
from api.worker import SESSION_RUNNER
from tests.support.sandbox_probe import SandboxProbe


def test_the_session_runner_is_the_compiled_sandbox():
    assert isinstance(SESSION_RUNNER, CompiledSandboxRunner)
    assert isinstance(SESSION_RUNNER, SandboxedWorkflowRunner)


def test_a_source_is_compiled_once():
    source = "__probe = 6 * 7\n"
    assert compiled(source) is compiled(source)
    scope: dict = {}
    exec(compiled(source), scope, scope)
    assert scope["__probe"] == 42


async def test_workflows_run_on_compiled_code_and_the_sandbox_still_restricts(
        dev_env: WorkflowEnvironment):
    tq = f"sandbox-{uuid.uuid4().hex[:8]}"
    before = compiled.cache_info()
    async with Worker(dev_env.client, task_queue=tq, workflows=[SandboxProbe],
                      workflow_runner=CompiledSandboxRunner(),
                      workflow_failure_exception_types=[RestrictedWorkflowAccessError]):
        done = await dev_env.client.execute_workflow(
            SandboxProbe.run, False, id=f"probe-{uuid.uuid4().hex[:8]}", task_queue=tq)
        assert done.startswith("ran at ")
        # The instance entered the sandbox through compiled code, reused across calls.
        after = compiled.cache_info()
        assert after.hits > before.hits
        with pytest.raises(WorkflowFailureError) as failed:
            await dev_env.client.execute_workflow(
                SandboxProbe.run, True, id=f"probe-{uuid.uuid4().hex[:8]}", task_queue=tq)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "RestrictedWorkflowAccessError"
