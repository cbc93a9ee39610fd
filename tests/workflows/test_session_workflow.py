"""SessionWorkflow end to end on the time-skipping server, with the real LLM
activity (scripted provider) and the real demo MCP server over stdio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.service import RPCError

from api.cli.demo_config import demo_config
from observation.exporter import export_session
from tests.support.sessions import start_session, until, until_status
from workflows.config import SessionConfig
from workflows.contract import ExecutionStatus
from workflows.messages import (
    EndInput,
    LiveSession,
    MessageInput,
    RecoverInput,
    ReplyInput,
    SessionResult,
)
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def scripted(notes: dict, responses: list[dict], **kw) -> SessionConfig:
    return SessionConfig.model_validate({
        "initial_message": "go",
        "agent": {"llm": {"provider": "scripted", "responses": responses}, "tools": [notes]},
        **kw,
    })


def calls_log(notes_dir: Path) -> list[dict]:
    log = notes_dir / ".calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def events(snap: LiveSession) -> list[str]:
    return [c.event.value for c in snap.status_history]


async def reply(handle, snap: LiveSession, **kw):
    return await handle.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                           **kw))


async def test_demo_session_runs_end_to_end(ts_worker, notes_dir, task_queue):
    """The issue's demo: reversible call, destructive call approved, ECS question, answer."""
    client = ts_worker.client
    h = await start_session(client, demo_config(notes_dir), task_queue,
                            search_attributes=False)
    snap = await until_status(h, W)
    assert snap.pending.kind == "approval"
    assert snap.pending.prompt == (
        "Approve irreversible action: Call tool delete_note(name='old-draft') on notes")
    assert sorted(p.name for p in notes_dir.iterdir() if not p.name.startswith(".")) == [
        "groceries.note", "old-draft.note"]
    await reply(h, snap, approve=True)
    snap = await until(h, lambda s: s.status == W and s.pending.kind == "confirm")
    assert not (notes_dir / "old-draft.note").exists()
    await reply(h, snap, approve=True)
    result = await h.result()
    assert result.status is SessionStatus.SUCCEEDED
    snap = await h.query("snapshot", result_type=LiveSession)
    assert events(snap) == [
        "turn.started", "interaction.requested", "interaction.reply.accepted", "turn.started",
        "interaction.requested", "interaction.reply.accepted", "turn.started", "run.succeeded",
    ]
    assert [(c.action_summary.split("(")[0], c.current_status.value) for c in snap.contracts] == [
        ("Call tool write_note", "completed"), ("Call tool write_note", "completed"),
        ("Call tool delete_note", "completed"),
        ("Ask the person to confirm: Shall I read the groceries list back to you?", "completed"),
        ("Call tool read_note", "completed"),
    ]
    state = await h.query("state", result_type=SessionState)
    delete = state.contracts[2]
    assert delete.irreversible
    assert [(t.from_status.value, t.to_status.value, t.actor) for t in delete.transitions] == [
        ("pending", "running", "reasoning"), ("running", "waiting", "tool_node"),
        ("waiting", "running", "user"), ("running", "completed", "tool_node")]
    assert len(state.execution_trace) == sum(len(c.transitions) for c in state.contracts)
    assert len(state.memory) == 5 and len(state.replies) == 2
    # The reasoner read the tool's own output, as data (not a repr wrapped in prose).
    tool_msgs = [m.content for m in state.conversation if m.role == "tool"]
    assert json.loads(tool_msgs[2]) == {"name": "old-draft", "deleted": True}
    assert [c["tool"] for c in calls_log(notes_dir)] == ["write_note", "write_note",
                                                         "delete_note"]


async def test_rejected_irreversible_action_never_runs(ts_worker, notes, notes_dir,
                                                       task_queue):
    client = ts_worker.client
    (notes_dir / "keep.note").write_text("x")
    cfg = scripted(notes, [
        {"tool_calls": [{"tool": "delete_note", "arguments": {"name": "keep"}}]},
        {"text": "ok, kept", "end": True},
    ])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    await reply(h, snap, approve=False, comment="not this one")
    await h.result()
    state = await h.query("state", result_type=SessionState)
    c = state.contracts[0]
    assert c.status is ExecutionStatus.REJECTED
    assert [t.trigger.value for t in c.transitions] == ["start", "suspend", "resume", "reject"]
    assert (notes_dir / "keep.note").exists() and calls_log(notes_dir) == []
    assert "[REJECTED]" in next(m for m in state.conversation if m.role == "tool").content


