"""The wait's steps on durable timers (issue 26), end to end: remind at T1, escalate at
T2, auto-decide at T3, each once in the log, with a restart and a continue-as-new between
T1 and T2; the escalated person may answer after T2, not before, here through an
action link (both on the dev server, with real timers of a few seconds)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Replayer

from api.runtime.recovery import start_recovery
from observation.telemetry import project
from tests.support.exported import log_of, of, refused
from tests.support.sessions import running_worker, start_session
from workflows.config import SessionConfig
from workflows.journal_carrier import INTERCEPTORS
from workflows.messages import LiveSession, ReplyInput, SessionResult
from workflows.people import ANSWER_FORBIDDEN, ANSWER_INVALID, Principal
from workflows.session import SessionWorkflow
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER
ANN = Principal(issuer="local", subject="ann", name="Ann", role="approver")
CAROL = Principal(issuer="local", subject="carol", name="Carol", role="approver")
PEOPLE = {"owner": "olga", "approvers": ["ann"]}
T1, T2, T3 = 100, 200, 300


def session(notes: dict, **kw) -> SessionConfig:
    return SessionConfig.model_validate({
        "initial_message": "go", "people": PEOPLE, "mode": "auto",
        "interactive_require_user_reply": False,
        "remind_after_s": T1, "escalate_after_s": T2, "escalate_to": ["carol", "ann"],
        "reply_timeout_s": T3, **kw,
        "agent": {"llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "delete_note", "arguments": {"name": "a"}}]},
            {"text": "done", "end": True}]}, "tools": [notes]}})


async def state_when(h: WorkflowHandle, check: Callable[[SessionState], bool],
                     limit_s: float = 60) -> SessionState:
    """Query the state until ``check`` holds (bounded). A query sent right after a new
    run can be lost by the time-skipping server: it is sent again."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        try:
            state = await h.query("state", result_type=SessionState,
                                  rpc_timeout=timedelta(seconds=5))
            if check(state):
                return state
        except RPCError:
            state = None
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not reached; last state: {state}")
        await asyncio.sleep(0.02)




def types(lines: list[dict]) -> list[str]:
    return [e["type"] for e in lines]



async def test_remind_escalate_and_auto_decide_each_once_across_a_restart(
        dev_env, notes, notes_dir, tmp_path, task_queue):
    """On the dev server with real timers of 1, 5 and 7 s (the time-skipping server
    cannot skip time across continue-as-new): between the reminder and the escalation
    the worker stops and another starts cold, whose restart recovery (the batch
    ``recover`` signal) makes the run continue as new there (a small
    ``continue_as_new_after_events``). Each step is in the log once, in order."""
    (notes_dir / "a.note").write_text("x")
    client = dev_env.client
    cfg = session(notes, remind_after_s=1, escalate_after_s=5, reply_timeout_s=7)
    async with running_worker(client, task_queue):
        first = await start_session(client, cfg, task_queue,
                                    continue_as_new_after_events=10)
        h = client.get_workflow_handle(first.id, result_type=SessionResult)  # latest run
        p = (await state_when(h, lambda s: s.status == W)).pending
        assert p is not None and p.approvers == []
        state = await state_when(h, lambda s: s.pending is not None
                                 and s.pending.reminded_at is not None)
        runs_at_t1 = state.continued_runs
        refusal = await refused(h, ReplyInput(request_id=p.request_id, approve=True,
                                              principal=CAROL))
        assert refusal.type == ANSWER_FORBIDDEN  # a reminder adds no one
    async with running_worker(client, task_queue):  # the restart: a new worker, cold
        await start_recovery(client, task_queue, "restarted-worker")
        state = await state_when(h, lambda s: s.continued_runs > runs_at_t1)
        assert state.pending is not None and state.pending.reminded_at is not None
        await _escalated_then_decided(client, h, p, notes_dir, tmp_path)


