"""The workers' sandbox (``api.runtime.sandbox``): temporalio's, with its code compiled once."""

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
from temporalio.worker.workflow_sandbox._runner import _Instance

from api.runtime.sandbox import CompiledSandboxRunner, compiled
from api.runtime.worker import SESSION_RUNNER
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


async def test_a_command_s_context_is_asked_once_per_activation_not_per_payload_pass(
        dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch):
    """temporalio asks the sandbox for a payload's context in each of its encode and
    decode passes; the compiled runner asks once per command between activations."""
    asked: list[object] = []
    into_sandbox = _Instance.get_serialization_context

    def counted(self: _Instance, command_info: object) -> object:
        asked.append(command_info)
        return into_sandbox(self, command_info)

    monkeypatch.setattr(_Instance, "get_serialization_context", counted)

    async def asks(runner: SandboxedWorkflowRunner) -> int:
        asked.clear()
        tq = f"sandbox-{uuid.uuid4().hex[:8]}"
        async with Worker(dev_env.client, task_queue=tq, workflows=[SandboxProbe],
                          workflow_runner=runner):
            assert (await dev_env.client.execute_workflow(
                SandboxProbe.run, False, id=f"probe-{uuid.uuid4().hex[:8]}", task_queue=tq)
            ).startswith("ran at ")
        return len(asked)

    stock, compiled_runner = await asks(SandboxedWorkflowRunner()), await asks(
        CompiledSandboxRunner())
    assert 0 < compiled_runner < stock
