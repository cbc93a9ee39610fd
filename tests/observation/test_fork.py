"""Fork (issue 27): a new session from a point of a session's past, its state rebuilt
from the log and the history (``observation/fork.py``), nothing run again; its log's
line 1 names the parent's line and hash, and ``verify_dir`` checks that link.

Real parts: the dev server, a worker, a real MCP server that records every call it
receives (``tests/fakes/recording_mcp_server.py``), the exporter's own code."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle
from typer.testing import CliRunner

from api.cli.main import app as cli
from api.http.errors import retry_not_ready
from observation.exporter import export_session, ids
from observation.exporter.verify import ChainBrokenError, check_parent, verify_dir
from observation.fork import ForkRefused, rebuild
from observation.telemetry.otel import to_span
from observation.telemetry.project import TelemetryProjector
from tests.support.mcp_servers import received, recording_server
from tests.support.sessions import running_worker, start_session, until
from workflows.config import SessionConfig
from workflows.fork import fork_input
from workflows.messages import EndInput, ForkedFrom, MessageInput, ReplyInput, SessionResult
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER
pytestmark = pytest.mark.slow


def script(folder: Path) -> SessionConfig:
    """Two turns, each a reversible call of the recording server and an answer."""
    return SessionConfig.model_validate({
        "mode": "interactive", "initial_message": "first",
        "agent": {"tools": [recording_server(folder).model_dump()],
                  "llm": {"provider": "scripted", "responses": [
                      {"tool_calls": [{"tool": "put", "arguments": {"name": "a"}}]},
                      {"text": "put a"},
                      {"tool_calls": [{"tool": "put", "arguments": {"name": "b"}}]},
                      {"text": "put b"}]}}})


async def turns_done(h: WorkflowHandle, n: int) -> None:
    await until(h, lambda s: s.status == W and s.pending is not None
                and s.pending.kind == "message" and s.llm_calls == 2 * n)


async def say(h: WorkflowHandle, text: str) -> None:
    # (sent again if it raced the session continuing as new at the wait, as the API does)
    await retry_not_ready(lambda: h.execute_update("send_message", MessageInput(text=text)))


async def finish(client: Client, h: WorkflowHandle) -> None:
    await retry_not_ready(lambda: h.execute_update("end", EndInput(reason="done")))
    await h.result()


def lines(runs: Path, sid: str) -> list[dict]:
    return [json.loads(x) for x in (runs / sid / "events.ndjson").read_bytes().splitlines()]


def wait_point(log: list[dict], n: int) -> int:
    """The seq of the last line of the n-th wait for a message (1-based)."""
    waits = [i for i, x in enumerate(log) if x["type"] == "RUN_STATE_CHANGED"
             and x["payload"]["new_state"] == "waiting_user"
             and x["payload"]["detail"].get("kind") == "message"]
    i = waits[n - 1]
    ref = log[i]["event_id"].rsplit(":", 1)[0]
    while i + 1 < len(log) and log[i + 1]["event_id"].rsplit(":", 1)[0] == ref:
        i += 1
    return log[i]["seq"]


VARYING = re.compile(r"\"(latency|duration)_ms\": [0-9]+|[0-9a-f]{12,64}|"
                     r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z?|[0-9]+\.[0-9]+|[0-9a-f-]{36}")


def shape(log: list[dict], *same: str) -> list[tuple[str, str]]:
    """Each line's type and payload, without what differs between two sessions run
    alike: ``same`` (their ids, run ids, tool folders), hashes, times, durations."""
    out = []
    for x in log:
        text = json.dumps(x["payload"], sort_keys=True)
        for i, value in enumerate(same):
            text = text.replace(value, f"<{i}>")
        out.append((x["type"], VARYING.sub("~", text)))
    return out


async def test_a_fork_reuses_the_past_runs_the_rest_and_links_to_its_parent(
        dev_env, tmp_path):
    client, runs = dev_env.client, tmp_path / "runs"
    parent_dir, control_dir = tmp_path / "parent", tmp_path / "control"
    parent_dir.mkdir(), control_dir.mkdir()
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        parent = await start_session(client, script(parent_dir), tq)
        control = await start_session(client, script(control_dir), tq)
        for h in (parent, control):
            await turns_done(h, 1)
        await export_session(client, parent.id, runs)
        at = wait_point(lines(runs, parent.id), 1)
        before = (runs / parent.id / "events.ndjson").read_bytes()

        rebuilt = await rebuild(client, runs, parent.id, at, SessionWorkflow)
        assert [m.content for m in rebuilt.state.conversation if m.role == "assistant"][-1:] \
            == ["put a"]
        fork_id = f"s-{uuid.uuid4().hex[:12]}"
        start = fork_input(rebuilt.state, fork_id, ForkedFrom(
            session_id=parent.id, seq=at, line_hash=rebuilt.line_hash), owner="someone",
            message="second, otherwise")
        fork = await client.start_workflow("SessionWorkflow", start, id=fork_id,
                                           task_queue=tq, result_type=SessionResult)
        await turns_done(fork, 2)
        for h in (parent, control):
            await say(h, "second")
            await turns_done(h, 2)
        for h in (fork, parent, control):
            await finish(client, h)
        state = await fork.query("state")
    # nothing before the fork point ran again: one `put a` (the parent's; the fork
    # shares its tool server), then `put b` by each of them
    calls = received(parent_dir)
    assert sorted(c["name"] for c in calls) == ["a", "b", "b"], calls
    assert len({c["key"] for c in calls}) == 3
    assert [c["name"] for c in received(control_dir)] == ["a", "b"]
    assert state["llm_calls"] == 4 and state["session_id"] == fork.id
    said = [m["content"] for m in state["conversation"] if m["role"] == "user"]
    assert said == ["first", "second, otherwise"]
    for sid in (fork.id, parent.id, control.id):
        await export_session(client, sid, runs)
    flog = lines(runs, fork.id)
    assert flog[0]["type"] == "SESSION_FORKED" and flog[1]["type"] == "RUN_CREATED"
    assert flog[0]["payload"] == {"session_id": fork.id, "parent_session_id": parent.id,
                                  "parent_seq": at, "parent_line_hash": rebuilt.line_hash}
    verify_dir(runs / fork.id)  # with the link to the parent
    # telemetry links the two: the fork's session run names the parent's, and its span
    # links to the parent session's span
    (root,) = [r for r in TelemetryProjector(fork.id).apply_all(flog).ordered()
               if r.parent_run_id is None]
    assert root.attributes["forked_from_run_id"] == f"{parent.id}/session"
    assert root.attributes["forked_from_seq"] == at
    (link,) = to_span(root).links
    assert (link.context.trace_id, link.context.span_id) == (
        int(ids.trace_id(parent.id), 16), int(ids.session_span(parent.id), 16))
    (proot,) = [r for r in TelemetryProjector(parent.id).apply_all(lines(runs, parent.id))
                .ordered() if r.parent_run_id is None]
    assert "forked_from_run_id" not in proot.attributes and not to_span(proot).links
    # the parent is untouched: what it had is still there, byte for byte, and its log
    # is the control's, but for ids and times
    assert (runs / parent.id / "events.ndjson").read_bytes().startswith(before)
    plog, clog = lines(runs, parent.id), lines(runs, control.id)
    assert len(plog) > at + 10
    assert shape(plog, parent.id, plog[0]["payload"]["temporal_run_id"], str(parent_dir)) \
        == shape(clog, control.id, clog[0]["payload"]["temporal_run_id"], str(control_dir))

    # the points a fork may not start at: refused, naming the nearest fork points
    second = wait_point(plog, 2)
    with pytest.raises(ForkRefused, match=r"inside a turn.*nearest fork points: "
                       rf"{at}, {second}") as refused:
        await rebuild(client, runs, parent.id, at - 1, SessionWorkflow)
    assert refused.value.status == 409 and refused.value.nearest[:2] == [at, second]
    for inside in (at + 1, 1, 2):  # line 1: before the first workflow task
        with pytest.raises(ForkRefused, match="inside a turn") as refused:
            await rebuild(client, runs, parent.id, inside, SessionWorkflow)
        assert refused.value.status == 409
    with pytest.raises(ForkRefused, match=rf"past the end of the log \({len(plog)} lines"
                       ) as refused:
        await rebuild(client, runs, parent.id, len(plog) + 1, SessionWorkflow)
    assert refused.value.status == 409
    with pytest.raises(ForkRefused, match="has no log") as refused:
        await rebuild(client, runs, "s-nosuchsession", 1, SessionWorkflow)
    assert refused.value.status == 404
    assert (await rebuild(client, runs, parent.id, second, SessionWorkflow)).state.llm_calls \
        == 4
    # a person's message stands for the wait it answered, its text to be replaced
    said = [x["seq"] for x in plog if x["type"] == "message"]
    assert [plog[n - 1]["payload"]["text"] for n in said] == ["first", "second"]
    at_message = await rebuild(client, runs, parent.id, said[1], SessionWorkflow)
    assert (at_message.seq, at_message.message, at_message.line_hash) == (
        at, "second", rebuilt.line_hash)
    with pytest.raises(ForkRefused, match=rf"line {said[0]} is a message the session did "
                       "not wait for") as refused:
        await rebuild(client, runs, parent.id, said[0], SessionWorkflow)
    assert refused.value.status == 409

    # a parent line after the fork point changed: the parent's log no longer verifies,
    # the fork's link still does; one at or before it: the fork's verify fails
    log = runs / parent.id / "events.ndjson"
    good = log.read_bytes()
    raw = good.splitlines(keepends=True)
    raw[at] = raw[at].replace(b'"seq":', b'"seq": ', 1)
    log.write_bytes(b"".join(raw))
    with pytest.raises(ChainBrokenError):
        verify_dir(runs / parent.id)
    verify_dir(runs / fork.id)
    for k in (at, 1):
        raw = good.splitlines(keepends=True)
        raw[k - 1] = raw[k - 1].replace(b'"ts":"', b'"ts":"1', 1)
        log.write_bytes(b"".join(raw))
        with pytest.raises(ChainBrokenError, match=rf"line 1: the parent session {parent.id}"
                           rf"'s log does not verify up to the fork point, line {at}: "
                           rf"EVENT_CHAIN_BROKEN: line {k}: "):
            verify_dir(runs / fork.id)
    log.unlink()
    with pytest.raises(ChainBrokenError, match="the fork's link cannot be checked"):
        verify_dir(runs / fork.id)
    log.write_bytes(good)
    verify_dir(runs / fork.id)
    out = CliRunner().invoke(cli, ["log", "verify", str(runs / fork.id)])
    assert out.exit_code == 0, out.output
    assert f"forked from {parent.id} at line {at}: the parent's log verifies" in out.output
    log.write_bytes(good.replace(b'"put a"', b'"put A"', 1))
    out = CliRunner().invoke(cli, ["log", "verify", str(runs / fork.id)])
    assert out.exit_code == 1 and "does not verify up to the fork point" in out.output
    log.write_bytes(good)
    assert verify_dir(runs / fork.id, parent=False).events == len(flog)
    # a parent log rewritten whole (its chain consistent again) no longer has the hash
    # the fork recorded; and a lineage that names no parent is refused
    lineage = {**flog[0]["payload"], "parent_line_hash": "0" * 64}
    with pytest.raises(ChainBrokenError, match=rf"line {at}'s line_hash is not the one the "
                       "fork recorded"):
        check_parent(runs / fork.id, lineage)
    for broken in ({**lineage, "parent_session_id": "../x"}, {**lineage, "parent_seq": 0}):
        with pytest.raises(ChainBrokenError, match="does not name its parent"):
            check_parent(runs / fork.id, broken)


# -- the world may have changed: what the parent did after the fork point ---------------


def deleting(folder: Path) -> SessionConfig:
    """One answer, then on the next message an irreversible ``delete`` that a rule
    allows without asking, then a last answer."""
    return SessionConfig.model_validate({
        "mode": "interactive", "initial_message": "first",
        "rules": [{"name": "deletes-ok", "tool": "delete", "decision": "allow"}],
        "agent": {"tools": [recording_server(folder).model_dump()],
                  "llm": {"provider": "scripted", "responses": [
                      {"text": "ready"},
                      {"tool_calls": [{"tool": "delete", "arguments": {"name": "x"}}]},
                      {"text": "done"}]}}})


async def test_a_fork_asks_before_it_repeats_what_its_parent_did_after_the_point(
        dev_env, tmp_path):
    client, runs, folder = dev_env.client, tmp_path / "runs", tmp_path / "tools"
    folder.mkdir()
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        parent = await start_session(client, deleting(folder), tq)
        await until(parent, lambda s: s.status == W and s.llm_calls == 1)
        await say(parent, "delete x")
        await until(parent, lambda s: s.status == W and s.llm_calls == 3)
        assert [c["name"] for c in received(folder)] == ["x"]  # the rule let it run
        await export_session(client, parent.id, runs)
        plog = lines(runs, parent.id)
        at = wait_point(plog, 1)
        rebuilt = await rebuild(client, runs, parent.id, at, SessionWorkflow)
        (done,) = rebuilt.parent_actions
        started = next(x for x in plog if x["type"] == "TOOL_CALL_STARTED")
        assert (done.tool, done.seq, done.at) == ("delete", started["seq"], started["ts"])
        assert done.seq > at
        fork_id = f"s-{uuid.uuid4().hex[:12]}"
        start = fork_input(rebuilt.state, fork_id, ForkedFrom(
            session_id=parent.id, seq=at, line_hash=rebuilt.line_hash), owner="someone",
            message="delete x", parent_actions=rebuilt.parent_actions)
        fork = await client.start_workflow("SessionWorkflow", start, id=fork_id,
                                           task_queue=tq, result_type=SessionResult)
        asked = await until(fork, lambda s: s.status == W and s.pending is not None
                            and s.pending.kind == "approval")
        p = asked.pending
        assert p is not None and p.reason_code == "ran_in_parent"
        assert p.prompt.startswith(f"This already ran in the parent session {parent.id} "
                                   f"at {done.at} (its log's line {done.seq}); run it again "
                                   "here? Approve irreversible action: ")
        await fork.execute_update("reply", ReplyInput(request_id=p.request_id, approve=False))
        await until(fork, lambda s: s.status == W and s.llm_calls == 3)
        state = await fork.query("state")
        await finish(client, fork)
        await finish(client, parent)
    # declined: it did not run again
    assert [c["name"] for c in received(folder)] == ["x"]
    (contract,) = [c for c in state["contracts"] if c["action_detail"].get("tool") == "delete"]
    assert contract["status"] == "rejected", contract


async def test_a_fork_point_in_a_continued_run(dev_env, tmp_path):
    """The point's line names a later Temporal run (after continue-as-new): that run's
    history alone is replayed, from the state the run was started with."""
    client, runs = dev_env.client, tmp_path / "runs"
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    config = SessionConfig.model_validate({
        "mode": "interactive", "initial_message": "1",
        "agent": {"llm": {"provider": "scripted", "responses": [
            {"text": f"answer {n}"} for n in range(1, 6)]}}})
    async with running_worker(client, tq):
        parent = await start_session(client, config, tq, continue_as_new_after_events=10)
        for n in range(1, 4):
            await until(parent, lambda s, n=n: s.status == W and s.llm_calls == n)
            await say(parent, str(n + 1))
        await until(parent, lambda s: s.status == W and s.llm_calls == 4)
        await export_session(client, parent.id, runs)
        plog = lines(runs, parent.id)
        at = wait_point(plog, 3)
        assert plog[at - 1]["event_id"].split(":")[0] != plog[0]["event_id"].split(":")[0]
        assert any(x["type"] == "RUN_CONTINUED_AS_NEW" for x in plog[:at])
        rebuilt = await rebuild(client, runs, parent.id, at, SessionWorkflow)
        assert rebuilt.run_id != plog[0]["payload"]["temporal_run_id"]
        assert rebuilt.state.llm_calls == 3
        fork_id = f"s-{uuid.uuid4().hex[:12]}"
        fork = await client.start_workflow("SessionWorkflow", fork_input(
            rebuilt.state, fork_id, ForkedFrom(session_id=parent.id, seq=at,
                                               line_hash=rebuilt.line_hash),
            owner="someone", message="4, otherwise"), id=fork_id, task_queue=tq,
            result_type=SessionResult)
        snap = await until(fork, lambda s: s.status == W and s.llm_calls == 4)
        assert snap.last_text == "answer 4"
        state = await fork.query("state")
        for h in (fork, parent):
            await finish(client, h)
    said = [m["content"] for m in state["conversation"] if m["role"] == "user"]
    assert said[-2:] == ["3", "4, otherwise"]
    await export_session(client, fork.id, runs)
    verify_dir(runs / fork.id)


async def test_a_fork_in_the_middle_of_a_fifty_turn_session(dev_env, tmp_path):
    """50 turns, each a recorded call and an answer; a fork at turn 25's end runs only
    what comes after it (turn 26's call once more), and its log links to the parent's."""
    client, runs, folder = dev_env.client, tmp_path / "runs", tmp_path / "tools"
    folder.mkdir()
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    turns = 50
    responses = []
    for n in range(1, turns + 1):
        responses += [{"tool_calls": [{"tool": "put", "arguments": {"name": f"n{n}"}}]},
                      {"text": f"put n{n}"}]
    config = SessionConfig.model_validate({
        "mode": "interactive", "initial_message": "turn 1",
        "agent": {"tools": [recording_server(folder).model_dump()],
                  "llm": {"provider": "scripted", "responses": responses}}})
    async with running_worker(client, tq):
        parent = await start_session(client, config, tq)
        for n in range(1, turns + 1):
            await turns_done(parent, n)
            if n < turns:
                await say(parent, f"turn {n + 1}")
        await export_session(client, parent.id, runs)
        at = wait_point(lines(runs, parent.id), 25)
        rebuilt = await rebuild(client, runs, parent.id, at, SessionWorkflow)
        assert rebuilt.state.llm_calls == 50
        fork_id = f"s-{uuid.uuid4().hex[:12]}"
        fork = await client.start_workflow("SessionWorkflow", fork_input(
            rebuilt.state, fork_id, ForkedFrom(session_id=parent.id, seq=at,
                                               line_hash=rebuilt.line_hash),
            owner="someone", message="turn 26, again"), id=fork_id, task_queue=tq,
            result_type=SessionResult)
        await turns_done(fork, 26)
        for h in (fork, parent):
            await finish(client, h)
    names = [c["name"] for c in received(folder)]
    assert names == [f"n{n}" for n in range(1, turns + 1)] + ["n26"]
    await export_session(client, fork.id, runs)
    flog = lines(runs, fork.id)
    assert flog[0]["type"] == "SESSION_FORKED" and flog[0]["payload"]["parent_seq"] == at
    assert verify_dir(runs / fork.id).forked_from == (parent.id, at)


async def test_a_plan_session_forks_at_a_gate_and_resumes_the_plan_there(dev_env, tmp_path):
    """A plan forked at the gate before step 2 resumes the plan at step 2: steps 0 and
    1 (their commands record each run) do not run again, the fork asks at the gate in
    its own log (self-contained: it verifies and exports), and its approval runs step
    3 once in the fork; the parent still waits at its gate, untouched."""
    client, runs = dev_env.client, tmp_path / "runs"
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    ran = tmp_path / "ran"
    config = SessionConfig.model_validate({"plan": {"name": "release", "steps": [
        {"name": "build", "run": f"echo build >> {ran}"},
        {"name": "test", "run": f"echo test >> {ran}"},
        {"name": "release?", "gate": True},
        {"name": "publish", "run": f"echo publish >> {ran}"}]}})

    def at_gate(s) -> bool:
        return s.status == W and s.pending is not None and s.pending.kind == "step"

    async with running_worker(client, tq):
        parent = await start_session(client, config, tq)
        await until(parent, at_gate)
        await export_session(client, parent.id, runs)
        plog = lines(runs, parent.id)
        waits = [x["seq"] for x in plog if x["type"] == "RUN_STATE_CHANGED"
                 and x["payload"]["new_state"] == "waiting_user"]
        assert len(waits) == 1
        at = waits[0]
        while at < len(plog) and plog[at]["event_id"].rsplit(":", 1)[0] == \
                plog[waits[0] - 1]["event_id"].rsplit(":", 1)[0]:
            at += 1  # the last line of the task that began the wait
        # a step in flight is not a fork point: the boundaries before steps 0 and 1
        # (test_fork_plan.py) and the gate are named
        started = next(x["seq"] for x in plog if x["type"] == "WORK_ITEM_QUEUED")
        with pytest.raises(ForkRefused) as refused:
            await rebuild(client, runs, parent.id, started, SessionWorkflow)
        boundaries = [x["seq"] for x in plog if x["type"] == "TaskStarted" or (
            x["type"] == "StepCompleted" and x["payload"]["step"] == 0)]  # 1: the gate's
        assert refused.value.status == 409 and refused.value.nearest == [*boundaries, at]
        rebuilt = await rebuild(client, runs, parent.id, at, SessionWorkflow)
        lineage = ForkedFrom(session_id=parent.id, seq=at, line_hash=rebuilt.line_hash)
        with pytest.raises(ValueError, match="takes no message"):
            fork_input(rebuilt.state, "s-x", lineage, owner="o", message="hi")
        fork_id = f"s-{uuid.uuid4().hex[:12]}"
        fork = await client.start_workflow("SessionWorkflow", fork_input(
            rebuilt.state, fork_id, lineage, owner="someone"), id=fork_id, task_queue=tq,
            result_type=SessionResult)
        snap = await until(fork, at_gate)
        assert snap.pending.prompt.startswith("gate: release?")
        assert ran.read_text().split() == ["build", "test"]  # nothing ran again
        await fork.execute_update("reply", ReplyInput(
            request_id=snap.pending.request_id, choice="approve"))
        assert (await fork.result()).status is SessionStatus.SUCCEEDED
        assert ran.read_text().split() == ["build", "test", "publish"]
        assert (await until(parent, at_gate)).pending.request_id != snap.pending.request_id
        await export_session(client, fork.id, runs)
        flog = lines(runs, fork.id)
        assert [flog[0]["type"], flog[1]["type"]] == ["SESSION_FORKED", "RUN_CREATED"]
        plan_lines = [(x["type"], x["payload"].get("step")) for x in flog
                      if x["type"] in ("TaskStarted", "StepCompleted", "StepWaiting",
                                       "StepApproved", "TaskStopped")]
        assert plan_lines == [("StepWaiting", 2), ("StepApproved", 2),
                              ("StepCompleted", 3), ("TaskStopped", None)], plan_lines
        verify_dir(runs / fork.id)
        check_parent(runs / fork.id, flog[0]["payload"])
        await parent.execute_update("reply", ReplyInput(
            request_id=(await until(parent, at_gate)).pending.request_id, choice="approve"))
        assert (await parent.result()).status is SessionStatus.SUCCEEDED
    assert ran.read_text().split() == ["build", "test", "publish", "publish"]
