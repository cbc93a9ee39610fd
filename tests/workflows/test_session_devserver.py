"""Sessions on the real Temporal dev server: what operators see, and crash survival."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import datetime
from pathlib import Path

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from api.runtime.worker import run_worker
from api.settings import HitlflowSettings
from observation.exporter.decode import journal_of
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
from workflows.config import SessionConfig
from workflows.messages import ReplyInput, SessionResult
from workflows.search_attributes import SESSION_STATUS, WAITING_SINCE
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def approve_then_confirm(notes: dict) -> SessionConfig:
    return SessionConfig.model_validate({
        "initial_message": "clean up",
        "agent": {"llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "delete_note", "arguments": {"name": "old"}}]},
            {"ecs_request": {"kind": "confirm", "prompt": "anything else?"}},
            {"text": "done", "end": True},
        ]}, "tools": [notes]},
    })


async def listed(client: Client, query: str) -> list[str]:
    """Visibility is eventually consistent: wait (bounded) until the query matches."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        ids = [wf.id async for wf in client.list_workflows(query)]
        if ids or asyncio.get_running_loop().time() > deadline:
            return ids
        await asyncio.sleep(0.1)


async def recorded(h, text: str) -> None:
    """Wait (bounded) until ``text`` appears in the session's history."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        journal = json.dumps([journal_of(e) for e in (await h.fetch_history()).events])
        if text in journal:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{text} never recorded"
        await asyncio.sleep(0.05)


async def test_operators_filter_waiting_sessions_and_read_what_they_wait_for(
    dev_env, notes, notes_dir, task_queue
):
    client = dev_env.client
    (notes_dir / "old.note").write_text("x")
    async with running_worker(client, task_queue):
        h = await start_session(client, approve_then_confirm(notes), task_queue)
        snap = await until_status(h, W)
        ids = await listed(client, f'SessionStatus = "waiting_user" AND WorkflowId = "{h.id}"')
        assert ids == [h.id]
        attrs = (await h.describe()).typed_search_attributes
        assert attrs.get(SESSION_STATUS) == "waiting_user"
        assert isinstance(attrs.get(WAITING_SINCE), datetime)
        meta = await h.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert meta.current_details.startswith(
            "Waiting for the person: approval of an irreversible action — Approve")
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        snap = await until(h, lambda s: s.status == W and s.pending.kind == "confirm")
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=False))
        assert (await h.result()).status is SessionStatus.SUCCEEDED
        ids = await listed(client, f'SessionStatus = "succeeded" AND WorkflowId = "{h.id}"')
        assert ids == [h.id]
        assert (await h.describe()).typed_search_attributes.get(WAITING_SINCE) is None


async def test_worker_killed_mid_session_loses_nothing(dev_env, notes, notes_dir):
    """Kill -9 the worker process while the session waits; another worker finishes it."""
    client = dev_env.client
    (notes_dir / "old.note").write_text("x")
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    target = client.service_client.config.target_host
    with worker_process(client, task_queue):
        h = await start_session(client, approve_then_confirm(notes), task_queue)
        snap = await until_status(h, W)
        assert snap.pending.kind == "approval"
    await forget_worker(client, h)
    stop = asyncio.Event()
    # The killed worker's poller stays in the server's memory for a while; a window of
    # 0 s treats it as gone (as the default 90 s would a moment later): a cold start.
    settings = HitlflowSettings(temporal_address=target, task_queue=task_queue,
                                live_poller_window_s=0)
    second = asyncio.create_task(run_worker(settings, stop, client=client))
    try:
        # The new worker asks every waiting session to check itself (seed 004, one
        # batch operation); wait until that is in history before replying.
        await recorded(h, "restart.preserve_waiting")
        snap = await until_status(h, W)
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        snap = await until(h, lambda s: s.status == W and s.pending.kind == "confirm")
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        result: SessionResult = await h.result()
        state = await h.query("state", result_type=SessionState)
    finally:
        stop.set()
        await second
    assert result.status is SessionStatus.SUCCEEDED
    assert [r.answer for r in state.replies] == [{"approved": True}, {"approved": True}]
    calls = [json.loads(x) for x in (notes_dir / ".calls.log").read_text().splitlines()]
    assert [c["tool"] for c in calls] == ["delete_note"]
    assert not (notes_dir / "old.note").exists()


async def test_worker_lost_mid_call_fails_an_at_most_once_contract_as_unknown(
    dev_env, tmp_path
):
    """Invariant 5: a call under way when its worker dies is never run again; its
    contract fails with 'outcome unknown' and the agent is told so."""
    client = dev_env.client
    repo = Path(__file__).resolve().parents[2]
    hanging = {"name": "rocket", "cwd": str(repo),
               "command": [sys.executable, "-m", "tests.fakes.hanging_mcp_server",
                           "--dir", str(tmp_path)]}
    cfg = SessionConfig.model_validate({"initial_message": "go", "mode": "auto", "agent": {
        "llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "launch", "arguments": {"name": "apollo"}}]},
            {"text": "I could not tell whether it launched.", "end": True}]},
        "tools": [hanging]}})
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    launches = tmp_path / "launches.log"
    with worker_process(client, task_queue):
        h = await start_session(client, cfg, task_queue, timing=QUICK)
        await until_file(launches)  # the tool is running now: kill the worker
    await forget_worker(client, h)
    async with running_worker(client, task_queue):
        result: SessionResult = await h.result()  # after the heartbeat timeout
        state = await h.query("state", result_type=SessionState)
    assert result.status is SessionStatus.SUCCEEDED
    (contract,) = state.contracts
    assert contract.status.value == "failed"
    assert contract.error_message.startswith("outcome unknown: the call did not report back")
    assert launches.read_text() == "apollo\n"  # it ran once, and was not retried
    told = [m.content for m in state.conversation if m.role == "tool"]
    assert told and told[0].startswith("[FAILED] Call tool launch(name='apollo') on rocket")
