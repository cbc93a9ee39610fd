"""Plan sessions over HTTP: the person's step commands of seed 002, and the audit log."""

from __future__ import annotations

from pathlib import Path

from observation.exporter import export_session, verify_dir
from tests.api.http_support import HttpStack, error_of, session_until, waiting


async def test_plan_session_pauses_at_its_gate_and_takes_step_commands(
    http_stack: HttpStack, tmp_path: Path
):
    http = http_stack.http
    body = {"plan": {"name": "release", "steps": [
        {"name": "build", "run": "echo built", "verify": {"cmd": "true"}},
        {"name": "go / no-go", "gate": True},
        {"name": "publish", "run": "echo published", "verify": "human"}]}}
    r = await http.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    s = await session_until(http, sid, waiting("step"))
    assert s["pending"]["prompt"].startswith("gate: go / no-go")
    # Broken input: not the waiting step, a step that does not exist, reset forward.
    r = await http.post(f"/api/sessions/{sid}/steps/2/approve", json={})
    assert r.status_code == 409 and "cursor is at step 1" in error_of(r)["message"]
    r = await http.post(f"/api/sessions/{sid}/steps/7/approve", json={})
    assert r.status_code == 409 and error_of(r)["code"] == "no_such_step"
    r = await http.post(f"/api/sessions/{sid}/steps/2/reset", json={})
    assert r.status_code == 409 and "forward past the cursor" in error_of(r)["message"]
    r = await http.post(f"/api/sessions/{sid}/steps/1/approve", json={"by": "ann"})
    assert r.status_code == 202, r.text
    s = await session_until(http, sid, lambda s: waiting("step")(s)
                            and s["pending"]["prompt"].startswith("verify_human"))
    r = await http.post(f"/api/sessions/{sid}/steps/2/approve", json={"by": "ann"})
    assert r.status_code == 202, r.text
    s = await session_until(http, sid, lambda s: s["status"] == "succeeded")
    # The log of a plan session has seed 002's events and verifies.
    out = tmp_path / "runs"
    await export_session(http_stack.client, sid, out)
    lines = (out / sid / "events.ndjson").read_text()
    for kind in ("TaskStarted", "StepWaiting", "StepApproved", "StepCompleted", "TaskStopped"):
        assert f'"type":"{kind}"' in lines, kind
    verify_dir(out / sid)
