"""The pure telemetry projection: log events -> parent/child TelemetryRuns with the
same trace_id/span_id as the NDJSON events (seed 003, central telemetry)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.contrib.pydantic import pydantic_data_converter

from observation.exporter import Chain, ids, map_history
from observation.exporter.decode import load_history
from observation.telemetry import STATUSES, ProjectionError, TelemetryProjector, project
from observation.telemetry.project import llm_provider
from workflows.io import LLMCallFailed

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")
ET = EventType


@cache
def history(name: str) -> tuple[str, tuple[HistoryEvent, ...]]:
    sid, events = load_history((HISTORIES / f"{name}.json").read_text())
    return sid, tuple(events)


def log_of(sid: str, events) -> list[dict]:
    """The log's events as on disk (JSON read back: 0.0 is 0, as replay sees it)."""
    return [json.loads(json.dumps(e.model_dump()))
            for e in Chain().link_all(map_history(sid, events))]


def logged(name: str) -> tuple[str, list[dict]]:
    sid, events = history(name)
    return sid, log_of(sid, events)


@pytest.mark.parametrize("name", SCENARIOS)
def test_one_parent_per_session_and_a_child_per_operation(name):
    sid, log = logged(name)
    runs = project(sid, log)
    by_id = {r.run_id: r for r in runs}
    root = runs[0]
    assert (root.run_id, root.parent_run_id, root.job_type) == (f"{sid}/session", None,
                                                                 "session")
    assert [r for r in runs if r.parent_run_id is None] == [root]
    assert [r.ordinal for r in runs] == list(range(len(runs)))
    for r in runs[1:]:
        parent = by_id[r.parent_run_id]
        assert parent.ordinal < r.ordinal and r.parent_span_id == parent.span_id
        want = {"llm_call": "reasoning", "gate": "work_item"}.get(r.job_type, "session")
        assert parent.job_type == want
    calls = [e["payload"]["call_id"] for e in log if e["type"] == "LLM_CALL_STARTED"]
    items = [e["payload"]["work_item_id"] for e in log if e["type"] == "WORK_ITEM_QUEUED"]
    assert [r.attributes["call_id"] for r in runs if r.job_type == "llm_call"] == calls
    assert [r.run_id for r in runs if r.job_type == "reasoning"] == [
        f"{sid}/reasoning/{c}" for c in calls]
    assert [r.attributes["work_item_id"] for r in runs if r.job_type == "work_item"] == items
    assert all(r.status in STATUSES and r.ended for r in runs)  # the sessions ended


@pytest.mark.parametrize("name", SCENARIOS)
def test_runs_carry_the_ids_of_their_events(name):
    """context_json holds the trace_id/span_id that the run's NDJSON events carry;
    every LLM_CALL_* event has its llm_call run (seed 003's binding rule)."""
    sid, log = logged(name)
    runs = project(sid, log)
    by_span = {r.span_id: r for r in runs}
    assert len(by_span) == len(runs)
    for r in runs:
        assert r.context_json["trace_id"] == ids.trace_id(sid)
        assert set(r.context_json) == {"trace_id", "span_id", "parent_span_id"}
    for e in log:
        run = by_span[e["span_id"]]  # every event's span is a run
        assert (e["trace_id"], e["parent_span_id"]) == (run.trace_id, run.parent_span_id)
        if e["type"].startswith("LLM_CALL_"):
            assert run.job_type == "llm_call"
            assert run.span_id == ids.llm_span(sid, e["payload"]["call_id"])
    for r in runs:
        assert r.event_count == sum(e["span_id"] == r.span_id for e in log)


@pytest.mark.parametrize("name", SCENARIOS)
def test_times_and_statuses_come_from_the_log(name):
    sid, log = logged(name)
    runs = {r.run_id: r for r in project(sid, log)}
    first = {}
    for e in log:
        first.setdefault((e["type"], e["span_id"]), e)
    for r in runs.values():
        if r.job_type == "llm_call":
            start = first[("LLM_CALL_STARTED", r.span_id)]
            end = first[("LLM_CALL_FINISHED", r.span_id)]
            assert (r.started_at, r.ended_at, r.status) == (start["ts"], end["ts"], "succeeded")
            usage = end["payload"]["token_usage"]
            assert (r.attributes["input_tokens"], r.attributes["output_tokens"]) == (
                usage["input_tokens"], usage["output_tokens"])
            assert (r.attributes["model"], r.attributes["provider"]) == (
                start["payload"]["model"], "scripted")
        if r.job_type == "work_item":
            done = first[("WORK_ITEM_FINISHED", r.span_id)]["payload"]
            want = {"completed": "succeeded", "cancelled": "canceled"}.get(done["outcome"],
                                                                         done["outcome"])
            assert (r.status, r.ended_at) == (want, done["finished_at"])
            assert r.started_at == first[("WORK_ITEM_STARTED", r.span_id)]["payload"][
                "started_at"]
    end = log[-1]
    root = runs[f"{sid}/session"]
    assert (root.status, root.ended_at) == (end["payload"]["status"],
                                            end["payload"]["finished_at"])
    assert root.started_at == log[0]["payload"]["created_at"]
    outcomes = {n: [r.status for r in project(*logged(n)) if r.job_type == "work_item"]
                for n in SCENARIOS}
    assert outcomes["rejected"] == ["rejected"] and outcomes["canceled"] == ["canceled"]


