"""A plan session survives its worker: killed mid-step, it resumes at the same
cursor and never re-runs a completed step (real dev server, real processes)."""

from __future__ import annotations

import uuid

from tests.support.sessions import (
    forget_worker,
    running_worker,
    start_session,
    until_file,
    worker_process,
)
from workflows.config import SessionConfig
from workflows.messages import SessionResult
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus


async def test_worker_killed_mid_step_resumes_at_the_same_cursor(dev_env, tmp_path):
    client = dev_env.client
    started, log0, log1 = tmp_path / "started", tmp_path / "log0", tmp_path / "log1"
    cfg = SessionConfig.model_validate({"plan": {"steps": [
        {"name": "first", "run": f"echo ran >> {log0}"},
        {"name": "slow", "run": f"touch {started}; sleep 1; echo ran >> {log1}",
         "on_fail": "retry", "max_retries": 2},
        {"name": "last", "run": "echo done"},
    ]}})
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    with worker_process(client, task_queue):
        h = await start_session(client, cfg, task_queue)
        await until_file(started)  # step 1 is running now: kill the worker
    await forget_worker(client, h)
    async with running_worker(client, task_queue):
        result: SessionResult = await h.result()
        state = await h.query("state", result_type=SessionState)
    assert result.status is SessionStatus.SUCCEEDED
    assert log0.read_text() == "ran\n"  # the completed step did not run again
    events = [(e.type, getattr(e, "step", None)) for e in state.plan_events]
    assert events[:2] == [("TaskStarted", None), ("StepCompleted", 0)]
    assert events[-2:] == [("StepCompleted", 2), ("TaskStopped", None)]
    # Step 1's lost attempt is a failure with an unknown outcome, retried at cursor 1.
    lost = next(e for e in state.plan_events if e.type == "StepCompleted" and e.step == 1)
    assert lost.exit_code == -1 and "outcome unknown" in lost.stderr
    assert ("StepReset", 1) in events
