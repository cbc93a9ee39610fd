"""A message's ``if_busy`` over HTTP (issue 27): the body's field, its refusals (409
``session_busy``; 422 for a value it does not know), that a refused message changes
nothing, and that ``interrupt`` stops a busy plan at its step (the step, irreversible,
finishes first). The agent's side: tests/workflows/test_steering.py; the plan's:
tests/workflows/test_plan_interrupt.py."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.api.cli.test_http_cli import hitlflow, ok
from tests.api.http_support import HttpStack, error_of, session_until
from tests.support.sessions import until_file


async def history_length(stack: HttpStack, sid: str) -> int:
    desc = await stack.client.get_workflow_handle(sid).describe()
    return desc.raw_description.workflow_execution_info.history_length


async def slow_plan(http_stack: HttpStack, tmp_path: Path) -> tuple[str, Path]:
    """A plan session whose one step runs until ``release`` exists (it has started
    once ``started`` does): the session works meanwhile."""
    started, release = tmp_path / "started", tmp_path / "release"
    run = (f"touch {shlex.quote(str(started))}; "
           f"while [ ! -f {shlex.quote(str(release))} ]; do sleep 0.05; done")
    body = {"plan": {"name": "slow", "steps": [
        {"name": "wait", "run": run, "verify": {"cmd": "true"}},
        {"name": "then", "run": "true"}]}}
    r = await http_stack.http.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"], release


async def stopped(http_stack: HttpStack, sid: str) -> dict:
    """The plan stopped by an interrupt: it waits for the person at step 1."""
    snap = await session_until(http_stack.http, sid, lambda s: s["status"] == "waiting_user"
                               and s.get("pending") is not None)
    assert snap["pending"]["prompt"].startswith("on_fail_human: interrupted by "), snap
    assert "before step 1" in snap["pending"]["prompt"]
    return snap


async def test_a_busy_plan_refuses_reject_and_takes_interrupt_and_enqueue(
        http_stack: HttpStack, tmp_path: Path):
    http = http_stack.http
    sid, release = await slow_plan(http_stack, tmp_path)
    try:
        await until_file(tmp_path / "started")  # the plan runs its step: the session works
        events = await history_length(http_stack, sid)
        r = await http.post(f"/api/sessions/{sid}/messages",
                            json={"text": "hold on", "if_busy": "reject"})
        assert r.status_code == 409 and error_of(r)["code"] == "session_busy"
        for bad in ("now", "", None, 1, ["interrupt"]):
            r = await http.post(f"/api/sessions/{sid}/messages",
                                json={"text": "hold on", "if_busy": bad})
            assert r.status_code == 422, (bad, r.text)
        assert await history_length(http_stack, sid) == events  # nothing changed
        state = await http_stack.client.get_workflow_handle(sid).query("state")
        assert state["inbox"] == []
        r = await http.post(f"/api/sessions/{sid}/messages",
                            json={"text": "for later", "if_busy": "enqueue"})
        assert r.status_code == 202, r.text
        state = await http_stack.client.get_workflow_handle(sid).query("state")
        assert state["inbox"] == ["for later"]  # enqueue: as today
        r = await http.post(f"/api/sessions/{sid}/messages",
                            json={"text": "hold on", "if_busy": "interrupt"})
        assert r.status_code == 202 and r.json()["status"] == "running", r.text
    finally:
        release.touch()
    await stopped(http_stack, sid)  # the step finished (never cut), then the plan stopped
    state = await http_stack.client.get_workflow_handle(sid).query("state")
    assert state["inbox"] == []  # both messages are in the log now


async def test_the_openapi_schema_documents_if_busy(http_stack: HttpStack):
    schema = (await http_stack.http.get("/openapi.json")).json()
    field = schema["components"]["schemas"]["MessageRequest"]["properties"]["if_busy"]
    assert field["enum"] == ["enqueue", "interrupt", "reject"]
    assert field["default"] == "enqueue"
    refusals = schema["paths"]["/api/sessions/{session_id}/messages"]["post"]["responses"]
    assert "session_busy" in refusals["409"]["description"]


async def test_session_say_takes_if_busy(http_stack: HttpStack, tmp_path: Path):
    sid, release = await slow_plan(http_stack, tmp_path)
    try:
        await until_file(tmp_path / "started")
        r = await hitlflow(http_stack, "session", "say", sid, "wait", "--if-busy", "reject")
        assert r.exit_code == 1 and "error: session_busy:" in r.output
        r = await hitlflow(http_stack, "session", "say", sid, "wait", "--if-busy", "soon")
        assert r.exit_code == 2 and "--if-busy" in r.output
        assert ok(await hitlflow(http_stack, "session", "say", sid, "later")).strip() == \
            "message accepted: the agent takes it at its next step"  # at once: queued
        state = await http_stack.client.get_workflow_handle(sid).query("state")
        assert state["inbox"] == ["later"]  # only the one accepted
        assert ok(await hitlflow(http_stack, "session", "say", sid, "wait", "--if-busy",
                                 "interrupt")).strip() == \
            "message accepted: interrupting the turn or plan step in progress"
    finally:
        release.touch()
    await stopped(http_stack, sid)
