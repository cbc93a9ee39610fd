"""A plan session forks at any step boundary (issue 27, seed 002: ``state = replay(log)``):
before step ``k`` where the plan goes on at once, or where it waits for a person at a
step (a human verify, a failed step; the gate is in ``test_fork.py``). The fork resumes
the plan at step ``k``: the steps' commands append their name to a file, so a step that
ran again would show. Real parts: the dev server, a worker, the exporter's own code."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from api.http.errors import retry_not_ready
from observation.exporter import export_session
from observation.exporter.verify import check_parent, verify_dir
from observation.fork import ForkRefused, fork_points, rebuild
from tests.observation.test_fork import lines
from tests.support.sessions import running_worker, start_session, until
from workflows.config import SessionConfig
from workflows.fork import fork_input
from workflows.messages import ForkedFrom, MessageInput, ReplyInput, SessionResult
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER
pytestmark = pytest.mark.slow
PLAN_LINES = ("TaskStarted", "StepCompleted", "StepWaiting", "StepApproved", "StepSkipped",
              "StepReset", "TaskStopped")


def plan_config(ran: Path, flag: Path) -> SessionConfig:
    """Four steps: a build, a test a person verifies, a step that fails until ``flag``
    exists (a person decides), a publish."""
    return SessionConfig.model_validate({"plan": {"name": "release", "steps": [
        {"name": "build", "run": f"echo build >> {ran}"},
        {"name": "test", "run": f"echo test >> {ran}; echo all green", "verify": "human"},
        {"name": "flaky", "run": f"echo flaky >> {ran}; test -e {flag}",
         "on_fail": "human"},
        {"name": "publish", "run": f"echo publish >> {ran}"}]}})


def asked(s) -> bool:
    return s.status == W and s.pending is not None and s.pending.kind == "step"


async def drive(h: WorkflowHandle, answers: list[str]) -> list[str]:
    """Answer each step request the session asks with the next of ``answers``, to its
    end; the prompts it asked. A reply may race the session continuing as new at the
    wait (the server then aborts it, not applied): sent again, as the API does."""
    prompts = []
    for choice in answers:
        snap = await until(h, asked)
        prompts.append(snap.pending.prompt)
        reply = ReplyInput(request_id=snap.pending.request_id, choice=choice)
        await retry_not_ready(lambda r=reply: h.execute_update("reply", r))
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    return prompts


def end_of_wait(log: list[dict], prompt: str) -> int:
    """The last line of the workflow task in which the plan began waiting at ``prompt``."""
    i = next(i for i, x in enumerate(log) if x["type"] == "RUN_STATE_CHANGED"
             and str(x["payload"]["detail"].get("prompt", "")).startswith(prompt))
    ref = log[i]["event_id"].rsplit(":", 1)[0]
    while i + 1 < len(log) and log[i + 1]["event_id"].rsplit(":", 1)[0] == ref:
        i += 1
    return log[i]["seq"]


def plan_seq(log: list[dict], kind: str, step: int, nth: int = 0) -> int:
    return [x["seq"] for x in log if x["type"] == kind
            and x["payload"].get("step") == step][nth]


async def test_a_plan_forks_at_each_step_boundary_and_resumes_there(dev_env, tmp_path):
    client: Client = dev_env.client
    runs, ran, flag = tmp_path / "runs", tmp_path / "ran", tmp_path / "flag"
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        parent = await start_session(client, plan_config(ran, flag), tq)
        await until(parent, asked)  # verify step 1
        await parent.execute_update("reply", ReplyInput(
            request_id=(await until(parent, asked)).pending.request_id, choice="approve"))
        await until(parent, lambda s: asked(s) and s.pending.prompt.startswith("on_fail"))
        flag.touch()  # from now on step 2 passes
        await drive(parent, ["reset"])
        assert ran.read_text().split() == ["build", "test", "flaky", "flaky", "publish"]
        await export_session(client, parent.id, runs)
        plog = lines(runs, parent.id)
        before = (runs / parent.id / "events.ndjson").read_bytes()
        points = {
            # the boundary before step 1 (step 0 done) and before step 2 (1 approved)
            "before 1": plan_seq(plog, "StepCompleted", 0),
            "before 2": plan_seq(plog, "StepApproved", 1),
            "verify 1": end_of_wait(plog, "verify_human"),
            "failed 2": end_of_wait(plog, "on_fail_human"),
            "start": plan_seq(plog, "TaskStarted", None)}
        found = fork_points(plog)
        assert set(points.values()) <= set(found), (points, found)

        # inside step 1's run (its contract's lines after the boundary): refused, the
        # boundary named; a failed run is not a boundary either
        for inside, named in ((points["before 1"] + 1, points["before 1"]),
                              (plan_seq(plog, "StepCompleted", 2), points["failed 2"])):
            with pytest.raises(ForkRefused) as refused:
                await rebuild(client, runs, parent.id, inside, SessionWorkflow)
            assert refused.value.status == 409, inside
            assert named in refused.value.nearest, (inside, refused.value.nearest)

        async def fork_at(seq: int) -> WorkflowHandle:
            rebuilt = await rebuild(client, runs, parent.id, seq, SessionWorkflow)
            lineage = ForkedFrom(session_id=parent.id, seq=seq, line_hash=rebuilt.line_hash)
            with pytest.raises(ValueError, match="takes no message"):
                fork_input(rebuilt.state, "s-x", lineage, owner="o", message="hi")
            fid = f"s-{uuid.uuid4().hex[:12]}"
            return await client.start_workflow(
                "SessionWorkflow", fork_input(rebuilt.state, fid, lineage, owner="someone"),
                id=fid, task_queue=tq, result_type=SessionResult)

        async def check(seq: int, answers: list[str], runs_again: list[str],
                        plan_lines: list[tuple[str, int | None]]) -> list[str]:
            had = ran.read_text().split()
            fork = await fork_at(seq)
            prompts = await drive(fork, answers)
            assert ran.read_text().split() == had + runs_again, seq  # nothing before k
            await export_session(client, fork.id, runs)
            flog = lines(runs, fork.id)
            assert [flog[0]["type"], flog[1]["type"]] == ["SESSION_FORKED", "RUN_CREATED"]
            assert flog[0]["payload"]["parent_seq"] == seq
            got = [(x["type"], x["payload"].get("step")) for x in flog
                   if x["type"] in PLAN_LINES]
            assert got == plan_lines, (seq, got)
            verify_dir(runs / fork.id)  # self-contained, and linked to the parent
            check_parent(runs / fork.id, flog[0]["payload"])
            return prompts

        done = [("StepCompleted", 3), ("TaskStopped", None)]
        # before step 1: step 1 runs in the fork (and asks its verify), 0 does not
        prompts = await check(points["before 1"], ["approve"], ["test", "flaky", "publish"], [
            ("StepCompleted", 1), ("StepWaiting", 1), ("StepApproved", 1),
            ("StepCompleted", 2), *done])
        assert prompts[0].startswith("verify_human: verify step 1")
        # at step 1's verify: the fork asks it again with what the step printed; no run
        prompts = await check(points["verify 1"], ["approve"], ["flaky", "publish"], [
            ("StepWaiting", 1), ("StepApproved", 1), ("StepCompleted", 2), *done])
        assert prompts[0].startswith("verify_human: verify step 1")
        # at step 2's failure: asked again; skipped, it does not run in the fork
        prompts = await check(points["failed 2"], ["skip"], ["publish"], [
            ("StepWaiting", 2), ("StepSkipped", 2), *done])
        assert prompts[0].startswith("on_fail_human: step 2 failed")
        # before step 2 (after the person approved step 1): step 2 runs, passes now
        await check(points["before 2"], [], ["flaky", "publish"],
                    [("StepCompleted", 2), *done])
        # before step 0: the whole plan again, nothing asked of what the parent did
        await check(points["start"], ["approve"], ["build", "test", "flaky", "publish"], [
            ("StepCompleted", 0), ("StepCompleted", 1), ("StepWaiting", 1),
            ("StepApproved", 1), ("StepCompleted", 2), *done])
    await export_session(client, parent.id, runs)
    assert (runs / parent.id / "events.ndjson").read_bytes() == before  # untouched


async def test_a_plan_forks_and_is_interrupted_after_continue_as_new(dev_env, tmp_path):
    """A plan that continues as new at each wait: it is interrupted in a later run
    (the held read-only step is cut, the person skips it), and forks at a boundary
    and at a gate of later runs resume there (only the run the line names is
    replayed, from the state it was started with)."""
    client: Client = dev_env.client
    runs, ran, hold = tmp_path / "runs", tmp_path / "ran", tmp_path / "hold"
    config = SessionConfig.model_validate({"plan": {"name": "long", "steps": [
        {"name": "s0", "run": f"echo s0 >> {ran}"},
        {"name": "g1", "gate": True},
        {"name": "s2", "run": f"echo s2 >> {ran}"},
        {"name": "g3", "gate": True},
        {"name": "s4", "safety": "read_only",
         "run": f"echo s4 >> {ran}; while [ ! -e {hold} ]; do sleep 0.05; done"},
        {"name": "s5", "run": f"echo s5 >> {ran}"}]}})
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        parent = await start_session(client, config, tq, continue_as_new_after_events=10)
        for _ in range(2):  # the gates
            snap = await until(parent, asked)
            reply = ReplyInput(request_id=snap.pending.request_id, choice="approve")
            await retry_not_ready(lambda r=reply: parent.execute_update("reply", r))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while "s4" not in (ran.read_text().split() if ran.exists() else []):
            assert loop.time() < deadline, "s4 never started"
            await asyncio.sleep(0.02)
        await parent.execute_update("send_message", MessageInput(
            text="not s4", if_busy="interrupt"))
        snap = await until(parent, asked)
        assert "step 4 was cut" in snap.pending.prompt, snap.pending.prompt
        hold.touch()
        await drive(parent, ["skip"])
        assert ran.read_text().split() == ["s0", "s2", "s4", "s5"]
        await export_session(client, parent.id, runs)
        plog = lines(runs, parent.id)
        verify_dir(runs / parent.id)
        run_of = {x["seq"]: x["event_id"].split(":")[0] for x in plog}
        first_run = run_of[1]
        (cut,) = [x for x in plog if x["type"] == "TURN_INTERRUPTED"]
        assert cut["payload"]["cut"]["step"] == 4 and run_of[cut["seq"]] != first_run
        before_4 = plan_seq(plog, "StepApproved", 3)
        gate_3 = end_of_wait(plog, "gate: g3")
        assert run_of[before_4] != first_run and run_of[gate_3] != first_run
        assert len(set(run_of.values())) >= 3, "the plan did not continue as new"
        # the approval of g3 ended its run (continue-as-new): step 4 began the next
        after_4 = [x["type"] for x in plog[before_4:]]
        assert after_4.index("RUN_CONTINUED_AS_NEW") < after_4.index("WORK_ITEM_QUEUED")
        assert {before_4, gate_3} <= set(fork_points(plog)), fork_points(plog)
        for seq, answers, again in ((before_4, [], ["s4", "s5"]),
                                    (gate_3, ["approve"], ["s4", "s5"])):
            had = ran.read_text().split()
            rebuilt = await rebuild(client, runs, parent.id, seq, SessionWorkflow)
            lineage = ForkedFrom(session_id=parent.id, seq=seq, line_hash=rebuilt.line_hash)
            fid = f"s-{uuid.uuid4().hex[:12]}"
            fork = await client.start_workflow(
                "SessionWorkflow", fork_input(rebuilt.state, fid, lineage, owner="someone"),
                id=fid, task_queue=tq, result_type=SessionResult)
            prompts = await drive(fork, answers)
            assert [p.split(":")[0] for p in prompts] == ["gate"] * len(answers), prompts
            assert ran.read_text().split() == had + again, seq
            await export_session(client, fork.id, runs)
            verify_dir(runs / fork.id)
            flog = lines(runs, fork.id)
            check_parent(runs / fork.id, flog[0]["payload"])
