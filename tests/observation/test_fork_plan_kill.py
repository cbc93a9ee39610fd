"""A plan fork and a plan interrupt under a worker kill at a random point (issue 27):
the worker is its own process (``hitlflow worker``), killed with SIGKILL when the
session's history reaches a length drawn at random (the seed is in every failure
message); a worker in the test's process takes over. Each step's command appends its
name to a file, so nothing may run twice and nothing may be lost: the fork runs each
step from its fork point once and completes; the interrupt stops the plan once, its
message is in the log once, and the step the person skips never runs.

A step under way when its worker dies has an unknown outcome: the plan asks the person
(``on_fail: human``), who answers from the file what the step did (it ran: approve; it
did not: reset, and it runs)."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from observation.exporter import export_session
from observation.exporter.verify import check_parent, verify_dir
from observation.fork import rebuild
from tests.observation.test_fork import lines
from tests.observation.test_fork_kill import history_length, kill_point
from tests.observation.test_fork_plan import end_of_wait, plan_seq
from tests.support.sessions import (
    QUICK,
    forget_worker,
    running_worker,
    start_session,
    until,
    worker_process,
)
from workflows.config import SessionConfig
from workflows.fork import fork_input
from workflows.messages import ForkedFrom, MessageInput, ReplyInput, SessionResult
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

S = SessionStatus
pytestmark = pytest.mark.slow
STEPS = ["s0", "s1", "s2", "s3"]


def runs_of(ran: Path) -> list[str]:
    return ran.read_text().split() if ran.exists() else []


def asked(s) -> bool:
    return s.status == S.WAITING_USER and s.pending is not None and s.pending.kind == "step"


async def drive(h: WorkflowHandle, ran: Path, had: int, why: str) -> None:
    """Answer the plan to its end: approve a verify; a step whose outcome is unknown
    (its worker died) is approved if its command ran in this session (the file says
    so), else reset (it runs)."""
    while True:
        snap = await until(h, lambda s: asked(s) or s.status in (S.SUCCEEDED, S.FAILED))
        if not asked(snap):
            assert snap.status is S.SUCCEEDED, (why, snap)
            return
        prompt = snap.pending.prompt
        step = STEPS[int(prompt.split("step ", 1)[1].split()[0].rstrip(":"))]
        choice = "approve" if prompt.startswith("verify_human") or \
            step in runs_of(ran)[had:] else "reset"
        answered = snap.pending.request_id
        await h.execute_update("reply", ReplyInput(request_id=answered, choice=choice))
        await until(h, lambda s, answered=answered: s.pending is None
                    or s.pending.request_id != answered)


async def test_a_plan_fork_under_a_worker_kill_runs_each_step_once(dev_env, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    client: Client = dev_env.client
    runs, ran = tmp_path / "runs", tmp_path / "ran"
    config = SessionConfig.model_validate({"plan": {"name": "p", "steps": [
        {"name": n, "run": f"echo {n} >> {ran}", "on_fail": "human",
         **({"verify": "human"} if n == "s1" else {})} for n in STEPS]}})
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        parent = await start_session(client, config, tq, timing=QUICK)
        await drive(parent, ran, 0, "the parent")
    assert runs_of(ran) == STEPS
    await export_session(client, parent.id, runs)
    plog = lines(runs, parent.id)
    where = rng.choice(["before s1", "at s1's verify", "before s2"])
    # the point, the steps the fork runs, and those it completes or approves
    seq, rest, settled = {
        "before s1": (plan_seq(plog, "StepCompleted", 0), STEPS[1:], [1, 2, 3]),
        "at s1's verify": (end_of_wait(plog, "verify_human"), STEPS[2:], [1, 2, 3]),
        "before s2": (plan_seq(plog, "StepApproved", 1), STEPS[2:], [2, 3])}[where]
    rebuilt = await rebuild(client, runs, parent.id, seq, SessionWorkflow)
    fork_id = f"s-{uuid.uuid4().hex[:12]}"
    start = fork_input(rebuilt.state, fork_id, ForkedFrom(
        session_id=parent.id, seq=seq, line_hash=rebuilt.line_hash),
        owner="someone").model_copy(update={"timing": QUICK})
    target = rng.randint(3, 30)
    with worker_process(client, tq):
        fork = await client.start_workflow("SessionWorkflow", start, id=fork_id,
                                           task_queue=tq, result_type=SessionResult)
        rested = asyncio.ensure_future(until(fork, lambda s: asked(s) or s.status in (
            S.SUCCEEDED, S.FAILED)))
        try:
            at_kill = await kill_point(fork, target, rested)
        finally:
            rested.cancel()
    why = f"seed {seed}: forked {where}, killed at {at_kill} events (target {target})"
    await forget_worker(client, fork)
    async with running_worker(client, tq):
        await drive(fork, ran, len(STEPS), why)
    assert runs_of(ran) == STEPS + rest, why  # nothing before the point, each after once
    await export_session(client, fork.id, runs)
    verify_dir(runs / fork.id)
    flog = lines(runs, fork.id)
    assert flog[0]["type"] == "SESSION_FORKED" and flog[0]["payload"]["parent_seq"] == seq
    check_parent(runs / fork.id, flog[0]["payload"])
    done = [x["payload"]["step"] for x in flog if x["type"] == "StepApproved" or (
        x["type"] == "StepCompleted" and x["payload"]["exit_code"] == 0)]
    assert sorted(set(done)) == settled, (why, done)  # nothing lost, nothing before


async def test_a_plan_interrupt_under_a_worker_kill_stops_once_and_runs_nothing_twice(
        dev_env, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    before = rng.random() < 0.5  # the kill before the interrupt is sent, or after
    client: Client = dev_env.client
    runs, ran, hold = tmp_path / "runs", tmp_path / "ran", tmp_path / "hold"
    config = SessionConfig.model_validate({"plan": {"name": "p", "steps": [
        {"name": "long", "safety": "read_only", "on_fail": "human",
         "run": f"echo start >> {ran}; while [ ! -e {hold} ]; do sleep 0.05; done"},
        {"name": "next", "run": f"echo next >> {ran}"}]}})
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    interrupt = MessageInput(text="stop there", if_busy="interrupt")
    update: asyncio.Future | None = None
    at_kill, target = 0, 0
    try:
        with worker_process(client, tq):
            h = await start_session(client, config, tq, search_attributes=False,
                                    timing=QUICK)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while "start" not in runs_of(ran):  # step 0 runs (and holds)
                assert loop.time() < deadline, f"seed {seed}: step 0 never started"
                await asyncio.sleep(0.02)
            if not before:
                await h.execute_update("send_message", interrupt)
                target = await history_length(h) + rng.randint(0, 12)
                rested = asyncio.ensure_future(until(h, asked))
                try:
                    at_kill = await kill_point(h, target, rested)
                finally:
                    rested.cancel()
        why = f"seed {seed}: killed {'before' if before else 'after'} the interrupt" + (
            "" if before else f", at {at_kill} events (target {target})")
        await forget_worker(client, h)
        if before:
            update = asyncio.ensure_future(h.execute_update("send_message", interrupt))
        async with running_worker(client, tq):
            if update is not None:
                await update
            snap = await until(h, asked)
            assert "interrupted by" in snap.pending.prompt, (why, snap.pending.prompt)
            assert "step 0 was cut" in snap.pending.prompt, (why, snap.pending.prompt)
            await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                       choice="skip"))
            result = await h.result()
    finally:
        hold.touch()  # the cut step's command, if its worker died before stopping it
    assert result.status is S.SUCCEEDED, why
    assert runs_of(ran).count("start") == 1 and runs_of(ran).count("next") == 1, (
        why, runs_of(ran))
    await export_session(client, h.id, runs)
    verify_dir(runs / h.id)
    log = lines(runs, h.id)
    kinds = [x["type"] for x in log]
    assert kinds.count("TURN_INTERRUPTED") == 1, (why, kinds)
    assert [x["payload"]["text"] for x in log if x["type"] == "message"] == [
        "stop there"], why
    plan_lines = [(x["type"], x["payload"].get("step")) for x in log
                  if x["type"] in ("StepCompleted", "StepWaiting", "StepSkipped")]
    assert plan_lines == [("StepWaiting", 0), ("StepSkipped", 0), ("StepCompleted", 1)], (
        why, plan_lines)