async def _escalated_then_decided(client, h: WorkflowHandle, p, notes_dir: Path,
                                  tmp_path: Path) -> None:
    """After the restart: the escalation at T2, the default decision at T3, the log."""
    state = await state_when(h, lambda s: s.pending is not None
                             and s.pending.escalated_at is not None)
    assert state.pending.approvers == ["olga", "ann", "carol"]
    at = p.created_at
    # each step not before its time (the timer fires then; the task runs just after)
    assert at + timedelta(seconds=1) <= state.pending.reminded_at < state.pending.escalated_at
    assert at + timedelta(seconds=5) <= state.pending.escalated_at
    meta = await h.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "Reminded at" in meta.current_details  # the Temporal UI's current details
    assert "Escalated to carol, ann at" in meta.current_details

    result = await h.result()  # T3: the default decision (reject); the run ends
    assert result.status is SessionStatus.SUCCEEDED
    assert (notes_dir / "a.note").exists()

    lines = await log_of(client, h, tmp_path)
    (reminded,) = of(lines, "ISSUE_REMINDED")
    (escalated,) = of(lines, "ISSUE_ESCALATED")
    (resolved,) = of(lines, "ISSUE_RESOLVED")
    assert reminded == {"issue_id": p.request_id, "kind": "approval", "digest": p.digest,
                        "approvers": ["olga", "ann"],
                        "reminded_at": reminded["reminded_at"]}
    assert escalated == {"issue_id": p.request_id, "kind": "approval", "digest": p.digest,
                         "approvers": ["olga", "ann", "carol"], "escalated_to": ["carol"],
                         "escalated_at": escalated["escalated_at"]}
    assert (resolved["resolution"], resolved["answer"]["approved"]) == ("auto_decided", False)
    order = types(lines)
    between = order[order.index("ISSUE_REMINDED"):order.index("ISSUE_ESCALATED")]
    assert "RUN_CONTINUED_AS_NEW" in between
    assert order.index("ISSUE_ESCALATED") < order.index("ISSUE_RESOLVED")
    # each line on the request's work item, as its approval lines are
    spans = {e["type"]: e["span_id"] for e in lines
             if e["type"] in ("ISSUE_OPENED", "ISSUE_REMINDED", "ISSUE_ESCALATED")}
    assert len(set(spans.values())) == 1
    # telemetry: the steps on the work item's run, like its request
    (item,) = [r for r in project(h.id, lines) if r.attributes.get("issue_id") == p.request_id]
    assert item.attributes["issue_reminded_at"] == reminded["reminded_at"]
    assert item.attributes["issue_escalated_to"] == "carol"


async def test_the_escalated_person_answers_after_escalation_through_a_link(
        dev_env, notes, notes_dir, tmp_path, task_queue):
    # the dev server, real timers of 1 and 3 s (the time-skipping server's sleep broke
    # its HTTP/2 stream under load); the timeout is far off
    (notes_dir / "a.note").write_text("x")
    client = dev_env.client
    cfg = session(notes, remind_after_s=1, escalate_after_s=3, reply_timeout_s=600)
    async with running_worker(client, task_queue):
        h = await start_session(client, cfg, task_queue)
        p = (await state_when(h, lambda s: s.status == W)).pending
        assert p is not None
        forged = await refused(h, ReplyInput(request_id=p.request_id, approve=True,
                                             via="link"))
        assert (forged.type, forged.details[0]["code"]) == (ANSWER_INVALID, "invalid_via")
        await state_when(h, lambda s: s.pending is not None
                         and s.pending.escalated_at is not None)
        await h.execute_update("reply", ReplyInput(
            request_id=p.request_id, approve=True, principal=CAROL, digest=p.digest,
            via="link"))
        await h.result()
        assert not (notes_dir / "a.note").exists()  # carol's approval ran the call
        lines = await log_of(client, h, tmp_path)
        (resolved,) = of(lines, "ISSUE_RESOLVED")
        assert (resolved["resolution"], resolved["via"], resolved["principal"]["subject"]) == (
            "answered", "link", "carol")
        assert len(of(lines, "ISSUE_REMINDED")) == len(of(lines, "ISSUE_ESCALATED")) == 1
        snap = await h.query("snapshot", result_type=LiveSession)
        assert snap.pending is None
        # the run with its steps replays (deterministic: the steps come from history alone)
        replayer = Replayer(workflows=[SessionWorkflow], interceptors=INTERCEPTORS,
                            data_converter=pydantic_data_converter)
        replayed = await replayer.replay_workflow(await h.fetch_history(),
                                                  raise_on_replay_failure=True)
        assert replayed.replay_failure is None
