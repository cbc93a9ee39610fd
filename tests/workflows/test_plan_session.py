"""Plan sessions (seed 002) end to end on the time-skipping server: real shell
commands, the pure resolve() paths, the person's commands, in-window steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from tests.support.sessions import start_session, until, until_status
from workflows.config import SessionConfig
from workflows.messages import ReplyInput, SessionResult
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def plan(*steps: dict, **kw) -> SessionConfig:
    return SessionConfig.model_validate({"plan": {"name": "t", "steps": list(steps)}, **kw})


def kinds(state: SessionState) -> list[str]:
    out = []
    for e in state.plan_events:
        extra = {"StepCompleted": lambda e: f"({e.exit_code})", "StepWaiting": lambda e:
                 f"({e.reason})", "StepReset": lambda e: f"({e.reason}->{e.to_step})",
                 "TaskStopped": lambda e: f"({e.reason})"}.get(e.type, lambda e: "")(e)
        out.append(e.type + extra)
    return out


async def command(h, snap, choice: str, **values):
    return await h.execute_update("reply", ReplyInput(
        request_id=snap.pending.request_id, choice=choice, values=values or None))


def flaky(tmp: Path, fails: int) -> str:
    """A command that fails ``fails`` times, then succeeds (a counter file)."""
    counter = tmp / "count"
    return (f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; "
            f"[ $n -gt {fails} ] || {{ echo flaky >&2; exit 3; }}")


async def test_release_checklist_retries_and_pauses_at_its_gate(ts_worker, task_queue,
                                                                tmp_path):
    client = ts_worker.client
    cfg = plan({"name": "build", "run": "echo built", "verify": {"cmd": "true"}},
               {"name": "flaky", "run": flaky(tmp_path, 1), "on_fail": "retry",
                "max_retries": 2},
               {"name": "release?", "gate": True},
               {"name": "publish", "run": "echo published"})
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    assert snap.pending.kind == "step" and snap.pending.prompt.startswith("gate: release?")
    await command(h, snap, "approve")
    result: SessionResult = await h.result()
    assert result.status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    assert kinds(state) == [
        "TaskStarted", "StepCompleted(0)", "StepCompleted(3)", "StepReset(retry->1)",
        "StepCompleted(0)", "StepWaiting(gate)", "StepApproved", "StepCompleted(0)",
        "TaskStopped(completed)"]
    assert state.plan_events[2].stderr.strip() == "flaky"
    assert [c.status.value for c in state.contracts] == [
        "completed", "failed", "completed", "completed", "completed"]
    assert state.plan_events[-2].stdout == "published\n"


async def test_retry_exhaustion_and_no_route_each_stop_with_their_own_reason(
    ts_worker, task_queue, tmp_path
):
    """Audit findings V9/V10 fixed: each termination leaves its own event."""
    client = ts_worker.client
    for step, reason in (({"run": "exit 2", "on_fail": "retry", "max_retries": 1},
                          "retries_exhausted"),
                         ({"run": "exit 2"}, "no_failure_route")):
        h = await start_session(client, plan(step), task_queue, search_attributes=False)
        result: SessionResult = await h.result()
        assert result.status is SessionStatus.FAILED and reason in result.failure_reason
        state = await h.query("state", result_type=SessionState)
        assert kinds(state)[-1] == f"TaskStopped({reason})"


async def test_failed_verify_routes_to_the_person_with_its_output(ts_worker, task_queue):
    client = ts_worker.client
    cfg = plan({"run": "echo ok"},
               {"run": "echo run-output", "verify": {"cmd": "echo 'tests red' >&2; exit 1"},
                "on_fail": "human"})
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    assert "tests red" in snap.pending.prompt
    state = await h.query("state", result_type=SessionState)
    done = state.plan_events[-2]
    assert (done.type, done.exit_code, done.stderr) == ("StepCompleted", 1, "tests red")
    for bad in (dict(choice="reset", to_step=5), dict(choice="reset", to_step=-1)):
        with pytest.raises(WorkflowUpdateFailedError):
            await command(h, snap, bad.pop("choice"), **bad)
    with pytest.raises(WorkflowUpdateFailedError):
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   choice="done"))
    await command(h, snap, "skip")
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    assert kinds(state)[-2:] == ["StepSkipped", "TaskStopped(completed)"]


async def test_verify_human_yields_then_reset_goes_back(ts_worker, task_queue):
    client = ts_worker.client
    cfg = plan({"run": "echo a"}, {"run": "echo b", "verify": "human"})
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    with pytest.raises(WorkflowUpdateFailedError):  # forward past the cursor
        await command(h, snap, "reset", to_step=2)
    await command(h, snap, "reset", to_step=0)
    snap = await until(h, lambda s: s.status == W and s.replies == 1)
    await command(h, snap, "approve")
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    assert kinds(state) == [
        "TaskStarted", "StepCompleted(0)", "StepCompleted(0)", "StepWaiting(verify_human)",
        "StepReset(human->0)", "StepCompleted(0)", "StepCompleted(0)",
        "StepWaiting(verify_human)", "StepApproved", "TaskStopped(completed)"]


async def test_killed_window_is_window_lost_exactly_once(ts_worker, task_queue, tmp_path):
    client = ts_worker.client
    pid = tmp_path / "pid"
    cfg = plan({"run": f"echo $$ > {pid}; kill -9 $$", "in_window": True, "on_fail": "human"})
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    state = await h.query("state", result_type=SessionState)
    assert kinds(state) == ["TaskStarted", "WindowLaunched", "WindowLost",
                            "StepWaiting(on_fail_human)"]
    assert "killed by signal 9" in state.plan_events[2].reason
    await command(h, snap, "skip")
    assert (await h.result()).status is SessionStatus.SUCCEEDED


async def test_person_deciding_a_running_window_is_decided_once(ts_worker, task_queue,
                                                                tmp_path):
    """Audit findings V1/V3/V7/V8: one arbiter; the window's exit cannot also count."""
    client = ts_worker.client
    started = tmp_path / "started"
    cfg = plan({"run": f"touch {started}; sleep 600", "in_window": True})
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until(h, lambda s: s.pending is not None and s.pending.kind == "window")
    assert snap.status is SessionStatus.RUNNING
    await command(h, snap, "approve")
    # The same decision cannot come twice (refused, or the session is already done).
    with pytest.raises((WorkflowUpdateFailedError, RPCError)):
        await command(h, snap, "approve")
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    assert kinds(state) == ["TaskStarted", "WindowLaunched", "StepApproved",
                            "TaskStopped(completed)"]
    assert state.contracts[0].status.value == "completed" and len(state.replies) == 1
