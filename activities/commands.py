"""Shell commands for plan steps: the run of a step, its verify command, and
in-window steps (long-running processes supervised by heartbeats).

The command's outcome is data (exit code, output, duration), never an
exception: the workflow's pure ``resolve()`` decides what it means. Only a lost
worker surfaces as an activity failure (a heartbeat timeout), and the workflow
decides that in one place too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

from temporalio import activity

from workflows.io import CommandInput, CommandResult

OUTPUT_LIMIT = 64 * 1024
HEARTBEAT_EVERY_S = 1.0


def _clip(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= OUTPUT_LIMIT else text[:OUTPUT_LIMIT] + "\n[... output cut]"


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Stop the command's whole process group: SIGTERM, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


@activity.defn(name="run_command")
async def run_command(input: CommandInput) -> CommandResult:
    """Run ``input.command`` in a shell; heartbeat while it runs; stop it on timeout
    or when the activity is cancelled (a person decided the step meanwhile)."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_shell(
        input.command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, cwd=input.cwd, start_new_session=True,
    )
    output = asyncio.ensure_future(proc.communicate())
    timed_out = False
    try:
        while not output.done():
            activity.heartbeat(proc.pid)
            done, _ = await asyncio.wait({output}, timeout=HEARTBEAT_EVERY_S)
            if not done and time.monotonic() - started > input.timeout_s:
                timed_out = True
                await _stop(proc)
                break
        stdout, stderr = await output
    except asyncio.CancelledError:
        await _stop(proc)
        raise
    code = proc.returncode if proc.returncode is not None else -1
    err = _clip(stderr)
    if timed_out:
        code = 124
        err += f"\ntimed out after {input.timeout_s:g} s"
    return CommandResult(
        exit_code=code, stdout=_clip(stdout), stderr=err,
        duration_s=round(time.monotonic() - started, 3),
        killed_by_signal=-code if code < 0 else None,
    )
