"""End to end on the real dev server: the exporter follows sessions live, across
continue-as-new; the log verifies, replays to snapshot.json, and a re-export from
history (and the SSE feed) gives the same bytes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from api.cli.demo_config import demo_config, notes_server
from api.http.errors import retry_not_ready
from observation.exporter import (
    Exporter,
    LogSnapshot,
    export_session,
    is_sse,
    line_bytes,
    session_events,
    verify_dir,
)
from observation.exporter.verify import read_lines, verify_lines
from tests.support.sessions import running_worker, start_session, until, until_status
from workflows.config import SessionConfig
from workflows.messages import ReplyInput, SessionResult
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


@pytest.fixture
async def live(dev_env: WorkflowEnvironment, tmp_path: Path
               ) -> AsyncIterator[tuple[WorkflowEnvironment, str, Exporter]]:
    """A worker on a fresh task queue and an Exporter following every session."""
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    exporter = Exporter(dev_env.client, tmp_path / "runs", discover_every_s=0.05,
                        retry_after_s=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(exporter.run(stop))
    async with running_worker(dev_env.client, tq):
        yield dev_env, tq, exporter
    stop.set()
    await task


async def exported(exporter: Exporter, session_id: str, limit_s: float = 30) -> Path:
    """Wait (bounded) until the exporter wrote the session's last event."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while session_id not in exporter.done:
        assert exporter.fatal is None, exporter.fatal
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not exported: {exporter.errors.get(session_id)}")
        await asyncio.sleep(0.02)
    return exporter.runs_dir / session_id


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


async def answer(h: WorkflowHandle, kind: str) -> None:
    snap = await until(h, lambda s: s.status == W and s.pending is not None
                       and s.pending.kind == kind)
    await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id, approve=True))


async def check_log(client, d: Path, session_id: str, tmp_path: Path) -> list[dict]:
    verified = verify_dir(d)
    events = list(verify_lines(read_lines(d / "events.ndjson")))
    assert len(events) == verified.events
    assert LogSnapshot.replay(session_id, events).to_bytes() == (d / "snapshot.json").read_bytes()
    again = await export_session(client, session_id, tmp_path / "again")
    assert again.finished and tree(tmp_path / "again" / session_id) == tree(d)
    streamed = [line_bytes(e) async for e in session_events(client, session_id, only=None)]
    assert b"".join(streamed) == (d / "events.ndjson").read_bytes()
    tail = [e.seq async for e in session_events(client, session_id, 10, only=None)]
    assert tail[0] == 11 and len(tail) == len(events) - 10
    sse = [e async for e in session_events(client, session_id, None)]  # the SSE plug point
    assert [e.seq for e in sse] == [e["seq"] for e in events if is_sse(e["type"])]
    assert {e.type for e in sse} >= {"execution_state", "conversation.state.changed", "text"}
    # With the markers where each LLM call was scheduled: after the lines before the
    # call (its STARTED line is written when it ends), before that call's text.
    marked = [e async for e in session_events(client, session_id, None, only=None, calls=True)]
    order = [e["payload"]["call_id"] if isinstance(e, dict) else e.type for e in marked]
    calls = [e["payload"]["call_id"] for e in events if e["type"] == "LLM_CALL_STARTED"]
    assert [x for x in order if x in calls] == calls and calls
    for call in calls:
        at = order.index(call)
        assert order[at + 1] == "LLM_CALL_STARTED"
        assert [e for e in marked if isinstance(e, dict)][calls.index(call)]["seq"] == 0
    assert [e for e in marked if not isinstance(e, dict)] == [
        e async for e in session_events(client, session_id, None, only=None)]
    return events


