"""Fork and interrupt under a worker kill at a random point (issue 27): the worker is
its own process (``hitlflow worker``), killed with SIGKILL when the session's history
reaches a length drawn at random (the seed is in every failure message); a worker in
the test's process takes over. Nothing runs twice (the recording MCP server lists every
call it receives), nothing is lost (the fork completes its turn; the interrupt's new
turn happens once)."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from observation.exporter import export_session
from observation.exporter.verify import verify_dir
from observation.fork import rebuild
from tests.observation.test_fork import finish, lines, script, turns_done, wait_point
from tests.support.mcp_servers import received, recording_server
from tests.support.sessions import (
    QUICK,
    forget_worker,
    running_worker,
    start_session,
    worker_process,
)
from workflows.config import SessionConfig
from workflows.fork import fork_input
from workflows.messages import ForkedFrom, MessageInput, SessionResult
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

pytestmark = pytest.mark.slow


async def history_length(h: WorkflowHandle) -> int:
    return len((await h.fetch_history()).events)


async def kill_point(h: WorkflowHandle, target: int, done: asyncio.Future | None = None,
                     limit_s: float = 60) -> int:
    """Wait (bounded) until ``h``'s history has ``target`` events, or the session is
    at rest (``done``): the random point to kill the worker at. Its history length."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        n = await history_length(h)
        if n >= target or (done is not None and done.done()):
            return n
        assert loop.time() < deadline, f"history stuck at {n} events, not {target}"
        await asyncio.sleep(0.02)


async def calls_in_flight(h: WorkflowHandle) -> int:
    """``call_tool`` activities scheduled and not completed in ``h``'s history."""
    scheduled, closed = set(), set()
    for e in (await h.fetch_history()).events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and \
                e.activity_task_scheduled_event_attributes.activity_type.name == "call_tool":
            scheduled.add(e.event_id)
        for attrs in ("activity_task_completed_event_attributes",
                      "activity_task_failed_event_attributes",
                      "activity_task_canceled_event_attributes",
                      "activity_task_timed_out_event_attributes"):
            if e.HasField(attrs):
                closed.add(getattr(e, attrs).scheduled_event_id)
    return len(scheduled - closed)


async def test_a_fork_under_a_worker_kill_runs_nothing_twice_and_completes(dev_env, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    client: Client = dev_env.client
    runs, folder = tmp_path / "runs", tmp_path / "tools"
    folder.mkdir()
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        parent = await start_session(client, script(folder), tq, timing=QUICK)
        await turns_done(parent, 1)
    (a,) = received(folder)  # the parent's `put a`, before the fork point
    await export_session(client, parent.id, runs)
    at = wait_point(lines(runs, parent.id), 1)
    rebuilt = await rebuild(client, runs, parent.id, at, SessionWorkflow)
    fork_id = f"s-{uuid.uuid4().hex[:12]}"
    start = fork_input(rebuilt.state, fork_id, ForkedFrom(
        session_id=parent.id, seq=at, line_hash=rebuilt.line_hash), owner="someone",
        message="second").model_copy(update={"timing": QUICK})
    target = rng.randint(3, 40)
    with worker_process(client, tq):
        fork = await client.start_workflow("SessionWorkflow", start, id=fork_id,
                                           task_queue=tq, result_type=SessionResult)
        rested = asyncio.ensure_future(turns_done(fork, 2))
        try:
            at_kill = await kill_point(fork, target, rested)
        finally:
            rested.cancel()
    # killed (SIGKILL); what the server had then, and whether a call was under way
    had, in_flight = received(folder), await calls_in_flight(fork)
    why = f"seed {seed}: killed at {at_kill} events (target {target}), {had} received"
    await forget_worker(client, fork)
    async with running_worker(client, tq):
        await turns_done(fork, 2)
        await finish(client, fork)
        await finish(client, parent)
    calls = received(folder)
    assert calls[0] == a and [c for c in calls if c["key"] == a["key"]] == [a], why
    bs = calls[1:]
    assert bs and {c["name"] for c in bs} == {"b"} and len({c["key"] for c in bs}) == 1, \
        (why, calls)
    # once; a second time only as the resend of the reversible call under way at the
    # kill, with its idempotency key
    allowed = 2 if in_flight and len(had) == 2 else 1
    assert len(bs) <= allowed, (why, in_flight, calls)
    await export_session(client, fork.id, runs)
    verify_dir(runs / fork.id)
    flog = lines(runs, fork.id)
    assert flog[0]["type"] == "SESSION_FORKED", why
    assert [x["payload"]["text"] for x in flog if x["type"] == "message"] == ["second"], why
    said = [x["payload"]["text"] for x in flog if x["type"] == "text"]
    assert [t for t in said if t] == ["put b"], (why, said)  # the fork's turn, once


async def test_an_interrupt_under_a_worker_kill_cuts_once_and_its_turn_happens_once(
        dev_env, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    before = rng.random() < 0.5  # the kill before the interrupt is sent, or after
    client: Client = dev_env.client
    runs, folder = tmp_path / "runs", tmp_path / "tools"
    folder.mkdir()
    (folder / "hold-call").touch()
    config = SessionConfig.model_validate({"mode": "auto", "initial_message": "put", "agent": {
        "llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "put", "arguments": {"name": "b"}}]},
            {"text": "as you wish", "end": True}]},
        "tools": [recording_server(folder).model_dump()]}})
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    interrupt = MessageInput(text="never mind", if_busy="interrupt")
    update: asyncio.Future | None = None
    try:
        with worker_process(client, tq):
            h = await start_session(client, config, tq, search_attributes=False, timing=QUICK)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not received(folder):  # the server holds the reversible call
                assert loop.time() < deadline, f"seed {seed}: the call never came"
                await asyncio.sleep(0.02)
            target = 0
            if not before:
                await h.execute_update("send_message", interrupt)
                target = await history_length(h) + rng.randint(0, 25)
                ended = asyncio.ensure_future(h.result())
                try:
                    at_kill = await kill_point(h, target, ended)
                finally:
                    ended.cancel()
        why = f"seed {seed}: killed {'before' if before else 'after'} the interrupt" + (
            "" if before else f", at {at_kill} events (target {target})")
        await forget_worker(client, h)
        if before:
            update = asyncio.ensure_future(h.execute_update("send_message", interrupt))
        async with running_worker(client, tq):
            if update is not None:
                await update
            result = await h.result()
    finally:
        (folder / "release").touch()
    assert result.status is SessionStatus.SUCCEEDED, why
    assert [c["name"] for c in received(folder)] == ["b"], why  # cut, never sent again
    await export_session(client, h.id, runs)
    verify_dir(runs / h.id)
    log = [json.loads(x) for x in (runs / h.id / "events.ndjson").read_text().splitlines()]
    kinds = [x["type"] for x in log]
    assert kinds.count("TURN_INTERRUPTED") == 1, (why, kinds)
    said = [x["payload"]["text"] for x in log if x["type"] == "message"]
    assert said[-1:] == ["never mind"] and said.count("never mind") == 1, (why, said)
    texts = [x["payload"]["text"] for x in log if x["type"] == "text"]
    assert [t for t in texts if t] == ["as you wish"], (why, texts)  # the new turn, once
