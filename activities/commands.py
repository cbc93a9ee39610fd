"""Shell commands for plan steps: the run of a step, its verify command, and
in-window steps (long-running processes supervised by heartbeats).

The command's outcome is data (exit code, output, duration), never an
exception: the workflow's pure ``resolve()`` decides what it means. A command
sees a minimal environment, never the worker's, and the secrets the worker knows
are redacted from its output (``activities.command_env``). Only a lost
worker surfaces as an activity failure (a heartbeat timeout), and the workflow
decides that in one place too.

Every command runs in its own process group (``start_new_session=True``: the
shell is the group's leader and its pid is the group id), so that stopping it
(a timeout, a cancelled activity) stops everything it started.

A window (``purpose="window"``) is lost when its process is killed rather than
exiting (seed 002: WindowLost is the environment's verdict, StepCompleted the
process's own exit). The rule, decided here once per window:

* the window's process is the group's leader, the shell that runs the command;
  the window ends when the leader ends, whether or not other members still live
  (a child holding the output pipes no longer hides the leader's death);
* the window is **lost** when the leader was terminated by a signal N, or when
  it exited with status 128+N for a signal N: that is how a shell (and ``wait``)
  reports that the command it was running was killed by signal N, so a killed
  child of the window is a killed window, not ``StepCompleted(137)``;
* any other exit status is the window exiting on its own: ``StepCompleted``,
  even if some member of its group died earlier and the shell carried on;
* however the window ends, the rest of its group is killed (SIGKILL at once
  when it was lost, SIGTERM then SIGKILL when it exited) before the result is
  returned, so nothing of a window lingers; a cancelled activity stops the
  group the same way;
* a window still running after its ``timeout_s`` is stopped and reported as
  exit 124 (a failure the step's ``on_fail`` routes, not a loss).

A lost window comes back as ``killed_by_signal=N``; the workflow turns that into
exactly one ``WindowLost``. Zombies (dead, not yet reaped) count as gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

from temporalio import activity

from activities.command_env import command_env, redact, secret_values
from workflows.io import CommandInput, CommandResult

OUTPUT_LIMIT = 64 * 1024
HEARTBEAT_EVERY_S = 1.0
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
DRAIN_LIMIT_S = 5.0  # reading what is left once the group is gone
SIGNALS = frozenset(int(s) for s in signal.valid_signals())


def _clip(data: bytes, secrets: list[str]) -> str:
    """The output as text, secrets redacted (before it is cut: no half secret shows)."""
    text = redact(data.decode("utf-8", errors="replace"), secrets)
    return text if len(text) <= OUTPUT_LIMIT else text[:OUTPUT_LIMIT] + "\n[... output cut]"


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid`` (Linux ``/proc``)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


async def _gone(pgid: int, limit_s: float) -> bool:
    """Wait (bounded) until no live member of the group is left."""
    deadline = time.monotonic() + limit_s
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def stop_group(pgid: int, grace_s: float = STOP_GRACE_S) -> None:
    """Stop the whole process group: SIGTERM and ``grace_s`` to exit, then SIGKILL
    (at once when ``grace_s`` is 0). Signals only a group that still has members."""
    if grace_s > 0 and group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        if await _gone(pgid, grace_s):
            return
    if group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        await _gone(pgid, STOP_GRACE_S)


def window_signal(returncode: int) -> int | None:
    """The signal that killed a window whose leader ended with ``returncode``
    (see the module's rule), or None when the window exited on its own."""
    if returncode < 0:
        return -returncode
    if returncode > 128 and returncode - 128 in SIGNALS:
        return returncode - 128
    return None


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Knows when the leader exited, even while others still hold its pipes
    (``Process.wait()`` only returns once the pipes are closed too)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def _spawn(input: CommandInput) -> tuple[asyncio.subprocess.Process, _Protocol]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_shell(
        lambda: _Protocol(limit=2**16, loop=loop), input.command,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, cwd=input.cwd, start_new_session=True,
        env=command_env(input.pass_env))
    return asyncio.subprocess.Process(transport, protocol, loop), protocol


async def _pump(stream: asyncio.StreamReader | None, into: bytearray) -> None:
    while stream is not None and (chunk := await stream.read(65536)):
        if len(into) <= OUTPUT_LIMIT * 4:  # enough to clip; the rest is read and dropped
            into += chunk


@activity.defn(name="run_command")
async def run_command(input: CommandInput) -> CommandResult:
    """Run ``input.command`` in a shell, in its own process group; heartbeat while
    it runs; stop the group on timeout or when the activity is cancelled (a person
    decided the step meanwhile). A window ends with its leader (module docstring)."""
    started = time.monotonic()
    proc, protocol = await _spawn(input)
    pgid = proc.pid
    window = input.purpose == "window"
    out, err = bytearray(), bytearray()
    output = asyncio.ensure_future(asyncio.gather(_pump(proc.stdout, out),
                                                  _pump(proc.stderr, err)))
    exited = asyncio.ensure_future(protocol.exited.wait())
    # A window ends with its leader; a run or verify command when its output closes
    # too (as before: a background child that keeps the pipes open is waited for).
    ends = {exited} if window else {exited, output}
    timed_out = False
    try:
        while not all(f.done() for f in ends):
            activity.heartbeat(proc.pid)
            await asyncio.wait(ends, timeout=HEARTBEAT_EVERY_S,
                               return_when=asyncio.ALL_COMPLETED)
            if not all(f.done() for f in ends) and time.monotonic() - started > input.timeout_s:
                timed_out = True
                await stop_group(pgid)
                await exited
                break
        code = proc.returncode if proc.returncode is not None else -1
        lost = window_signal(code) if window and not timed_out else None
        if window:  # nothing of a window outlives it
            await stop_group(pgid, 0 if lost is not None else STOP_GRACE_S)
        with contextlib.suppress(TimeoutError):  # a process that left the group may hold a pipe
            await asyncio.wait_for(asyncio.shield(output), DRAIN_LIMIT_S)
    except asyncio.CancelledError:
        await stop_group(pgid)
        raise
    finally:
        exited.cancel()
        if not output.done():
            output.cancel()
    secrets = secret_values()
    stderr = _clip(bytes(err), secrets)
    if timed_out:
        code = 124
        stderr += f"\ntimed out after {input.timeout_s:g} s"
    elif lost is not None and code > 0:
        stderr += f"\nthe window's command was killed by signal {lost} (exit {code})"
    return CommandResult(
        exit_code=code, stdout=_clip(bytes(out), secrets), stderr=stderr,
        duration_s=round(time.monotonic() - started, 3),
        killed_by_signal=lost if window else (-code if code < 0 else None),
    )
