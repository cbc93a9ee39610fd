"""Gate runs of plan sessions: each verify command is GATE_RUN_STARTED/FINISHED in the
log, the snapshot's gates[] fills, the plan events are all there, and the gates are
telemetry runs. Histories are recorded here on the time-skipping server."""

from __future__ import annotations

import json
import uuid

import jsonschema
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.testing import WorkflowEnvironment

from observation.exporter import Chain, LogSnapshot, export_history, ids, map_history
from observation.exporter.decode import first_value
from observation.exporter.gates import EXCERPT_CHARS, excerpt, gate_span
from observation.schemas import load
from observation.telemetry import TelemetryStore, project
from observation.telemetry.hook import SessionTelemetry
from tests.support.sessions import running_worker, start_session, until
from workflows.config import SessionConfig
from workflows.messages import ReplyInput
from workflows.plan import PLAN_EVENT_TYPES
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

ET = EventType
W = SessionStatus.WAITING_USER
GATES = {"plan": {"name": "gates", "steps": [
    {"run": "echo ok", "verify": {"cmd": "true"}},
    {"run": "echo x", "verify": {"cmd": "echo gate-says-no >&2; exit 1"},
     "on_fail": "retry", "max_retries": 1}]}}
# Every other plan event: a gate, a window that dies, the person's commands.
PERSON = {"plan": {"name": "person", "steps": [
    {"name": "go?", "gate": True},
    {"run": "kill -9 $$", "in_window": True, "on_fail": "human"}]}}


async def record(env: WorkflowEnvironment, config: dict, choices: tuple[str, ...] = ()
                 ) -> tuple[str, list[HistoryEvent], SessionState]:
    """Run a plan session to its end (answering each step request with the next
    choice) and return its id, history and final state."""
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(env.client, tq):
        h = await start_session(env.client, SessionConfig.model_validate(config), tq,
                                search_attributes=False)
        seen: set[str] = set()
        for choice in choices:
            snap = await until(h, lambda s: s.status == W and s.pending is not None
                               and s.pending.kind == "step"
                               and s.pending.request_id not in seen)
            seen.add(snap.pending.request_id)
            await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                       choice=choice))
        await h.result()
        state = await h.query("state", result_type=SessionState)
        history = await h.fetch_history()
    return h.id, list(history.events), state


@pytest.fixture(scope="module")
async def gates(time_skipping_env):
    return await record(time_skipping_env, GATES)


@pytest.fixture(scope="module")
async def person(time_skipping_env):
    return await record(time_skipping_env, PERSON, ("approve", "reset_task", "approve", "skip"))


def logged(sid: str, events: list[HistoryEvent]) -> list[dict]:
    """The log's events as on disk."""
    return [json.loads(json.dumps(e.model_dump()))
            for e in Chain().link_all(map_history(sid, events))]


def verify_inputs(events: list[HistoryEvent]) -> list[dict]:
    out = []
    for e in events:
        if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            inp = first_value(a.input)
            if a.activity_type.name == "run_command" and inp["purpose"] == "verify":
                out.append(inp)
    return out


async def test_each_verify_command_is_a_gate_run(gates):
    sid, events, _ = gates
    log = logged(sid, events)
    started = [e for e in log if e["type"] == "GATE_RUN_STARTED"]
    finished = [e for e in log if e["type"] == "GATE_RUN_FINISHED"]
    inputs = verify_inputs(events)
    assert len(started) == len(finished) == len(inputs) == 3  # step 0, step 1 twice
    for inp, s, f in zip(inputs, started, finished, strict=True):
        gate_id = f"{inp['execution_id']}.verify"
        for e in (s, f):
            p = e["payload"]
            assert (p["gate_id"], p["step"], p["command"], p["work_item_id"]) == (
                gate_id, inp["step"], inp["command"], inp["execution_id"])
            assert (e["span_id"], e["parent_span_id"]) == (
                gate_span(sid, gate_id), ids.work_item_span(sid, inp["execution_id"]))
        assert log.index(s) < log.index(f)
        assert s["payload"]["started_at"] == s["ts"] and f["payload"]["finished_at"] == f["ts"]
    results = [(f["payload"]["step"], f["payload"]["passed"], f["payload"]["exit_code"])
               for f in finished]
    assert results == [(0, True, 0), (1, False, 1), (1, False, 1)]
    assert [f["payload"]["output_excerpt"] for f in finished] == ["", "gate-says-no",
                                                                  "gate-says-no"]
    assert all(f["payload"]["duration_s"] >= 0 and f["payload"]["error"] is None
               for f in finished)


async def test_the_snapshot_gates_fill_and_everything_validates(gates):
    sid, events, _ = gates
    log = logged(sid, events)
    check = jsonschema.Draft202012Validator(load("event"),
                                            format_checker=jsonschema.FormatChecker())
    for e in log:
        check.validate(e)
    snapshot = LogSnapshot.replay(sid, log).data
    jsonschema.Draft202012Validator(load("snapshot")).validate(snapshot)
    assert [(g["step"], g["status"], g["exit_code"]) for g in snapshot["gates"]] == [
        (0, "passed", 0), (1, "failed", 1), (1, "failed", 1)]
    assert all(g["finished_at"] for g in snapshot["gates"])
    assert snapshot["run_state"] == "failed"
    assert snapshot["section_states"] == {"0": "DONE", "1": "FAILED"}


