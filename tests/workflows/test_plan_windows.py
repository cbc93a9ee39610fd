"""In-window steps (seed 002): a window runs in its own process group; it is lost
when its process is killed rather than exiting (``activities/commands.py`` states
the rule), the loss is recorded once, and nothing of the group lingers. And a
failed verify records only the verify's output (seed 002 section 4)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.commands import group_members, run_command, window_signal
from tests.support.sessions import start_session, until_file, until_status
from tests.workflows.test_plan_session import command, kinds, plan
from workflows.io import CommandInput
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def sleeping_child(leader: int, limit_s: float = 30) -> int:
    """The ``sleep`` of the window's group (bounded wait until the shell started it)."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        found = [p for p in group_members(leader) if p != leader and comm(p) == "sleep"]
        if found:
            return found[0]
        assert asyncio.get_running_loop().time() < deadline, "the window's sleep never started"
        await asyncio.sleep(0.02)


def window(pid_file: Path) -> dict:
    # `sleep` is a child of the shell (not exec'd: a command follows it).
    return {"run": f"echo $$ > {pid_file}; sleep 600; exit $?", "in_window": True,
            "on_fail": "human"}


async def lost_once(h) -> SessionState:
    await until_status(h, W, limit_s=30)
    state = await h.query("state", result_type=SessionState)
    assert kinds(state) == ["TaskStarted", "WindowLaunched", "WindowLost",
                            "StepWaiting(on_fail_human)"]
    return state


@pytest.mark.parametrize("victim", ["leader", "child"])
async def test_killed_window_group_is_lost_once_and_nothing_lingers(
    ts_worker, task_queue, tmp_path, victim
):
    """SIGKILL of the shell while its child lives, or of the child only: either
    way the window was killed, not exited: one WindowLost, no StepCompleted(137)."""
    pid_file = tmp_path / "pid"
    h = await start_session(ts_worker.client, plan(window(pid_file)), task_queue,
                            search_attributes=False)
    await until_file(pid_file)
    leader = int(pid_file.read_text())
    child = await sleeping_child(leader)
    os.kill(leader if victim == "leader" else child, signal.SIGKILL)
    state = await lost_once(h)
    assert "killed by signal 9" in state.plan_events[2].reason
    assert group_members(leader) == []  # the surviving sleep went with its window
    snap = await until_status(h, W)
    await command(h, snap, "skip")
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    assert [e.type for e in state.plan_events].count("WindowLost") == 1


def test_window_loss_rule() -> None:
    """Killed (by a signal, or a shell reporting 128+N) is lost; any other exit is not."""
    assert window_signal(-9) == 9 and window_signal(-15) == 15
    assert window_signal(137) == 9 and window_signal(143) == 15
    for code in (0, 1, 2, 124, 127, 128, 255):
        assert window_signal(code) is None


def cmd(command: str, purpose: str = "window") -> CommandInput:
    return CommandInput(session_id="s", execution_id="e", command=command,
                        purpose=purpose, timeout_s=300)  # type: ignore[arg-type]


async def test_window_ends_with_its_leader_and_takes_its_group_along(tmp_path) -> None:
    """A window that exits on its own is not lost, even if a child still holds its
    output: it ends with its leader, and the lingering child is stopped."""
    pid_file = tmp_path / "pid"
    out = await ActivityEnvironment().run(
        run_command, cmd(f"echo $$ > {pid_file}; sleep 600 & echo bye; exit 3"))
    assert (out.exit_code, out.killed_by_signal, out.stdout) == (3, None, "bye\n")
    assert group_members(int(pid_file.read_text())) == []


async def test_cancelled_command_stops_its_whole_group(tmp_path) -> None:
    pid_file = tmp_path / "pid"
    env = ActivityEnvironment()
    run = asyncio.ensure_future(env.run(run_command, cmd(
        f"echo $$ > {pid_file}; sleep 600; exit $?", purpose="run")))
    await until_file(pid_file)
    leader = int(pid_file.read_text())
    await sleeping_child(leader)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert group_members(leader) == []


async def test_failed_verify_records_only_the_verify_output(ts_worker, task_queue) -> None:
    """Seed 002 §4: verify:cmd failed -> StepCompleted(1, stderr=feedback); the run's
    stdout/stderr are discarded."""
    cfg = plan({"run": "echo run-stdout; echo run-stderr >&2",
                "verify": {"cmd": "echo verify-says-no; exit 4"}, "on_fail": "human"})
    h = await start_session(ts_worker.client, cfg, task_queue, search_attributes=False)
    await until_status(h, W)
    state = await h.query("state", result_type=SessionState)
    done = state.plan_events[-2]
    assert (done.type, done.exit_code) == ("StepCompleted", 1)
    assert done.stdout is None and done.stderr == "verify-says-no"