async def test_seed001_duplicate_irreversible_call_is_refused(ts_worker, notes,
                                                              notes_dir, task_queue):
    """Seed 001 'Blocking duplicate irreversible execution' inside a running session."""
    client = ts_worker.client
    (notes_dir / "a.note").write_text("x")
    delete = {"tool_calls": [{"tool": "delete_note", "arguments": {"name": "a"}}]}
    cfg = scripted(notes, [delete, delete, {"text": "done", "end": True}])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    await reply(h, await until_status(h, W), approve=True)
    result = await h.result()
    state = await h.query("state", result_type=SessionState)
    assert result.status is SessionStatus.SUCCEEDED
    assert len(state.contracts) == 1  # the second call was refused before a contract
    assert [c["tool"] for c in calls_log(notes_dir)] == ["delete_note"]
    refusal = [m.content for m in state.conversation if m.role == "tool"][1]
    assert refusal.startswith("already completed: this irreversible operation ran as")


async def test_reply_of_wrong_shape_or_when_nothing_pending_is_refused(
    ts_worker, notes, notes_dir, task_queue
):
    client = ts_worker.client
    cfg = scripted(notes, [
        {"ecs_request": {"kind": "choose", "prompt": "which?", "options": ["a", "b"]}},
        {"text": "fine", "end": True},
    ])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    before = (await h.fetch_history()).events
    for bad in (ReplyInput(request_id="nope", choice="a"),
                ReplyInput(request_id=snap.pending.request_id, choice="z"),
                ReplyInput(request_id=snap.pending.request_id)):
        with pytest.raises(WorkflowUpdateFailedError):
            await h.execute_update("reply", bad)
    # Refused by the validator: no update reached history, nothing changed.
    added = (await h.fetch_history()).events[len(before):]
    assert not [e for e in added if "UPDATE" in EventType.Name(e.event_type)], added
    assert (await h.query("snapshot", result_type=LiveSession)).replies == 0
    await reply(h, snap, choice="b")
    await h.result()
    with pytest.raises((WorkflowUpdateFailedError, RPCError)):  # closed: nothing to update
        await reply(h, snap, choice="a")
    state = await h.query("state", result_type=SessionState)
    assert [r.answer for r in state.replies] == [{"choice": "b"}]
    assert state.contracts[0].result == {"choice": "b"}


async def test_seed004_auto_decide_timeout_takes_the_default(dev_worker, notes,
                                                             notes_dir, task_queue):
    """Seed 004 'strict=false timeout auto-decision': reject by default, on expiry.
    (Real dev server, a one-second timeout: explicit time skipping proved flaky.)"""
    client = dev_worker.client
    (notes_dir / "a.note").write_text("x")
    cfg = scripted(notes, [
        {"tool_calls": [{"tool": "delete_note", "arguments": {"name": "a"}}]},
        {"text": "skipped it"},
    ], mode="auto", interactive_require_user_reply=False, reply_timeout_s=1)
    h = await start_session(client, cfg, task_queue, search_attributes=True)
    result = await h.result()
    assert result.status is SessionStatus.SUCCEEDED  # auto: a final answer ends the run
    snap = await h.query("snapshot", result_type=LiveSession)
    changes = [(c.from_status.value, c.to_status.value, c.event.value)
               for c in snap.status_history]
    assert ("waiting_user", "queued", "interaction.auto_decide.timeout") in changes
    fcmp = [e.type for c in snap.status_history for e in c.fcmp]
    assert fcmp.index("interaction.auto_decide.timeout") + 1 == fcmp.index(
        "conversation.state.changed", fcmp.index("interaction.auto_decide.timeout"))
    assert snap.contracts[0].current_status is ExecutionStatus.REJECTED
    assert snap.contracts[0].last_actor == "timer"
    assert (notes_dir / "a.note").exists()


async def test_strict_mode_keeps_waiting_after_the_timeout(ts_worker, notes,
                                                           task_queue):
    """Strict mode without `on_reply_timeout: cancel` waits for ever: the wait has no
    timer at all, so nothing can fire (checked in history, no clock needed)."""
    client = ts_worker.client
    cfg = scripted(notes, [{"ecs_request": {"kind": "confirm", "prompt": "sure?"}}],
                   reply_timeout_s=60)
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    await until_status(h, W)
    events = (await h.fetch_history()).events
    assert not [e for e in events if e.HasField("timer_started_event_attributes")]
    snap = await h.query("snapshot", result_type=LiveSession)
    assert snap.status is W and snap.contracts[0].current_status is ExecutionStatus.WAITING
    await h.cancel()
    with pytest.raises(WorkflowFailureError):
        await h.result()


async def test_strict_mode_with_cancel_times_the_contract_out(dev_worker, notes,
                                                              task_queue):
    client = dev_worker.client
    cfg = scripted(notes, [{"ecs_request": {"kind": "confirm", "prompt": "sure?"}},
                           {"text": "nobody answered", "end": True}],
                   reply_timeout_s=1, on_reply_timeout="cancel")
    h = await start_session(client, cfg, task_queue, search_attributes=True)
    await h.result()
    snap = await h.query("snapshot", result_type=LiveSession)
    assert "interaction.reply.expired" in events(snap)
    assert snap.contracts[0].current_status is ExecutionStatus.CANCELLED
    assert snap.contracts[0].last_trigger == "timeout"


