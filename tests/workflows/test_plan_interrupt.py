"""An interrupt on a plan session (issue 27): a message with ``if_busy: interrupt``
while a plan step runs cuts the step when its class allows (read-only, reversible),
or waits for its outcome (irreversible, at most once: never cut); either way the plan
stops at that step boundary and waits for the person, who resumes it (``reset`` runs
the step again, ``skip`` goes on without it) or ends it. The log says what was cut,
why and by whom (``TURN_INTERRUPTED``). Real parts: the dev server, a worker, the
steps' shell commands (each appends its name to a file: a step that ran twice shows)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import jsonschema
import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from observation.exporter import export_session
from observation.exporter.verify import verify_dir
from observation.schemas import load
from tests.support.sessions import running_worker, start_session, until
from workflows.config import SessionConfig
from workflows.messages import Behaviour, MessageInput, ReplyInput
from workflows.plan import PlanStep, ToolRun
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus
from workflows.steering import InFlight, plan_stop_text, steer, step_safety

S = SessionStatus
EVENT_SCHEMA = jsonschema.Draft202012Validator(load("event"),
                                               format_checker=jsonschema.FormatChecker())


# -- the pure rules -------------------------------------------------------------------


def test_a_plan_step_is_irreversible_unless_it_says_or_its_tool_is_overridden():
    class Server:
        name, tool_overrides = "ops", {"peek": "read_only"}

    assert step_safety(None, "make deploy", []) == "irreversible"
    assert step_safety("reversible", "make", []) == "reversible"
    assert step_safety(None, ToolRun(server="ops", tool="peek"), [Server()]) == "read_only"
    assert step_safety(None, ToolRun(server="ops", tool="drop"), [Server()]) == \
        "irreversible"
    assert PlanStep(run="x").model_dump(mode="json").get("safety", "absent") == "absent"
    with pytest.raises(ValueError, match="gate step"):
        PlanStep(gate=True, safety="read_only")
    with pytest.raises(ValueError):
        PlanStep(run="x", safety="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize(("safety", "action"), [
    ("read_only", "cut"), ("reversible", "cut"),
    ("irreversible", "after_call"), ("at_most_once", "after_call")])
def test_a_running_plan_step_is_cut_as_its_class_allows(safety, action):
    step = InFlight(kind="plan_step", id="e-1", step=0, safety=safety)
    assert steer("interrupt", S.RUNNING, plan=True, in_flight=step,
                 plan_interrupt=True).action == action
    # sessions started before plan interrupts keep the 409
    old = steer("interrupt", S.RUNNING, plan=True, in_flight=step)
    assert old.problem is not None and old.problem.details == {"code": "not_interruptible"}
    busy = steer("reject", S.RUNNING, plan=True, in_flight=step, plan_interrupt=True)
    assert busy.problem is not None and busy.problem.details == {"code": "session_busy"}
    assert "step 2 was cut" in plan_stop_text("ann", 2, step, "stop")
    assert "before step 3" in plan_stop_text("ann", 3, None, "stop")


# -- real sessions ----------------------------------------------------------------------

def plan(ran: Path, hold: Path, safety: str | None) -> SessionConfig:
    """Step 0 starts, then holds until ``hold`` exists; step 1 runs at once."""
    first = {"name": "long", "run": f"echo $$ > {ran}.pid; echo start >> {ran}; "
             f"while [ ! -e {hold} ]; do sleep 0.05; done; echo end >> {ran}"}
    if safety is not None:
        first["safety"] = safety
    return SessionConfig.model_validate({"plan": {"name": "p", "steps": [
        first, {"name": "next", "run": f"echo next >> {ran}"}]}})


def runs_of(ran: Path) -> list[str]:
    return ran.read_text().split() if ran.exists() else []


async def until_line(ran: Path, line: str, limit_s: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while line not in runs_of(ran):
        assert loop.time() < deadline, f"{line!r} never ran: {runs_of(ran)}"
        await asyncio.sleep(0.02)


async def until_gone(pid_file: Path, limit_s: float = 30) -> None:
    """Until the process that wrote ``pid_file`` has ended (its worker stops a cut
    step's process group once it learns of the cancel, at the activity's next
    heartbeat)."""
    pid = int(pid_file.read_text())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert loop.time() < deadline, f"process {pid} still runs"
        await asyncio.sleep(0.05)


def asked(s) -> bool:
    return s.status == S.WAITING_USER and s.pending is not None and s.pending.kind == "step"


async def log_of(client: Client, h: WorkflowHandle, tmp_path: Path) -> list[dict]:
    await export_session(client, h.id, tmp_path / "runs")
    verify_dir(tmp_path / "runs" / h.id)
    text = (tmp_path / "runs" / h.id / "events.ndjson").read_text()
    out = [json.loads(x) for x in text.splitlines()]
    for line in out:
        EVENT_SCHEMA.validate(line)
    return out


@pytest.mark.slow
async def test_an_interrupt_cuts_a_read_only_step_and_the_plan_waits_then_runs_it_again(
        dev_env, tmp_path):
    client: Client = dev_env.client
    ran, hold = tmp_path / "ran", tmp_path / "hold"
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        h = await start_session(client, plan(ran, hold, "read_only"), tq)
        await until_line(ran, "start")
        before = await h.query("state", result_type=SessionState)
        with pytest.raises(WorkflowUpdateFailedError) as refused:  # reject: 409, no change
            await h.execute_update("send_message", MessageInput(text="no", if_busy="reject"))
        assert refused.value.cause.details[0]["code"] == "session_busy"
        after = await h.query("state", result_type=SessionState)
        assert after.model_dump() == before.model_dump()
        await h.execute_update("send_message", MessageInput(
            text="wrong branch, wait", if_busy="interrupt"))
        snap = await until(h, asked)  # the step was cut: its hold never came
        assert runs_of(ran) == ["start"]
        assert snap.pending.prompt.startswith("on_fail_human: interrupted by ")
        assert "step 0 was cut" in snap.pending.prompt and "wrong branch" in snap.pending.prompt
        state = await h.query("state", result_type=SessionState)
        (cut,) = [c for c in state.contracts if c.action_detail.get("step") == 0]
        assert cut.status.value == "cancelled"
        await until_gone(Path(f"{ran}.pid"))  # the cut step's process was stopped
        hold.touch()
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   choice="reset"))
        result = await h.result()
    assert result.status is S.SUCCEEDED
    assert runs_of(ran) == ["start", "start", "end", "next"]  # step 0 again, as asked
    log = await log_of(client, h, tmp_path)
    kinds = [x["type"] for x in log]
    (entry,) = [x["payload"] for x in log if x["type"] == "TURN_INTERRUPTED"]
    assert entry["cut"]["kind"] == "plan_step" and entry["cut"]["step"] == 0
    assert entry["cut"]["safety"] == "read_only" and entry["cut"]["id"] == cut.execution_id
    assert entry["reason"] == "interrupt" and entry["by"] and "waited_for" not in entry
    assert [x["payload"]["text"] for x in log if x["type"] == "message"] == [
        "wrong branch, wait"]
    plan_lines = [(x["type"], x["payload"].get("step"), x["payload"].get("reason"))
                  for x in log if x["type"] in ("StepCompleted", "StepWaiting", "StepReset")]
    assert plan_lines == [("StepWaiting", 0, "on_fail_human"), ("StepReset", 0, "human"),
                          ("StepCompleted", 0, None), ("StepCompleted", 1, None)]
    assert kinds.index("TURN_INTERRUPTED") < kinds.index("message") < kinds.index(
        "StepWaiting")


@pytest.mark.slow
async def test_an_interrupt_waits_for_an_irreversible_step_then_the_plan_stops_before_the_next(
        dev_env, tmp_path):
    client: Client = dev_env.client
    ran, hold = tmp_path / "ran", tmp_path / "hold"
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        h = await start_session(client, plan(ran, hold, None), tq)  # irreversible
        await until_line(ran, "start")
        await h.execute_update("send_message", MessageInput(text="hold on",
                                                            if_busy="interrupt"))
        assert (await h.query("state", result_type=SessionState)).status is S.RUNNING
        hold.touch()  # never cut: the step finishes
        snap = await until(h, asked)
        assert runs_of(ran) == ["start", "end"]
        assert "before step 1" in snap.pending.prompt
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   choice="skip"))
        result = await h.result()
    assert result.status is S.SUCCEEDED
    assert runs_of(ran) == ["start", "end"]  # skipped: step 1 never ran
    log = await log_of(client, h, tmp_path)
    (entry,) = [x["payload"] for x in log if x["type"] == "TURN_INTERRUPTED"]
    assert entry["cut"] is None
    assert [x["payload"]["text"] for x in log if x["type"] == "message"] == ["hold on"]
    assert entry["waited_for"]["kind"] == "plan_step" and entry["waited_for"]["step"] == 0
    assert entry["waited_for"]["safety"] == "irreversible"
    plan_lines = [(x["type"], x["payload"].get("step")) for x in log
                  if x["type"] in ("StepCompleted", "StepWaiting", "StepSkipped")]
    assert plan_lines == [("StepCompleted", 0), ("StepWaiting", 1), ("StepSkipped", 1)]


@pytest.mark.slow
async def test_a_plan_session_started_before_plan_interrupts_keeps_the_409(dev_env, tmp_path):
    client: Client = dev_env.client
    ran, hold = tmp_path / "ran", tmp_path / "hold"
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        h = await start_session(client, plan(ran, hold, "read_only"), tq,
                                behaviour=Behaviour.SEND_WINDOW)
        await until_line(ran, "start")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await h.execute_update("send_message", MessageInput(text="x", if_busy="interrupt"))
        assert refused.value.cause.details[0]["code"] == "not_interruptible"
        hold.touch()
        assert (await h.result()).status is S.SUCCEEDED
    assert runs_of(ran) == ["start", "end", "next"]


@pytest.mark.slow
async def test_an_interrupt_of_the_last_step_is_logged_and_the_plan_ends_as_it_would(
        dev_env, tmp_path):
    """Nothing is left to stop after the last step (let finish: irreversible): the plan
    ends as it would, and the interrupt and its message are still in the log."""
    client: Client = dev_env.client
    ran, hold = tmp_path / "ran", tmp_path / "hold"
    config = plan(ran, hold, None)
    config.plan.steps.pop()  # only the long step
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, tq):
        h = await start_session(client, config, tq)
        await until_line(ran, "start")
        await h.execute_update("send_message", MessageInput(text="too late?",
                                                            if_busy="interrupt"))
        hold.touch()
        result = await h.result()
    assert result.status is S.SUCCEEDED
    assert runs_of(ran) == ["start", "end"]
    log = await log_of(client, h, tmp_path)
    (entry,) = [x["payload"] for x in log if x["type"] == "TURN_INTERRUPTED"]
    assert entry["cut"] is None and entry["waited_for"]["step"] == 0
    assert [x["payload"]["text"] for x in log if x["type"] == "message"] == ["too late?"]
    assert not [x for x in log if x["type"] == "StepWaiting"]  # nothing asked
