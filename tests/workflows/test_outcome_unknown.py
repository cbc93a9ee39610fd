"""A once-only call that did not report back: retried when it provably never left
(no "sent" mark in its last heartbeat), asked of the person when it may have run.

Real worker processes, the real dev server and a real MCP server that records every
call it receives (tests/fakes/recording_mcp_server.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from activities.mcp.pool import McpClientPool
from observation.exporter.follower import export_session
from tests.support.mcp_servers import gone, received, recording_server
from tests.support.sessions import (
    QUICK,
    forget_worker,
    running_worker,
    start_session,
    until,
    until_file,
    until_status,
    worker_process,
)
from tests.workflows.test_session_devserver import recorded
from workflows.config import SessionConfig
from workflows.messages import Behaviour, ReplyInput, SessionResult
from workflows.outcome import (
    NOT_SENT,
    OUTCOME_OPTIONS,
    ToolCallBeat,
    attempt_id_for,
    failed_call_outcome,
    outcome_answer,
)
from workflows.people import Principal
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def delete_then_end(folder: Path) -> SessionConfig:
    return SessionConfig.model_validate({"initial_message": "delete it", "agent": {
        "llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "delete", "arguments": {"name": "x"}}]},
            {"text": "finished", "end": True}]},
        "tools": [recording_server(folder).model_dump()]}})


async def approve(h: WorkflowHandle) -> None:
    snap = await until(h, lambda s: s.status == W and s.pending.kind == "approval")
    await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                               approve=True))


async def until_asked(h: WorkflowHandle):
    return await until(h, lambda s: s.status == W and s.pending.kind == "choose")


async def until_received(folder: Path, count: int) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while len(received(folder)) < count:
        assert asyncio.get_running_loop().time() < deadline, "the call never arrived"
        await asyncio.sleep(0.05)


async def until_gone(pid_file: Path) -> None:
    await until_file(pid_file)
    pid = int(pid_file.read_text())
    deadline = asyncio.get_running_loop().time() + 60
    while not gone(pid):
        assert asyncio.get_running_loop().time() < deadline, "the server never closed"
        await asyncio.sleep(0.05)


# -- the decision (pure) -------------------------------------------------------------


def beat(sent: bool, attempt: str = "e/2.1") -> list[dict]:
    return [ToolCallBeat(execution_id="e", attempt_id=attempt,
                         sent=attempt if sent else None).model_dump()]


@pytest.mark.parametrize(("error_type", "details", "attempt", "expected"), [
    (None, beat(sent=False), "e/2.1", "not_sent"),  # lost before the request left
    (None, [], "e/2.1", "not_sent"),  # lost before its first heartbeat
    (None, beat(sent=True), "e/2.1", "maybe_sent"),  # lost after the "sending" mark
    (None, [{**beat(sent=True)[0], "written": True}], "e/2.1", "maybe_sent"),  # it left
    (None, beat(sent=True, attempt="e/2.2"), "e/2.1", "maybe_sent"),  # not this attempt's
    (None, [{**beat(sent=False)[0], "sent": "maybe"}], "e/2.1", "maybe_sent"),  # the SDK's
    (None, ["e"], "e/2.1", "maybe_sent"),  # an older worker's details: conservative
    (None, [], None, "maybe_sent"),  # a call made without marks
    ("ToolCallNotSent", None, "e/2.1", "not_sent"),
    ("McpPoolFullError", None, None, "not_sent"),
    ("McpTransportError", None, "e/2.1", "maybe_sent"),  # connection lost mid-call
])
def test_a_failed_attempt_is_not_sent_only_without_its_sent_mark(
        error_type, details, attempt, expected):
    assert failed_call_outcome(error_type=error_type, heartbeat_details=details,
                               attempt_id=attempt) == expected


def test_only_the_three_answers_of_a_person_settle_the_outcome():
    assert [outcome_answer({"choice": c}) for c in OUTCOME_OPTIONS] == [
        "done", "not_done", "try_again"]
    assert outcome_answer({"choice": "done", "auto": True}) == "unknown"
    assert outcome_answer({"declined": True, "auto": True}) == "unknown"
    assert attempt_id_for("s.e", 3, 1) != attempt_id_for("s.e", 5, 1)


# -- on the dev server -------------------------------------------------------------


async def test_killed_worker_retries_a_never_sent_call_and_asks_about_a_maybe_sent_one(
        dev_env, tmp_path):
    """Two approved irreversible calls when the worker is killed: one while its server
    was starting (never sent: retried, the server gets it once), one while the server
    held the call (maybe sent: the person is asked; 'try again' runs it again)."""
    client = dev_env.client
    unsent, maybe = tmp_path / "unsent", tmp_path / "maybe"
    unsent.mkdir()
    maybe.mkdir()
    (maybe / "hang-call").touch()
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    # Idle servers close at once: the approved call starts its server anew.
    with worker_process(client, task_queue, env={"HITLFLOW_MCP_IDLE_S": "0"}):
        a = await start_session(client, delete_then_end(unsent), task_queue, timing=QUICK)
        b = await start_session(client, delete_then_end(maybe), task_queue, timing=QUICK)
        await until(a, lambda s: s.status == W)  # its tools are listed
        (unsent / "hang-start").touch()  # the next start of its server hangs
        await until_gone(unsent / "server.pid")  # the server that listed them closed
        await approve(a)
        await approve(b)
        await until_file(unsent / "start-hung")  # starting the server: nothing sent
        await until_received(maybe, 1)  # the server holds the call: it may have run
    await forget_worker(client, a, b)
    async with running_worker(client, task_queue):
        result: SessionResult = await a.result()  # after the heartbeat timeout
        state = await a.query("state", result_type=SessionState)
        assert result.status is SessionStatus.SUCCEEDED
        (c,) = state.contracts
        assert c.status.value == "completed" and c.reason_code is None
        assert received(unsent) == [{"name": "x", "key": c.idempotency_key}]

        snap = await until_asked(b)
        assert snap.pending.options == OUTCOME_OPTIONS
        assert snap.pending.reason_code == "outcome_unknown"
        assert snap.pending.prompt.startswith("It may have happened: Call tool delete")
        (c,) = snap.contracts
        assert c.current_status.value == "waiting"
        await recorded(b, '"reason_code": "outcome_unknown"')
        await b.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   choice="try again"))
        assert (await b.result()).status is SessionStatus.SUCCEEDED
        state = await b.query("state", result_type=SessionState)
    (c,) = state.contracts
    assert c.status.value == "completed" and c.reason_code == "retried_by_person"
    calls = received(maybe)
    assert calls == [{"name": "x", "key": c.idempotency_key}] * 2  # the person said so


@pytest.mark.parametrize(("answer", "status", "code", "told"), [
    ("done", "completed", "confirmed_by_person", "[SUCCESS]"),
    ("not done", "failed", "denied_by_person", "[FAILED]"),
])
async def test_the_person_says_whether_a_maybe_sent_call_happened(
        dev_worker, task_queue, tmp_path, answer, status, code, told):
    """The server dies holding the call (the request arrived: it may have run)."""
    (tmp_path / "crash-call").touch()
    h = await start_session(dev_worker.client, delete_then_end(tmp_path), task_queue)
    await approve(h)
    snap = await until_asked(h)
    rid = snap.pending.request_id
    for bad in (ReplyInput(request_id=rid, choice="maybe"),
                ReplyInput(request_id=rid, approve=True),
                ReplyInput(request_id=rid + "x", choice="done")):
        with pytest.raises(WorkflowUpdateFailedError):
            await h.execute_update("reply", bad)
    assert (await until_status(h, W)).pending == snap.pending  # unchanged
    ann = Principal(issuer="local", subject="ann", name="ann", role="operator")
    await h.execute_update("reply", ReplyInput(request_id=rid, choice=answer, by="bob",
                                               principal=ann))
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    (c,) = state.contracts
    assert (c.status.value, c.reason_code) == (status, code)
    assert [t.actor for t in c.transitions][-1] == "user"
    assert len(received(tmp_path)) == 1  # asked, never run again by itself
    tool = [m.content for m in state.conversation if m.role == "tool"]
    assert tool and tool[0].startswith(told) and "ann" in tool[0]
    # The log says it as a code: the question, and how the work item ended.
    await export_session(dev_worker.client, h.id, tmp_path / "runs")
    events = [json.loads(x) for x in
              (tmp_path / "runs" / h.id / "events.ndjson").read_text().splitlines()]
    asked = [e["payload"]["detail"] for e in events if e["type"] == "RUN_STATE_CHANGED"
             and e["payload"]["trigger"] == "interaction.requested"]
    assert [a.get("reason_code") for a in asked] == [None, "outcome_unknown"]
    opened = [e["payload"] for e in events if e["type"] == "ISSUE_OPENED"]
    assert [o.get("reason_code") for o in opened] == [None, "outcome_unknown"]
    (finished,) = [e["payload"] for e in events if e["type"] == "WORK_ITEM_FINISHED"]
    assert (finished["outcome"], finished["reason_code"]) == (status, code)


async def test_a_call_that_never_reaches_its_server_fails_as_not_sent(
        dev_env, task_queue, tmp_path):
    """Its server cannot start any more: the call is tried a bounded number of times,
    never sent, and fails as not sent (its outcome is known: it did not run). So in a
    session started before the send window (Behaviour.SEND_WINDOW: then it is retried
    for a window and the person is asked, tests/workflows/test_send_window.py)."""
    async with running_worker(dev_env.client, task_queue, McpClientPool(idle_s=0)):
        h = await start_session(dev_env.client, delete_then_end(tmp_path), task_queue,
                                behaviour=Behaviour.SENT_MARKS)
        await until(h, lambda s: s.status == W)  # its tools are listed
        (tmp_path / "fail-start").touch()
        await until_gone(tmp_path / "server.pid")  # the server that listed them closed
        await approve(h)
        assert (await h.result()).status is SessionStatus.SUCCEEDED
        state = await h.query("state", result_type=SessionState)
    (c,) = state.contracts
    assert (c.status.value, c.reason_code) == ("failed", NOT_SENT)
    assert c.error_message.startswith("not sent: the call never reached the tool server in 3")
    assert received(tmp_path) == []


async def test_a_call_longer_than_the_heartbeat_timeout_completes(
        dev_worker, task_queue, tmp_path):
    """The precise heartbeats go through the client; the SDK's own heartbeat must go
    on too, or the worker's local heartbeat timeout (15 s) cancels a long call."""
    (tmp_path / "slow-call").write_text(str(QUICK.heartbeat_s + 3))
    h = await start_session(dev_worker.client, delete_then_end(tmp_path), task_queue,
                            timing=QUICK)
    await approve(h)
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    (c,) = state.contracts
    assert (c.status.value, c.reason_code) == ("completed", None)
    assert len(received(tmp_path)) == 1