def test_the_fold_is_incremental_and_deterministic():
    sid, log = logged("demo")
    p = TelemetryProjector(sid)
    ended: dict[str, str] = {}
    for e in log:
        changed = p.apply(e)
        for rid in changed:
            assert p.runs[rid].last_seq == e["seq"]
        for r in p.runs.values():  # an end, once known, never moves
            if r.ended:
                assert ended.setdefault(r.run_id, r.ended_at) == r.ended_at
    assert p.ordered() == project(sid, log)
    assert [r.model_dump() for r in project(sid, log)] == [
        r.model_dump() for r in project(sid, logged("demo")[1])]


def test_a_failed_llm_call_fails_its_run_and_its_reasoning_step():
    sid, events = history("rejected")
    events = list(events)
    scheduled = next(e.event_id for e in events
                     if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                     and e.activity_task_scheduled_event_attributes.activity_type.name
                     == "llm_call")
    i, done = next((i, e) for i, e in enumerate(events)
                   if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                   and e.activity_task_completed_event_attributes.scheduled_event_id
                   == scheduled)
    failed = HistoryEvent(event_id=done.event_id, event_time=done.event_time,
                          event_type=ET.EVENT_TYPE_ACTIVITY_TASK_FAILED)
    a = failed.activity_task_failed_event_attributes
    a.scheduled_event_id = scheduled
    a.failure.message = "rate limited"
    info = a.failure.application_failure_info
    info.type = "HTTPError"
    detail = LLMCallFailed(call_id=f"{sid}-llm-0", latency_ms=7, error_class="HTTPError",
                           error_summary="rate limited", retryable=True, http_status=429)
    info.details.payloads.extend(pydantic_data_converter.payload_converter.to_payloads([detail]))
    log = log_of(sid, [*events[:i], failed])
    runs = {r.job_type + ":" + r.run_id.rsplit("/", 1)[-1]: r for r in project(sid, log)}
    llm, step = runs[f"llm_call:{sid}-llm-0"], runs[f"reasoning:{sid}-llm-0"]
    assert (llm.status, llm.attributes["error_class"], llm.attributes["http_status"]) == (
        "failed", "HTTPError", 429)
    assert step.status == "failed" and step.ended_at == llm.ended_at


def test_what_is_open_when_the_session_ends_ends_with_it():
    sid, log = logged("demo")
    cut = next(k for k, e in enumerate(log) if e["type"] == "TOOL_CALL_STARTED")
    end = {**log[-1], "seq": log[cut]["seq"] + 1, "ts": "2030-01-01T00:00:00.000000Z",
           "payload": {**log[-1]["payload"], "status": "failed", "outcome": "terminated",
                       "finished_at": "2030-01-01T00:00:00.000000Z"}, "type": "RUN_FAILED"}
    runs = project(sid, [*log[: cut + 1], end])
    open_item = [r for r in runs if r.attributes.get("closed_by") == "session_end"]
    assert [r.job_type for r in open_item] == ["work_item"]
    assert (open_item[0].status, open_item[0].ended_at) == ("canceled", end["ts"])
    assert runs[0].status == "failed"


def test_a_log_that_does_not_fit_is_refused():
    sid, log = logged("demo")
    llm = next(k for k, e in enumerate(log) if e["type"] == "LLM_CALL_STARTED")
    bad_span = [*log[:llm], {**log[llm], "span_id": "0" * 16}]
    with pytest.raises(ProjectionError, match="llm_call"):
        project(sid, bad_span)
    with pytest.raises(ProjectionError, match="before RUN_CREATED"):
        project(sid, log[1:])
    with pytest.raises(ProjectionError, match="trace_id"):
        project(sid, [{**log[0], "trace_id": "f" * 32}])
    with pytest.raises(ProjectionError, match="not s-other"):
        project("s-other", log)


def test_the_llm_provider_comes_from_the_config_or_the_base_url():
    assert llm_provider({"agent": {"llm": {"provider": "openai"}}}) == "openai"
    assert llm_provider(None, "scripted://") == "scripted"
    assert llm_provider({}, "https://api.example.test/v1") == "openai"
    assert llm_provider({"plan": {}}) is None
