"""A plan session forked over HTTP at a step boundary (issue 27): ``POST
/api/sessions/{id}/fork`` at the line that ended step 0 starts a fork that runs step 1
(and asks its verify), step 0 not again; a ``message`` is a 422, a line inside step
1's run a 409 naming the boundary; nothing is started by either. The rules and the
other boundaries: tests/observation/test_fork_plan.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.api.http_support import HttpStack, error_of, eventually, session_until


def log_of(stack: HttpStack, sid: str) -> list[dict]:
    path = stack.settings.data_dir / "runs" / sid / "events.ndjson"
    return [json.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


async def test_a_plan_forks_over_http_at_a_step_boundary(http_stack: HttpStack,
                                                         tmp_path: Path):
    http, ran = http_stack.http, tmp_path / "ran"
    steps = [{"name": n, "run": f"echo {n} >> {shlex.quote(str(ran))}"} for n in ("s0", "s1")]
    steps[1]["verify"] = "human"
    r = await http.post("/api/sessions", json={"plan": {"name": "p", "steps": steps}})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    await session_until(http, sid, lambda s: s["status"] == "waiting_user")

    async def read() -> list[dict]:
        return log_of(http_stack, sid)

    log = await eventually(read, lambda v: any(x["type"] == "StepWaiting" for x in v),
                           what="the verify wait in the log")
    at = next(x["seq"] for x in log if x["type"] == "StepCompleted"
              and x["payload"]["step"] == 0)
    url = f"/api/sessions/{sid}/fork"
    before = sorted(p.name for p in (http_stack.settings.data_dir / "runs").iterdir())
    r = await http.post(url, json={"at_seq": at, "message": "hi"})
    assert r.status_code == 422 and error_of(r)["code"] == "validation_error", r.text
    r = await http.post(url, json={"at_seq": at + 1})  # inside step 1's run
    assert r.status_code == 409 and error_of(r)["code"] == "not_a_fork_point", r.text
    assert str(at) in error_of(r)["message"].split("nearest fork points:")[1]
    assert sorted(p.name for p in (http_stack.settings.data_dir / "runs").iterdir()) == before
    assert ran.read_text().split() == ["s0", "s1"]

    r = await http.post(url, json={"at_seq": at})
    assert r.status_code == 201, r.text
    fork = r.json()["session_id"]
    assert (r.json()["forked_from"], r.json()["at_seq"]) == (sid, at)
    snap = await session_until(http, fork, lambda s: s["status"] == "waiting_user"
                               and s.get("pending") is not None)
    assert snap["pending"]["prompt"].startswith("verify_human: verify step 1")
    assert ran.read_text().split() == ["s0", "s1", "s1"]  # step 1 again, step 0 not
