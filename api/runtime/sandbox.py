"""The workers' workflow sandbox: temporalio's own, entered less often and through code
compiled once.

temporalio's sandbox (1.35) enters a workflow by ``exec`` of a short source string:
once per activation, and several times per payload of each activation and each
completion, to ask the workflow for the payload's serialization and storage context
(each of its three encode or decode passes asks again). ``exec`` of a string compiles
it every time, about 25 µs on this machine, and each entry swaps the importer and the
builtins in and out. :class:`CompiledSandboxRunner` compiles each string once, and asks
for a command's contexts once between two activations (the workflow's state, which
they are read from, does not move in between); what runs, in which sandbox, under
which restrictions, is temporalio's unchanged. Measured with ``bench/replay_bench.py``
(the saved histories replayed, runs alternating): the compiling alone 0.81× and 0.86×
the worker's CPU by median in two runs; with the contexts asked once too, 0.69×, 0.80×
and 0.75× in three.

``_Instance`` is the SDK's private class: pyproject.toml pins temporalio below its next
minor version, and ``tests/api/runtime/test_sdk_private_api.py`` fails, saying what changed,
when a release changes what this module relies on."""

from __future__ import annotations

from functools import lru_cache
from types import CodeType
from typing import Any

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance


@lru_cache(maxsize=256)  # a handful of strings per workflow class
def compiled(source: str) -> CodeType:
    """``source`` compiled as ``exec`` would compile it (same file name)."""
    return compile(source, "<string>", "exec")


class _CompiledInstance(_Instance):
    def __init__(self, *args: Any) -> None:
        # Between two activations the workflow's state does not move, so neither does
        # the context it gives a command: asked once per command, not per payload pass.
        self._contexts: dict[tuple[str, Any], Any] = {}
        super().__init__(*args)

    def _run_code(self, code: Any, **extra_globals: Any) -> None:
        super()._run_code(compiled(code) if isinstance(code, str) else code, **extra_globals)

    def activate(self, act: Any) -> Any:
        try:
            return super().activate(act)
        finally:
            self._contexts.clear()  # the state moved: the contexts may have too

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._context("serialization", command_info, super().get_serialization_context)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._context("store", command_info, super().get_external_store_context)

    def _context(self, kind: str, command_info: Any, ask: Any) -> Any:
        key = (kind, command_info)
        if key not in self._contexts:
            self._contexts[key] = ask(command_info)
        return self._contexts[key]


class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """temporalio's :class:`SandboxedWorkflowRunner` (same restrictions, same runner
    class), whose instances run precompiled code and ask for a context once."""

    def create_instance(self, det: Any) -> _CompiledInstance:
        return _CompiledInstance(det, self.runner_class, self.restrictions)


def sandbox_runner(workflow_module: str) -> CompiledSandboxRunner:
    """The runner with ``workflow_module`` passed through: the sandbox re-imports a
    workflow's module for every new workflow instance otherwise (executing its body and
    ``workflow.defn`` again). Only for a module that holds no state of its own and whose
    imports are passed through already; its determinism is the replay tests' to check."""
    return CompiledSandboxRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(workflow_module))
