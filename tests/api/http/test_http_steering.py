"""A message's ``if_busy`` over HTTP (issue 27): the body's field, its refusals (409
``session_busy``, ``not_interruptible``; 422 for a value it does not know), and that
a refused message changes nothing. The agent's side: tests/workflows/test_steering.py."""

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
        {"name": "wait", "run": run, "verify": {"cmd": "true"}}]}}
    r = await http_stack.http.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"], release


async def test_a_busy_plan_refuses_reject_and_interrupt_and_takes_enqueue(
        http_stack: HttpStack, tmp_path: Path):
    http = http_stack.http
    sid, release = await slow_plan(http_stack, tmp_path)
    try:
        await until_file(tmp_path / "started")  # the plan runs its step: the session works
        events = await history_length(http_stack, sid)
        r = await http.post(f"/api/sessions/{sid}/messages",
                            json={"text": "hold on", "if_busy": "reject"})
        assert r.status_code == 409 and error_of(r)["code"] == "session_busy"
        r = await http.post(f"/api/sessions/{sid}/messages",
                            json={"text": "hold on", "if_busy": "interrupt"})
        assert r.status_code == 409 and error_of(r)["code"] == "not_interruptible"
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
    finally:
        release.touch()
    await session_until(http, sid, lambda s: s["status"] == "succeeded")


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
        r = await hitlflow(http_stack, "session", "say", sid, "wait", "--if-busy", "interrupt")
        assert r.exit_code == 1 and "error: not_interruptible:" in r.output
        r = await hitlflow(http_stack, "session", "say", sid, "wait", "--if-busy", "soon")
        assert r.exit_code == 2 and "--if-busy" in r.output
        assert ok(await hitlflow(http_stack, "session", "say", sid, "later")).strip() == \
            "message accepted: the agent takes it at its next step"  # at once: queued
        state = await http_stack.client.get_workflow_handle(sid).query("state")
        assert state["inbox"] == ["later"]  # only the one accepted
    finally:
        release.touch()
    await session_until(http_stack.http, sid, lambda s: s["status"] == "succeeded")
