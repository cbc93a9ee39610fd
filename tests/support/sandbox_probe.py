"""A workflow for the sandbox tests, in a module of its own: the sandbox re-imports a
workflow's module for each run, as it does a user's."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow


@workflow.defn(name="SandboxProbe")
class SandboxProbe:
    @workflow.run
    async def run(self, read_the_clock: bool) -> str:
        if read_the_clock:
            return datetime.now().isoformat()  # not deterministic: the sandbox refuses it
        return f"ran at {workflow.now().year}"