async def test_cancel_closes_every_open_contract(ts_worker, notes, notes_dir,
                                                 task_queue):
    client = ts_worker.client
    (notes_dir / "a.note").write_text("x")
    cfg = scripted(notes, [{"tool_calls": [{"tool": "delete_note",
                                            "arguments": {"name": "a"}}]}])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    await until_status(h, W)
    await h.cancel()
    with pytest.raises(WorkflowFailureError):
        await h.result()
    snap = await h.query("snapshot", result_type=LiveSession)
    assert snap.status is SessionStatus.CANCELED and snap.pending is None
    assert snap.contracts[0].current_status is ExecutionStatus.CANCELLED
    assert events(snap)[-1] == "run.canceled"


async def test_non_retryable_llm_failure_fails_the_session(ts_worker, notes,
                                                           task_queue):
    client = ts_worker.client
    cfg = scripted(notes, [{"error": "bad request: model not found", "http_status": 400}])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    result = await h.result()
    assert result.status is SessionStatus.FAILED
    assert "model not found" in result.failure_reason


async def test_person_ends_the_conversation(ts_worker, notes, task_queue):
    client = ts_worker.client
    cfg = scripted(notes, [{"text": "anything else?"}, {"text": "bye", "end": True}])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    assert snap.pending.kind == "message" and snap.last_text == "anything else?"
    with pytest.raises(WorkflowUpdateFailedError):  # a message wait takes no reply
        await reply(h, snap, approve=True)
    await h.execute_update("end", EndInput(reason="all good"))
    result = await h.result()
    assert result.status is SessionStatus.SUCCEEDED
    with pytest.raises((WorkflowUpdateFailedError, RPCError)):
        await h.execute_update("send_message", MessageInput(text="late"))


async def test_new_message_starts_a_new_turn(ts_worker, notes, task_queue):
    client = ts_worker.client
    cfg = scripted(notes, [{"text": "first"}, {"text": "second", "end": True}])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    await until_status(h, W)
    await h.execute_update("send_message", MessageInput(text="and now?"))
    await h.result()
    state = await h.query("state", result_type=SessionState)
    assert [m.content for m in state.conversation if m.role == "user"] == ["go", "and now?"]
    assert "message.accepted" in [c.event.value for c in state.status_history]


async def test_seed004_restart_recovery_preserves_a_valid_wait(ts_worker, notes,
                                                               task_queue):
    client = ts_worker.client
    cfg = scripted(notes, [{"ecs_request": {"kind": "confirm", "prompt": "ok?"}},
                           {"text": "thanks", "end": True}])
    h = await start_session(client, cfg, task_queue, search_attributes=False)
    await until_status(h, W)
    await h.signal("recover", RecoverInput(worker_identity="test"))
    snap = await until(h, lambda s: "restart.preserve_waiting" in events(s))
    assert snap.status is W and snap.pending is not None
    await reply(h, snap, approve=True)
    assert (await h.result()).status is SessionStatus.SUCCEEDED


async def test_continue_as_new_carries_live_state(dev_worker, notes, task_queue, tmp_path):
    """Several continue-as-new boundaries; nothing changes for the person. A run
    carries the live state and the totals; the past (every reply) is in history.
    (On the dev server: the time-skipping server can lose a query sent right after
    a new run.)"""
    client = dev_worker.client
    turns = 6
    cfg = scripted(notes, [{"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}}
                           for i in range(turns)] + [{"text": "all done", "end": True}])
    first = await start_session(client, cfg, task_queue, continue_as_new_after_events=10)
    # Follow the latest run, not the first one (which continues as new).
    h = client.get_workflow_handle(first.id, result_type=SessionResult)
    for i in range(turns):
        snap = await until(h, lambda s, i=i: s.status == W and s.replies == i)
        assert snap.pending.prompt == f"step {i}?"
        await h.execute_update(
            "reply", ReplyInput(request_id=snap.pending.request_id, approve=i % 2 == 0))
    result = await h.result()
    assert result.status is SessionStatus.SUCCEEDED and result.contracts == turns
    state = await h.query("state", result_type=SessionState)
    assert state.continued_runs >= 2
    assert state.replies_total == turns and state.contracts_total == turns
    assert len(state.replies) < turns  # the earlier runs' replies stayed behind
    assert all(c.status is ExecutionStatus.COMPLETED for c in state.contracts)
    await export_session(client, h.id, tmp_path / "runs")
    log = [json.loads(line) for line in
           (tmp_path / "runs" / h.id / "events.ndjson").read_text().splitlines()]
    answers = [e["payload"]["answer"]["approved"] for e in log if e["type"] == "ISSUE_RESOLVED"]
    assert answers == [i % 2 == 0 for i in range(turns)]
