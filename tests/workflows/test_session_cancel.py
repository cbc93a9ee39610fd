"""Invariant 8, cancel cancels: whatever is in flight (a tool call, an LLM call
being retried), a cancelled session ends `canceled` with every open contract
`cancelled`, and nothing new starts after the cancel request. (Real dev server:
cancellation reaches a running activity through its heartbeats.)"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle

from observation.exporter import session_events
from tests.support.sessions import start_session, until_file
from workflows.config import SessionConfig
from workflows.contract import ExecutionStatus, check_idempotency
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

REPO = Path(__file__).resolve().parents[2]


def hanging_config(tmp_path: Path, responses: list[dict], **kw) -> SessionConfig:
    server = {"name": "slow", "cwd": str(REPO),
              "command": [sys.executable, "-m", "tests.fakes.hanging_mcp_server",
                          "--dir", str(tmp_path)]}
    return SessionConfig.model_validate({
        "initial_message": "go", **kw,
        "agent": {"llm": {"provider": "scripted", "responses": responses}, "tools": [server]},
    })


def call(tool: str) -> dict:
    return {"tool_calls": [{"tool": tool, "arguments": {"name": "apollo"}}]}


async def cancelled(h: WorkflowHandle) -> SessionState:
    """Cancel, wait for the end, and return the final state."""
    await h.cancel()
    with pytest.raises(WorkflowFailureError):
        async with asyncio.timeout(60):  # a bound, not a clock: a session that goes on
            await h.result()             # after the cancel would never end
    state = await h.query("state", result_type=SessionState)
    assert state.status is SessionStatus.CANCELED
    assert state.pending is None and state.open_contracts() == []
    assert state.status_history[-1].event.value == "run.canceled"
    return state


async def scheduled_after_cancel(h: WorkflowHandle) -> list[str]:
    """The activities scheduled after the cancel request reached history."""
    events = (await h.fetch_history()).events
    at = next(i for i, e in enumerate(events) if e.event_type ==
              EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
    return [e.activity_task_scheduled_event_attributes.activity_type.name
            for e in events[at:]
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def waiting_for_the_provider(h: WorkflowHandle, limit_s: float = 30) -> None:
    """Wait (bounded) until the LLM call failed and the session waits, on a durable
    timer, to call the provider again (workflows/provider_wait.py)."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        events = (await h.fetch_history()).events
        if any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events):
            assert any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
                       for e in events)
            return
        assert asyncio.get_running_loop().time() < deadline, "the LLM call never retried"
        await asyncio.sleep(0.05)


async def test_cancel_with_a_tool_call_in_flight(dev_worker, tmp_path, task_queue):
    client = dev_worker.client
    cfg = hanging_config(tmp_path, [call("watch"), {"text": "done", "end": True}], mode="auto")
    h = await start_session(client, cfg, task_queue)
    await until_file(tmp_path / "watches.log")  # the tool runs now
    state = await cancelled(h)
    (c,) = state.contracts
    assert c.status is ExecutionStatus.CANCELLED
    last = c.transitions[-1]
    assert (last.from_status.value, last.trigger.value, last.actor) == (
        "running", "cancel", "user")
    assert c.error_message == "the session was cancelled while the call was under way"
    assert state.llm_calls == 1 and await scheduled_after_cancel(h) == []
    events = (await h.fetch_history()).events
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in [e.event_type for e in events]
    log = [e async for e in session_events(client, h.id, follow=False, only=None)]
    types = [e.type for e in log]
    assert "RUN_CANCEL_REQUESTED" in types
    assert log[-1].type == "RUN_COMPLETED" and log[-1].payload["status"] == "canceled"


async def test_cancel_while_the_llm_call_is_retried(dev_worker, tmp_path, task_queue):
    """The provider failed; the session waits to retry it: a cancel ends the wait at
    once and no new LLM call starts."""
    client = dev_worker.client
    cfg = SessionConfig.model_validate({"initial_message": "go", "agent": {"llm": {
        "provider": "scripted", "responses": [
            {"error": "overloaded", "http_status": 503, "retry_after_s": 600}]}}})
    h = await start_session(client, cfg, task_queue)
    await waiting_for_the_provider(h)
    state = await cancelled(h)
    assert state.failure_reason is None and state.contracts == []
    assert await scheduled_after_cancel(h) == []
    events = [e.event_type for e in (await h.fetch_history()).events]
    assert EventType.EVENT_TYPE_TIMER_CANCELED in events


async def test_cancel_with_a_tool_call_in_flight_before_a_confirm(dev_worker, tmp_path,
                                                                  task_queue):
    """Once cancelled the agent does not go on to its next answer (a confirm)."""
    client = dev_worker.client
    cfg = hanging_config(tmp_path, [
        call("watch"), {"ecs_request": {"kind": "confirm", "prompt": "more?"}},
        {"text": "done", "end": True}])
    h = await start_session(client, cfg, task_queue)
    await until_file(tmp_path / "watches.log")
    state = await cancelled(h)
    assert [c.status for c in state.contracts] == [ExecutionStatus.CANCELLED]
    assert state.llm_calls == 1 and await scheduled_after_cancel(h) == []
    assert "waiting_user" not in [c.to_status.value for c in state.status_history]


async def test_cancel_with_an_at_most_once_call_in_flight(dev_worker, tmp_path, task_queue):
    """Its outcome is unknown: cancelled, never retried, never counted as completed."""
    client = dev_worker.client
    cfg = hanging_config(tmp_path, [call("launch"), {"text": "done", "end": True}],
                         mode="auto")
    h = await start_session(client, cfg, task_queue)
    await until_file(tmp_path / "launches.log")
    state = await cancelled(h)
    (c,) = state.contracts
    assert c.action_detail["safety"] == "at_most_once"
    assert c.status is ExecutionStatus.CANCELLED and c.transitions[-1].actor == "user"
    assert c.reason_code == "outcome_unknown"
    assert c.error_message.startswith("outcome unknown: the session was cancelled while the "
                                      "call was under way; it may have run; not retried")
    assert (tmp_path / "launches.log").read_text() == "apollo\n"  # ran once
    assert check_idempotency([c.model_copy(update={"irreversible": True})],
                             c.idempotency_key).allowed  # not a completed run
    assert await scheduled_after_cancel(h) == []
