"""The workers' workflow sandbox: temporalio's own, with the code it runs compiled once.

temporalio's sandbox (1.35) enters a workflow by ``exec`` of a short source string:
once per activation, and several times per payload of each activation and each
completion, to ask the workflow for its serialization context. ``exec`` of a string
compiles it every time, about 25 µs on this machine. The strings are the same few for
every call of a workflow class, so :class:`CompiledSandboxRunner` compiles each one
once; what runs, in which sandbox, under which restrictions, is temporalio's unchanged.
Measured with ``bench/replay_bench.py`` (the saved histories replayed, 7 runs each way,
alternating): 0.81× and 0.86× the worker's CPU by median in two runs."""

from __future__ import annotations

from functools import lru_cache
from types import CodeType
from typing import Any

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance


@lru_cache(maxsize=256)  # a handful of strings per workflow class
def compiled(source: str) -> CodeType:
    """``source`` compiled as ``exec`` would compile it (same file name)."""
    return compile(source, "<string>", "exec")


class _CompiledInstance(_Instance):
    def _run_code(self, code: Any, **extra_globals: Any) -> None:
        super()._run_code(compiled(code) if isinstance(code, str) else code, **extra_globals)


class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """temporalio's :class:`SandboxedWorkflowRunner` (same restrictions, same runner
    class), whose instances run precompiled code."""

    def create_instance(self, det: Any) -> _CompiledInstance:
        return _CompiledInstance(det, self.runner_class, self.restrictions)