async def test_the_plan_events_are_in_the_log_as_the_workflow_recorded_them(gates, person):
    seen = set()
    for sid, events, state in (gates, person):
        log = logged(sid, events)
        plan = [{k: v for k, v in e["payload"].items() if k != "at"} for e in log
                if e["type"] in PLAN_EVENT_TYPES]
        assert plan == [json.loads(e.model_dump_json()) for e in state.plan_events]
        assert all(e["type"] == e["payload"]["type"] for e in log
                   if e["type"] in PLAN_EVENT_TYPES)
        seen |= {e["type"] for e in plan}
    assert seen == set(PLAN_EVENT_TYPES)  # all ten of seed 002
    person_types = [e.type for e in person[2].plan_events]
    assert person_types == [
        "TaskStarted", "StepWaiting", "StepApproved", "WindowLaunched", "WindowLost",
        "StepWaiting", "TaskReset", "StepWaiting", "StepApproved", "WindowLaunched",
        "WindowLost", "StepWaiting", "StepSkipped", "TaskStopped"]
    assert not [e for e in logged(*person[:2]) if e["type"].startswith("GATE_RUN")]


async def test_the_gate_mapping_is_prefix_stable(gates):
    sid, events, _ = gates
    full = map_history(sid, events)
    for k in range(len(events) + 1):
        part = map_history(sid, events[:k])
        assert part == full[: len(part)]


def _replace(events: list[HistoryEvent], kind: str, make) -> list[HistoryEvent]:
    """The history with the first verify's closing event replaced by ``make(done)``
    (``kind`` 'failed' keeps its start; 'canceled' drops it: it never started)."""
    scheduled = {e.event_id for e in events
                 if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and first_value(e.activity_task_scheduled_event_attributes.input)
                 .get("purpose") == "verify"}
    first = min(scheduled)
    out = []
    for e in events:
        if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_STARTED and \
                e.activity_task_started_event_attributes.scheduled_event_id == first \
                and kind == "canceled":
            continue
        if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and \
                e.activity_task_completed_event_attributes.scheduled_event_id == first:
            e = make(e, first)
        out.append(e)
    return out


async def test_a_verify_without_an_exit_code_is_a_failed_gate(gates):
    sid, events, _ = gates

    def failed(done: HistoryEvent, scheduled: int) -> HistoryEvent:
        e = HistoryEvent(event_id=done.event_id, event_time=done.event_time,
                         event_type=ET.EVENT_TYPE_ACTIVITY_TASK_FAILED)
        e.activity_task_failed_event_attributes.scheduled_event_id = scheduled
        e.activity_task_failed_event_attributes.failure.message = "worker lost"
        return e

    def canceled(done: HistoryEvent, scheduled: int) -> HistoryEvent:
        e = HistoryEvent(event_id=done.event_id, event_time=done.event_time,
                         event_type=ET.EVENT_TYPE_ACTIVITY_TASK_CANCELED)
        e.activity_task_canceled_event_attributes.scheduled_event_id = scheduled
        return e

    for kind, make, why in (("failed", failed, "worker lost"),
                            ("canceled", canceled, "cancelled")):
        log = logged(sid, _replace(events, kind, make))
        gate = [e for e in log if e["type"].startswith("GATE_RUN")][:2]
        assert [e["type"] for e in gate] == ["GATE_RUN_STARTED", "GATE_RUN_FINISHED"]
        p = gate[1]["payload"]
        assert (p["passed"], p["exit_code"]) == (False, None) and why in p["error"]
        assert gate[0]["payload"]["attempt"] == (0 if kind == "canceled" else 1)
        assert LogSnapshot.replay(sid, log).data["gates"][0]["status"] == "failed"


def test_the_output_excerpt_is_cut():
    text, cut = excerpt("a" * EXCERPT_CHARS, "b")
    assert (len(text), cut) == (EXCERPT_CHARS, True)
    assert excerpt(" out\n", "err \n") == ("out\nerr", False)


async def test_gates_are_telemetry_runs_under_their_step(gates, tmp_path):
    sid, events, _ = gates
    log = logged(sid, events)
    runs = {r.run_id: r for r in project(sid, log)}
    gate_runs = [r for r in runs.values() if r.job_type == "gate"]
    assert [(r.attributes["step"], r.status) for r in gate_runs] == [
        (0, "succeeded"), (1, "failed"), (1, "failed")]
    for r in gate_runs:
        evs = [e for e in log if e["type"].startswith("GATE_RUN")
               and e["payload"]["gate_id"] == r.attributes["gate_id"]]
        assert {(e["trace_id"], e["span_id"], e["parent_span_id"]) for e in evs} == {
            (r.context_json["trace_id"], r.context_json["span_id"],
             r.context_json["parent_span_id"])}
        step = runs[r.parent_run_id]
        assert step.job_type == "work_item" and step.span_id == r.parent_span_id
        assert (r.started_at, r.ended_at) == (evs[0]["ts"], evs[1]["ts"])
    root = runs[f"{sid}/session"]
    assert (root.status, root.attributes["driver"]) == ("failed", "plan")
    # the exporter's hook writes the same runs
    with TelemetryStore.open(tmp_path / "t.sqlite") as store:
        export_history(sid, events, tmp_path / "runs", SessionTelemetry(sid, store, None))
        assert store.runs(session_id=sid) == list(runs.values())
        assert [r.run_id for r in store.runs(job_type="gate", status="failed")] == [
            r.run_id for r in gate_runs[1:]]