async def test_the_demo_session_is_exported_live(live, tmp_path):
    env, tq, exporter = live
    h = await start_session(env.client, demo_config(tmp_path / "notes"), tq)
    await answer(h, "approval")
    await answer(h, "confirm")
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    d = await exported(exporter, h.id)
    events = await check_log(env.client, d, h.id, tmp_path)
    types = [e["type"] for e in events]
    assert types[0] == "RUN_CREATED" and types[-1] == "RUN_COMPLETED"
    assert types.count("LLM_CALL_STARTED") == types.count("LLM_CALL_FINISHED") == 5
    assert types.count("ISSUE_OPENED") == types.count("ISSUE_RESOLVED") == 2


async def test_a_session_that_continues_as_new_is_one_log(live, tmp_path):
    env, tq, exporter = live
    turns = 3
    cfg = SessionConfig.model_validate({
        "initial_message": "go",
        "agent": {"llm": {"provider": "scripted", "responses": [
            {"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}} for i in range(turns)
        ] + [{"text": "all done", "end": True}]}, "tools": [notes_server(tmp_path / "n")]},
    })
    first = await start_session(env.client, cfg, tq, continue_as_new_after_events=10)
    h = env.client.get_workflow_handle(first.id, result_type=SessionResult)
    for i in range(turns):
        snap = await until(h, lambda s, i=i: s.status == W and s.replies == i)
        reply = ReplyInput(request_id=snap.pending.request_id, approve=True)
        # (sent again if it raced the session continuing as new at the wait, as the API does)
        await retry_not_ready(lambda r=reply: h.execute_update("reply", r))
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    d = await exported(exporter, h.id)
    events = await check_log(env.client, d, h.id, tmp_path)
    types = [e["type"] for e in events]
    assert types.count("RUN_CONTINUED_AS_NEW") >= 2 and types.count("RUN_CREATED") == 1
    runs = {e["event_id"].split(":")[0] for e in events}
    assert len(runs) == types.count("RUN_CONTINUED_AS_NEW") + 1
    assert types.count("ISSUE_RESOLVED") == turns and types[-1] == "RUN_COMPLETED"


async def test_export_of_an_open_session_then_resume(live, tmp_path):
    """An export of a session still waiting stops at the current end of history and
    resumes later; the result equals what the live exporter wrote."""
    env, tq, exporter = live
    h = await start_session(env.client, demo_config(tmp_path / "notes"), tq)
    await until_status(h, W)
    part = await export_session(env.client, h.id, tmp_path / "mine")
    assert not part.finished and part.last_seq > 0
    verify_dir(tmp_path / "mine" / h.id)
    await answer(h, "approval")
    await answer(h, "confirm")
    await h.result()
    rest = await export_session(env.client, h.id, tmp_path / "mine")
    assert rest.finished and rest.written > 0
    d = await exported(exporter, h.id)
    assert tree(tmp_path / "mine" / h.id) == tree(d)


async def test_run_exporter_is_the_service_for_hitlflow_up(dev_env, tmp_path):
    """``run_exporter(client, data_dir, stop)``: what ``hitlflow up`` starts next to
    the worker (the entry point builds the client and passes it in)."""
    from observation.exporter import run_exporter

    data_dir = tmp_path / "data"
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    cfg = SessionConfig.model_validate({"initial_message": "hi", "mode": "auto", "agent": {
        "llm": {"provider": "scripted", "responses": [{"text": "hello", "end": True}]}}})
    stop = asyncio.Event()
    task = asyncio.create_task(run_exporter(dev_env.client, data_dir, stop))
    async with running_worker(dev_env.client, tq):
        h = await start_session(dev_env.client, cfg, tq)
        await h.result()
    d = data_dir / "runs" / h.id
    deadline = asyncio.get_running_loop().time() + 30
    while not (d / "snapshot.json").is_file() or b'"finished_at": null' in (
            d / "snapshot.json").read_bytes():
        assert not task.done(), task
        assert asyncio.get_running_loop().time() < deadline, "not exported"
        await asyncio.sleep(0.02)
    stop.set()
    await task
    assert verify_dir(d).events > 0
