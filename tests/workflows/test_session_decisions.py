"""Decisions bound and attributable (issue 24) in a running session, on the time-skipping
server with the real LLM activity (scripted) and the real demo notes server: who
decided and on what is in the log; refusals reach the client as typed errors and change
nothing; rules and standing decisions decide without asking; edit before approve; the
two-person rule across continue-as-new and a worker restart."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from api.runtime.worker import SESSION_RUNNER
from tests.support.exported import log_of, of
from tests.support.exported import refused as refused_with
from tests.support.sessions import (
    forget_worker,
    running_worker,
    start_session,
    until,
    until_status,
    worker_process,
)
from workflows import decisions
from workflows.config import SessionConfig
from workflows.contract import idempotency_key_for
from workflows.journal_carrier import INTERCEPTORS
from workflows.messages import (
    EndInput,
    LiveSession,
    MessageInput,
    RefusalInput,
    ReplyInput,
    RevokeInput,
    SessionResult,
)
from workflows.people import (
    ANSWER_CONFLICT,
    ANSWER_FORBIDDEN,
    ANSWER_INVALID,
    Principal,
    StandingDecision,
    digest_of,
)
from workflows.session import SessionWorkflow
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER
ANN = Principal(issuer="local", subject="ann", name="Ann", role="approver")
BOB = Principal(issuer="local", subject="bob", name="Bob", role="approver")
VIC = Principal(issuer="local", subject="vic", name="Vic", role="viewer")
OPS = Principal(issuer="local", subject="ops", name="Ops", role="operator")
PEOPLE = {"owner": "ann", "approvers": ["bob", "ops"], "viewers": ["vic"]}


def session(notes: dict, responses: list[dict], **kw) -> SessionConfig:
    return SessionConfig.model_validate({
        "initial_message": "go", "people": PEOPLE,
        "agent": {"llm": {"provider": "scripted", "responses": responses}, "tools": [notes]},
        **kw})


def delete(name: str) -> dict:
    return {"tool_calls": [{"tool": "delete_note", "arguments": {"name": name}}]}


def calls(notes_dir: Path) -> list[dict]:
    log = notes_dir / ".calls.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def ref(p: Principal) -> dict:
    return {"issuer": p.issuer, "subject": p.subject, "name": p.name}


async def test_the_decider_is_the_principal_and_the_log_binds_who_to_what(
        ts_worker, notes, notes_dir, tmp_path, task_queue):
    (notes_dir / "old.note").write_text("x")
    cfg = session(notes, [delete("old"), {"text": "done", "end": True}])
    h = await start_session(ts_worker.client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    p = snap.pending
    assert p.asked == {"server": "notes", "tool": "delete_note", "arguments": {"name": "old"}}
    assert p.digest == digest_of(p.asked)

    # Refusals come to the client typed, with their details; nothing changes.
    viewer = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                              principal=VIC))
    assert (viewer.type, viewer.details[0]) == (
        ANSWER_FORBIDDEN, {"rule": "role.approver", "code": "forbidden"})
    stale = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                             principal=BOB, digest="sha256:" + "0" * 64))
    assert (stale.type, stale.details[0]["code"]) == (ANSWER_CONFLICT, "stale_digest")
    edit = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                            principal=BOB, arguments={"name": "x"}))
    assert (edit.type, edit.details[0]["rule"]) == (ANSWER_FORBIDDEN, "editable")
    # ... and by signal (the Temporal UI): refused and recorded, with who and the rule
    await h.signal("submit_reply", ReplyInput(request_id=p.request_id, approve=True,
                                              principal=VIC).model_dump(mode="json"))
    await h.signal("record_refusal", RefusalInput(principal=VIC, action="cancel",
                                                  rule="people.owner", message="no"))
    snap = await until_status(h, W)
    assert snap.pending == p and calls(notes_dir) == []

    # A `by` in the body changes nothing: the principal decides.
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                               principal=BOB, by="mallory", digest=p.digest))
    await h.result()
    state = await h.query("state", result_type=SessionState)
    assert [r.by for r in state.replies] == ["Bob"]
    assert [c["tool"] for c in calls(notes_dir)] == ["delete_note"]

    lines = await log_of(ts_worker.client, h, tmp_path)
    (opened,) = of(lines, "ISSUE_OPENED")
    assert opened["digest"] == p.digest and "approvers" not in opened
    (resolved,) = of(lines, "ISSUE_RESOLVED")
    assert (resolved["by"], resolved["principal"], resolved["digest"]) == (
        "Bob", ref(BOB), p.digest)
    resumed = [s for s in of(lines, "execution_state") if s["trigger"] == "resume"]
    assert [(s["principal"], s["digest"]) for s in resumed] == [(ref(BOB), p.digest)]
    assert all("principal" not in s for s in of(lines, "execution_state")
               if s["trigger"] != "resume")
    refused = of(lines, "interaction.reply.refused")
    assert [(r["signal"], r["rule"], r["principal"]) for r in refused] == [
        ("submit_reply", "role.approver", ref(VIC)),
        ("record_refusal", "people.owner", ref(VIC))]
    assert refused[1]["action"] == "cancel" and refused[1]["code"] == "forbidden"


async def test_temporal_access_is_named_or_refused(ts_worker, notes, notes_dir, tmp_path,
                                                   task_queue):
    (notes_dir / "a.note").write_text("x")
    (notes_dir / "b.note").write_text("x")
    h = await start_session(ts_worker.client, session(notes, [
        delete("a"), {"text": "done", "end": True}]), task_queue, search_attributes=False)
    snap = await until_status(h, W)
    await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                               approve=True, by="someone"))
    await h.result()
    state = await h.query("state", result_type=SessionState)
    assert [r.by for r in state.replies] == ["whoever holds Temporal access"]
    assert state.replies[0].principal.issuer == "temporal"

    cfg = session(notes, [delete("b"), {"text": "done", "end": True}],
                  temporal_replies="refuse")
    h = await start_session(ts_worker.client, cfg, task_queue, search_attributes=False)
    snap = await until_status(h, W)
    cause = await refused_with(h, ReplyInput(request_id=snap.pending.request_id,
                                             approve=True))
    assert (cause.type, cause.details[0]["rule"]) == (ANSWER_FORBIDDEN, "temporal_replies")
    await h.signal("submit_reply", {"request_id": snap.pending.request_id, "approve": True})
    await h.signal("submit_message", {"text": "from the UI"})
    await h.signal("end_conversation", {"reason": "from the UI"})
    with pytest.raises(WorkflowUpdateFailedError):
        await h.execute_update("end", EndInput(reason="from the UI"))
    assert (await until_status(h, W)).pending == snap.pending
    await h.execute_update("end", EndInput(reason="enough", principal=ANN))
    await h.result()
    lines = await log_of(ts_worker.client, h, tmp_path)
    refused = of(lines, "interaction.reply.refused")
    assert [(r["signal"], r["rule"], r["code"]) for r in refused] == [
        (signal, "temporal_replies", "forbidden")
        for signal in ("submit_reply", "submit_message", "end_conversation")]
    assert [m["text"] for m in of(lines, "message")] == ["go"]
    ended = [s for s in of(lines, "RUN_STATE_CHANGED")
             if s["trigger"] == "conversation.ended"]
    assert [s["detail"]["principal"] for s in ended] == [ref(ANN)]
    assert (notes_dir / "b.note").exists()


async def test_refusals_the_api_reports_are_recorded_up_to_a_bound(
        ts_worker, notes, tmp_path, task_queue, monkeypatch):
    monkeypatch.setattr(decisions, "MAX_RECORDED_REFUSALS", 2)
    h = await start_session(ts_worker.client, session(notes, [{"text": "hi?"},
                                                              {"text": "ok", "end": True}]),
                            task_queue, search_attributes=False)
    await until_status(h, W)
    for i in range(4):
        await h.signal("record_refusal", RefusalInput(
            principal=VIC, action="message", rule="people.approvers", message=f"n{i}"))
    await h.signal("record_refusal", {"action": "broken"})  # malformed: ignored
    await h.execute_update("send_message", MessageInput(text="bye", principal=BOB,
                                                        by="mallory"))
    await h.result()
    lines = await log_of(ts_worker.client, h, tmp_path)
    assert [r["message"] for r in of(lines, "interaction.reply.refused")] == ["n0", "n1"]
    assert [(m["text"], m.get("by"), m.get("principal")) for m in of(lines, "message")] == [
        ("go", None, None), ("bye", "Bob", ref(BOB))]


async def test_edit_before_approve_runs_the_edited_call_once(
        ts_worker, notes, notes_dir, tmp_path, task_queue):
    for name in ("asked", "edited"):
        (notes_dir / f"{name}.note").write_text("x")
    rules = [{"tool": "delete_note", "editable": True, "name": "deletes"}]
    h = await start_session(ts_worker.client, session(notes, [
        delete("asked"), {"text": "done", "end": True}], rules=rules), task_queue,
        search_attributes=False)
    p = (await until_status(h, W)).pending
    assert (p.editable, p.rule, p.input_schema["required"]) == (True, "deletes", ["name"])
    bad = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                           principal=BOB, arguments={"name": 7}))
    assert (bad.type, bad.details[0]["code"]) == (ANSWER_INVALID, "invalid_arguments")
    assert bad.details[0]["errors"] == ["name: 7 is not of type 'string'"]
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                               principal=BOB, arguments={"name": "edited"}))
    await h.result()
    assert [(c["tool"], c["arguments"]) for c in calls(notes_dir)] == [
        ("delete_note", {"name": "edited"})]
    assert (notes_dir / "asked.note").exists() and not (notes_dir / "edited.note").exists()
    state = await h.query("state", result_type=SessionState)
    (tool,) = [m.content for m in state.conversation if m.role == "tool"]
    assert tool.startswith('The person edited the arguments before approving: '
                           '{"name": "edited"}')
    (c,) = state.contracts
    # consumed under the key of the call as asked: the same call again is "already done"
    assert c.idempotency_key == idempotency_key_for({
        "session": h.id, "server": "notes", "tool": "delete_note",
        "arguments": {"name": "asked"}})
    lines = await log_of(ts_worker.client, h, tmp_path)
    (resolved,) = of(lines, "ISSUE_RESOLVED")
    edited = decisions.asked_tool_call("notes", "delete_note", {"name": "edited"})
    assert (resolved["digest"], resolved["edited_digest"], resolved["edited_by"]) == (
        p.digest, digest_of(edited), ref(BOB))
    (started,) = [e for e in lines if e["type"] == "TOOL_CALL_STARTED"
                  and e["payload"].get("tool") == "delete_note"]
    assert started["payload"]["arguments"] == {"name": "edited"}


async def test_rules_decide_without_asking_and_the_log_names_them(
        ts_worker, notes, notes_dir, tmp_path, task_queue):
    for name in ("tmp-1", "prod-1"):
        (notes_dir / f"{name}.note").write_text("x")
    rules = [{"tool": "delete_note", "arguments": {"name": "tmp-*"}, "decision": "allow",
              "name": "scratch"},
             {"tool": "delete_note", "arguments": {"name": "prod-*"}, "decision": "deny"},
             {"tool": "write_note", "decision": "ask", "approvers": ["group:writers"]}]
    h = await start_session(ts_worker.client, session(notes, [
        {"tool_calls": [{"tool": "delete_note", "arguments": {"name": "tmp-1"}},
                        {"tool": "delete_note", "arguments": {"name": "prod-1"}},
                        {"tool": "write_note", "arguments": {"name": "w", "content": "c"}}]},
        {"text": "done", "end": True}], rules=rules), task_queue, search_attributes=False)
    p = (await until_status(h, W)).pending
    assert (p.asked["tool"], p.rule, p.approvers) == ("write_note", "rules[2]",
                                                       ["group:writers"])
    assert p.prompt.startswith("Approve action: ")  # asked though reversible
    assert [c["tool"] for c in calls(notes_dir)] == ["delete_note"]  # tmp-1, unasked
    nope = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                            principal=OPS))
    assert nope.details[0]["rule"] == "rules[2]"  # a rule's approvers bind operators
    writer = Principal(issuer="local", subject="wes", role="approver", groups=["writers"])
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                               principal=writer))
    await h.result()
    assert [c["arguments"]["name"] for c in calls(notes_dir)] == ["tmp-1", "w"]
    assert (notes_dir / "prod-1.note").exists()
    state = await h.query("state", result_type=SessionState)
    denied = next(c for c in state.contracts if c.action_detail["arguments"] == {
        "name": "prod-1"})
    assert denied.status.value == "rejected" and "denied by rule rules[1]" in (
        denied.error_message)
    assert any("denied by rule rules[1]" in m.content for m in state.conversation
               if m.role == "tool")
    lines = await log_of(ts_worker.client, h, tmp_path)
    auto = [o for o in of(lines, "ISSUE_OPENED") if "auto_decision" in o]
    assert [(o["auto_decision"], o["rule"]) for o in auto] == [("allow", "scratch"),
                                                               ("deny", "rules[1]")]
    resolved = of(lines, "ISSUE_RESOLVED")
    assert [(r["resolution"], r.get("rule"), r["answer"]["approved"], r["by"])
            for r in resolved] == [
        ("decided_by_rule", "scratch", True, "rule scratch"),
        ("decided_by_rule", "rules[1]", False, "rule rules[1]"),
        ("answered", None, True, "wes")]


async def test_a_standing_decision_decides_until_revoked(
        ts_worker, notes, notes_dir, tmp_path, task_queue):
    for name in "abcd":
        (notes_dir / f"{name}.note").write_text("x")
    rules = [{"tool": "write_note", "decision": "ask"}]
    write = {"tool_calls": [{"tool": "write_note", "arguments": {"name": "w", "content": "1"}}]}
    h = await start_session(ts_worker.client, session(notes, [
        delete("a"), delete("b"), write, write,
        {"tool_calls": [{"tool": "write_note", "arguments": {"name": "w", "content": "2"}}]},
        delete("c"), {"text": "done", "end": True}], rules=rules), task_queue,
        search_attributes=False)
    p = (await until_status(h, W)).pending
    first = p.request_id
    viewer = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                              principal=VIC, remember="tool"))
    assert viewer.type == ANSWER_FORBIDDEN
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                               principal=BOB, remember="tool"))
    # delete b runs without asking; the first write asks (a rule says ask)
    p = (await until(h, lambda s: s.status == W and s.pending.asked["tool"] == "write_note")
         ).pending
    assert [c["arguments"]["name"] for c in calls(notes_dir)] == ["a", "b"]
    held = await h.query("standing_decisions", result_type=list[StandingDecision])
    assert [(s.standing_id, s.tool, s.arguments, s.set_by.subject) for s in held] == [
        (f"sd-{first}", "delete_note", None, "bob")]
    second = p.request_id
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                               principal=BOB, remember="arguments"))
    # the same write again runs unasked; another one asks
    p = (await until(h, lambda s: s.status == W and s.pending.asked["arguments"].get(
        "content") == "2")).pending
    state = await h.query("state", result_type=SessionState)
    writes = [c for c in state.contracts if c.action_detail["tool"] == "write_note"]
    assert [(c.action_detail["arguments"]["content"], c.status.value,
             [t.trigger.value for t in c.transitions]) for c in writes] == [
        ("1", "completed", ["start", "suspend", "resume", "succeed"]),
        ("1", "completed", ["start", "succeed"]),  # not asked: the standing decision
        ("2", "waiting", ["start", "suspend"])]
    unknown = await refused_with(h, RevokeInput(standing_id="sd-nope", principal=OPS),
                                 "revoke_standing")
    assert unknown.message == "no standing decision 'sd-nope' in this session"
    other = await refused_with(h, RevokeInput(standing_id=held[0].standing_id,
                                              principal=ANN), "revoke_standing")
    assert (other.type, other.details[0]["rule"]) == (ANSWER_FORBIDDEN, "role.operator")
    await h.execute_update("revoke_standing", RevokeInput(standing_id=held[0].standing_id,
                                                          principal=OPS))
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                               principal=BOB))
    # after the revocation, delete c asks again
    p = (await until(h, lambda s: s.status == W and s.pending.asked["tool"] == "delete_note")
         ).pending
    assert p.asked["arguments"] == {"name": "c"}
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=False,
                                               principal=BOB))
    await h.result()
    lines = await log_of(ts_worker.client, h, tmp_path)
    standing = [r for r in of(lines, "ISSUE_RESOLVED") if r["resolution"] ==
                "decided_by_standing"]
    assert [(r["standing_id"], r["standing_set_by"], r["by"]) for r in standing] == [
        (f"sd-{first}", ref(BOB), f"standing decision sd-{first} of Bob"),
        (f"sd-{second}", ref(BOB), f"standing decision sd-{second} of Bob")]
    (revoked,) = of(lines, "STANDING_DECISION_REVOKED")
    assert (revoked["standing_id"], revoked["revoked_by"], revoked["set_by"]) == (
        held[0].standing_id, ref(OPS), ref(BOB))
    set_by_reply = [r["standing_decision"]["standing_id"] for r in of(lines, "ISSUE_RESOLVED")
                    if "standing_decision" in r]
    assert set_by_reply == [f"sd-{first}", f"sd-{second}"]


async def query_after_a_kill(h) -> SessionState:
    """The session's state from the next worker: the first query may go to the killed
    worker's sticky queue and give up (``context canceled``) before Temporal moves it to
    the task queue; a few more tries, each bounded."""
    for attempt in range(5):
        try:
            return await h.query("state", result_type=SessionState,
                                 rpc_timeout=timedelta(seconds=20))
        except RPCError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


async def test_two_people_approve_across_continue_as_new_and_a_worker_kill(
        dev_env, notes, notes_dir, tmp_path, task_queue):
    """On the dev server (the time-skipping server can lose a query sent right after a
    new run), following the latest run; the worker that took the first approval is
    killed (SIGKILL) before the second."""
    (notes_dir / "shared.note").write_text("x")
    rules = [{"tool": "delete_note", "approvals_required": 2, "separation_of_duties": True,
              "name": "two"}]
    client = dev_env.client
    with worker_process(client, task_queue):  # `hitlflow worker`, killed -9 at the end
        first = await start_session(client, session(notes, [
            delete("shared"), {"text": "done", "end": True}], rules=rules), task_queue,
            continue_as_new_after_events=10)
        h = client.get_workflow_handle(first.id, result_type=SessionResult)
        p = (await until_status(h, W)).pending
        assert p.approvals_required == 2
        owner = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                                 principal=ANN))
        assert owner.details[0]["rule"] == "separation_of_duties"
        await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                                   principal=BOB, digest=p.digest))
        snap: LiveSession = await until(h, lambda s: s.pending is not None
                                        and len(s.pending.approvals) == 1)
        assert snap.status == W and calls(notes_dir) == []
        again = await refused_with(h, ReplyInput(request_id=p.request_id, approve=True,
                                                 principal=BOB))
        assert (again.type, again.details[0]["code"]) == (ANSWER_CONFLICT, "already_approved")
    # the worker was killed; the next one replays (the run continued as new meanwhile)
    await forget_worker(client, h)
    async with running_worker(client, task_queue):
        state = await query_after_a_kill(h)
        assert state.continued_runs >= 1
        assert [a.subject for a in state.pending.approvals] == ["bob"]
        await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                                   principal=OPS, digest=p.digest))
        await h.result()
    assert [c["arguments"] for c in calls(notes_dir)] == [{"name": "shared"}]
    lines = await log_of(client, h, tmp_path)
    (recorded,) = of(lines, "ISSUE_APPROVAL_RECORDED")
    assert (recorded["principal"], recorded["approvals_required"], recorded["digest"]) == (
        ref(BOB), 2, p.digest)
    (resolved,) = of(lines, "ISSUE_RESOLVED")
    assert (resolved["principal"], resolved["approvals"]) == (ref(OPS), [ref(BOB), ref(OPS)])
    (opened,) = of(lines, "ISSUE_OPENED")
    assert (opened["approvals_required"], opened["rule"], opened["separation_of_duties"]) == (
        2, "two", True)


async def test_one_rejection_rejects_a_two_person_request(ts_worker, notes, notes_dir,
                                                          task_queue):
    (notes_dir / "keep.note").write_text("x")
    rules = [{"tool": "delete_note", "approvals_required": 2}]
    h = await start_session(ts_worker.client, session(notes, [
        delete("keep"), {"text": "kept", "end": True}], rules=rules), task_queue,
        search_attributes=False)
    p = (await until_status(h, W)).pending
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                               principal=BOB))
    await until(h, lambda s: s.pending is not None and len(s.pending.approvals) == 1)
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=False,
                                               principal=OPS))
    await h.result()
    state = await h.query("state", result_type=SessionState)
    assert state.contracts[0].status.value == "rejected" and calls(notes_dir) == []


async def test_an_approval_is_consumed_once_when_the_worker_dies_before_the_call_starts(
        dev_env, notes, notes_dir, tmp_path, task_queue):
    """The approval reaches a worker that runs the workflow but no activities (it
    schedules the call, then goes away before any worker starts it); the next worker
    runs the call once, and the model asking for the same call again is told it was
    done, under the same idempotency key."""
    (notes_dir / "once.note").write_text("x")
    client = dev_env.client
    cfg = session(notes, [delete("once"), delete("once"), {"text": "done", "end": True}])
    async with running_worker(client, task_queue):
        h = await start_session(client, cfg, task_queue)
        p = (await until_status(h, W)).pending
    async with Worker(client, task_queue=task_queue, workflows=[SessionWorkflow],
                      interceptors=INTERCEPTORS, workflow_runner=SESSION_RUNNER,
                      workflow_failure_exception_types=[Exception]):
        await h.execute_update("reply", ReplyInput(request_id=p.request_id, approve=True,
                                                   principal=BOB, digest=p.digest))

        async def scheduled() -> list[str]:
            return [e.activity_task_scheduled_event_attributes.activity_type.name
                    async for e in h.fetch_history_events()
                    if e.HasField("activity_task_scheduled_event_attributes")]

        while (await scheduled())[-1:] != ["call_tool"]:
            await asyncio.sleep(0.05)
    assert calls(notes_dir) == []  # approved, scheduled, not started
    async with running_worker(client, task_queue):
        result = await h.result()
        state = await h.query("state", result_type=SessionState)
    assert result.status is SessionStatus.SUCCEEDED
    assert [(c["tool"], c["arguments"]) for c in calls(notes_dir)] == [
        ("delete_note", {"name": "once"})]
    assert (await scheduled()).count("call_tool") == 1
    tool = [m.content for m in state.conversation if m.role == "tool"]
    assert len(tool) == 2 and "already" in tool[1].lower()
    assert len(state.replies) == 1  # one approval, one request


async def test_a_plan_step_is_asked_with_its_digest_and_decided_by_a_principal(
        ts_worker, task_queue, tmp_path):
    cfg = SessionConfig.model_validate({"people": PEOPLE, "plan": {"name": "t", "steps": [
        {"name": "check", "run": "echo checked", "verify": "human"},
        {"name": "release?", "gate": True}]}})
    h = await start_session(ts_worker.client, cfg, task_queue, search_attributes=False)
    p = (await until_status(h, W)).pending
    assert p.asked == {"step": 0, "command": "echo checked"} and p.digest == digest_of(p.asked)
    viewer = await refused_with(h, ReplyInput(request_id=p.request_id, choice="approve",
                                              principal=VIC))
    assert viewer.details[0]["rule"] == "role.approver"
    await h.execute_update("reply", ReplyInput(request_id=p.request_id, choice="approve",
                                               principal=BOB, digest=p.digest))
    gate = (await until(h, lambda s: s.status == W and s.pending.request_id != p.request_id)
            ).pending
    assert gate.asked == {"step": 1, "command": None}
    stale = await refused_with(h, ReplyInput(request_id=gate.request_id, choice="approve",
                                             principal=OPS, digest=p.digest))
    assert stale.details[0]["code"] == "stale_digest"
    await h.execute_update("reply", ReplyInput(request_id=gate.request_id, choice="approve",
                                               principal=OPS, digest=gate.digest))
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    lines = await log_of(ts_worker.client, h, tmp_path)
    assert [(r["principal"], r["digest"]) for r in of(lines, "ISSUE_RESOLVED")] == [
        (ref(BOB), p.digest), (ref(OPS), gate.digest)]
    assert [o["digest"] for o in of(lines, "ISSUE_OPENED")] == [p.digest, gate.digest]
    by_person = [(s["trigger"], s["principal"]["subject"]) for s in of(lines, "execution_state")
                 if "principal" in s]
    assert by_person == [("resume", "bob"), ("succeed", "bob"), ("resume", "ops"),
                         ("succeed", "ops")]
