"""Approved means done or asked: an approved once-only call whose request never left
keeps being tried, with a backoff, for the session's window, then the person says
"send again" or "drop"; it never ends failed unseen.

The window's arithmetic is pure (workflows/retry_window.py); the rest runs on the real
dev server with a real MCP server that records every call it receives and refuses to
start while told to (tests/fakes/recording_mcp_server.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError

from activities.mcp.pool import McpClientPool
from observation.exporter.follower import export_session
from tests.support.mcp_servers import received, recording_server
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
from tests.workflows.test_outcome_unknown import approve, until_gone
from workflows.config import SessionConfig
from workflows.messages import Behaviour, ReplyInput, SessionResult
from workflows.retry_window import (
    DEFAULT_WINDOW_S,
    DROP,
    SEND_AGAIN,
    UNSENT_OPTIONS,
    delay_before,
    next_try,
    unsent_answer,
    window_s,
)
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# -- the window (pure) -------------------------------------------------------------------


def config(**extra) -> SessionConfig:
    return SessionConfig.model_validate({"initial_message": "hi", "agent": {
        "llm": {"provider": "scripted", "responses": [{"text": "ok"}]}}, **extra})


def test_the_window_is_the_sessions_own_else_its_reply_wait_else_the_default():
    assert window_s(config(send_window_s=30, reply_timeout_s=600)) == 30
    assert window_s(config(reply_timeout_s=600)) == 600
    assert window_s(config()) == DEFAULT_WINDOW_S
    # Left out of the config's JSON while unset: configs recorded before it stay as they were.
    assert "send_window_s" not in config().model_dump(mode="json")
    assert config(send_window_s=30).model_dump(mode="json")["send_window_s"] == 30


@pytest.mark.parametrize("bad", [0, -1, 8 * 24 * 3600, "soon"])
def test_a_broken_window_is_refused(bad):
    with pytest.raises(ValueError, match="send_window_s"):
        config(send_window_s=bad)


def test_the_backoff_doubles_up_to_a_minute_and_stops_at_the_window():
    assert [delay_before(n).total_seconds() for n in (1, 2, 3, 6, 7, 50)] == [
        1, 2, 4, 32, 60, 60]
    with pytest.raises(ValueError):
        delay_before(0)
    s = timedelta(seconds=1)
    assert next_try(first_failed_at=T0, now=T0, attempt=1, window=10) == s
    assert next_try(first_failed_at=T0, now=T0 + 6 * s, attempt=3, window=10) == 4 * s
    assert next_try(first_failed_at=T0, now=T0 + 7 * s, attempt=3, window=10) is None
    assert next_try(first_failed_at=T0, now=T0, attempt=1, window=0.5) is None


def test_only_the_persons_two_answers_send_again_or_drop():
    assert [unsent_answer({"choice": c}) for c in UNSENT_OPTIONS] == ["send_again", "drop"]
    assert unsent_answer({"choice": SEND_AGAIN, "auto": True}) == "unknown"
    assert unsent_answer({"choice": "done"}) == "unknown"
    assert unsent_answer({"declined": True}) == "unknown"
    assert Behaviour.SEND_WINDOW > Behaviour.SENT_MARKS


# -- on the dev server -------------------------------------------------------------------


def delete_then_end(folder: Path, window: float) -> SessionConfig:
    return SessionConfig.model_validate({
        "initial_message": "delete it", "send_window_s": window,
        "agent": {"llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "delete", "arguments": {"name": "x"}}]},
            {"text": "finished", "end": True}]},
            "tools": [recording_server(folder).model_dump()]}})


@pytest.mark.parametrize(("answer", "status", "code", "calls"), [
    (SEND_AGAIN, "completed", "retried_by_person", 1),
    (DROP, "failed", "dropped_by_person", 0),
])
async def test_an_approved_call_that_cannot_be_sent_is_retried_then_asked(
        dev_env, task_queue, tmp_path, answer, status, code, calls):
    """The tool server will not start while the approved delete is tried: the call is
    tried again after 1 s, 2 s … for the window (3 s), then the person is asked."""
    client = dev_env.client
    async with running_worker(client, task_queue, pool=McpClientPool(idle_s=0)):
        h = await start_session(client, delete_then_end(tmp_path, 3), task_queue)
        await until(h, lambda s: s.status == W)  # its tools are listed
        (tmp_path / "fail-start").touch()  # from now on the server cannot start
        await until_gone(tmp_path / "server.pid")  # the one that listed them closed
        await approve(h)
        snap = await until(h, lambda s: s.status == W and s.pending.kind == "choose")
        assert snap.pending.options == UNSENT_OPTIONS
        assert snap.pending.reason_code == "not_sent"
        assert snap.pending.digest and snap.pending.prompt.startswith(
            "It could not be sent: Call tool delete")
        (c,) = snap.contracts
        assert c.current_status.value == "waiting"
        assert received(tmp_path) == []
        rid = snap.pending.request_id
        for bad in (ReplyInput(request_id=rid, choice="done"),
                    ReplyInput(request_id=rid, approve=True)):
            with pytest.raises(WorkflowUpdateFailedError):
                await h.execute_update("reply", bad)
        assert (await until_status(h, W)).pending == snap.pending  # unchanged
        (tmp_path / "fail-start").unlink()
        await h.execute_update("reply", ReplyInput(request_id=rid, choice=answer))
        result: SessionResult = await h.result()
        state = await h.query("state", result_type=SessionState)
    assert result.status is SessionStatus.SUCCEEDED
    (c,) = state.contracts
    assert (c.status.value, c.reason_code) == (status, code)
    assert received(tmp_path) == [{"name": "x", "key": c.idempotency_key}] * calls
    # The log shows the retries: every attempt started, the question and its code.
    await export_session(client, h.id, tmp_path / "runs")
    events = [json.loads(x) for x in
              (tmp_path / "runs" / h.id / "events.ndjson").read_text().splitlines()]
    tried = [e for e in events if e["type"] == "TOOL_CALL_STARTED"]
    assert len(tried) >= 2 + calls
    asked = [e["payload"]["detail"] for e in events if e["type"] == "RUN_STATE_CHANGED"
             and e["payload"]["trigger"] == "interaction.requested"]
    assert [a.get("reason_code") for a in asked] == [None, "not_sent"]


async def test_an_approved_call_survives_workers_killed_while_its_server_starts(
        dev_env, task_queue, tmp_path):
    """The issue's "Done when": tool-server start-up is slowed (it hangs) and the worker
    killed there, twice (the first attempt, then a retry: a third kill would take the
    retry's path again): each attempt never sent is tried again (a timer, same key) on
    the next worker, and the approved delete runs exactly once; the log shows every try."""
    client = dev_env.client
    idle = {"HITLFLOW_MCP_IDLE_S": "0"}  # the approved call starts its server anew
    with worker_process(client, task_queue, env=idle):
        h = await start_session(client, delete_then_end(tmp_path, 600), task_queue,
                                timing=QUICK)
        await until(h, lambda s: s.status == W)  # its tools are listed
        (tmp_path / "hang-start").touch()  # the next start of its server hangs
        await until_gone(tmp_path / "server.pid")  # the server that listed them closed
        await approve(h)
        await until_file(tmp_path / "start-hung")  # starting the server: nothing sent
    await forget_worker(client, h)
    # The worker was killed; the next one meets a hung start again (the retry), killed too.
    (tmp_path / "start-hung").unlink()
    (tmp_path / "hang-start").touch()
    with worker_process(client, task_queue, env=idle):
        await until_file(tmp_path / "start-hung")
    await forget_worker(client, h)
    async with running_worker(client, task_queue):
        result: SessionResult = await h.result()
        state = await h.query("state", result_type=SessionState)
    assert result.status is SessionStatus.SUCCEEDED
    (c,) = state.contracts
    assert (c.status.value, c.reason_code) == ("completed", None)
    assert received(tmp_path) == [{"name": "x", "key": c.idempotency_key}]  # once
    await export_session(client, h.id, tmp_path / "runs")
    events = [json.loads(x) for x in
              (tmp_path / "runs" / h.id / "events.ndjson").read_text().splitlines()]
    assert len([e for e in events if e["type"] == "TOOL_CALL_STARTED"]) == 3


@pytest.mark.parametrize(("behaviour", "tries"), [
    (Behaviour.SEND_WINDOW, 2),  # five attempts, a timer, five more: the window (2 s) is over
    (Behaviour.SENT_MARKS, 1),  # before the window: five attempts, then failed
])
async def test_a_reversible_call_that_cannot_reach_its_tool_is_tried_again_for_the_window(
        dev_env, task_queue, tmp_path, behaviour, tries):
    client = dev_env.client
    config = SessionConfig.model_validate({
        "initial_message": "put it", "send_window_s": 2,
        "agent": {"llm": {"provider": "scripted", "responses": [
            {"ecs_request": {"kind": "confirm", "prompt": "ready?"}},
            {"tool_calls": [{"tool": "put", "arguments": {"name": "x"}}]},
            {"text": "finished", "end": True}]},
            "tools": [recording_server(tmp_path).model_dump()]}})
    async with running_worker(client, task_queue, pool=McpClientPool(idle_s=0)):
        # QUICK: each run of five attempts takes 0.1 s + 0.2 s + 0.4 s + 0.8 s, not 15 s.
        h = await start_session(client, config, task_queue, behaviour=behaviour,
                                timing=QUICK)
        snap = await until(h, lambda s: s.status == W)  # its tools are listed
        (tmp_path / "fail-start").touch()  # from now on the server cannot start
        await until_gone(tmp_path / "server.pid")
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        assert (await h.result()).status is SessionStatus.SUCCEEDED
        state = await h.query("state", result_type=SessionState)
    call = next(c for c in state.contracts if c.action_type.value == "tool_call")
    assert call.status.value == "failed" and "could not be started" in call.error_message
    assert received(tmp_path) == []
    await export_session(client, h.id, tmp_path / "runs")
    events = [json.loads(x) for x in
              (tmp_path / "runs" / h.id / "events.ndjson").read_text().splitlines()]
    assert len([e for e in events if e["type"] == "TOOL_CALL_STARTED"]) == tries


@pytest.mark.parametrize(("behaviour", "tries", "said"), [
    (Behaviour.SEND_WINDOW, 2, "not sent: the call never reached the tool server in 2"),
    (Behaviour.SENT_MARKS, 1, "outcome unknown"),  # before the window: one try
])
async def test_a_plan_steps_call_that_cannot_be_sent_is_retried_then_goes_to_its_person(
        dev_env, task_queue, tmp_path, behaviour, tries, said):
    (tmp_path / "fail-start").touch()  # the server cannot start
    config = SessionConfig.model_validate({"send_window_s": 2, "plan": {
        "steps": [{"name": "rm", "run": {"server": "recorder", "tool": "delete",
                                         "arguments": {"name": "x"}}, "on_fail": "human"}],
        "tools": [recording_server(tmp_path).model_dump()]}})
    async with running_worker(dev_env.client, task_queue):
        h = await start_session(dev_env.client, config, task_queue, behaviour=behaviour)
        snap = await until(h, lambda s: s.status == W)
        assert snap.pending.kind == "step" and said in snap.pending.prompt
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   choice="skip"))
        await h.result()
    assert received(tmp_path) == []
    await export_session(dev_env.client, h.id, tmp_path / "runs")
    events = [json.loads(x) for x in
              (tmp_path / "runs" / h.id / "events.ndjson").read_text().splitlines()]
    assert len([e for e in events if e["type"] == "TOOL_CALL_STARTED"]) == tries
