"""The pure mapping from recorded histories (tests/workflows/histories) to log events."""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from pathlib import Path

import jsonschema
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from activities.llm.payloads import llm_call_started
from observation.exporter import (
    Chain,
    LogSnapshot,
    MappedEvent,
    MappingError,
    SessionMapper,
    ids,
    line_bytes,
    map_history,
)
from observation.exporter.decode import first_value, journal_of, load_history
from observation.projections import ExecutionStateEvent
from observation.schemas import load
from workflows.io import LLMCallFailed, LLMCallFinished, LLMCallInput, LLMCallResult, LLMCallStarted
from workflows.session_state import JOURNAL_MEMO_KEY

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")
ET = EventType


@cache
def history(name: str) -> tuple[str, tuple[HistoryEvent, ...]]:
    sid, events = load_history((HISTORIES / f"{name}.json").read_text())
    return sid, tuple(events)


def mapped(name: str) -> list[MappedEvent]:
    sid, events = history(name)
    return map_history(sid, events)


def journal(name: str) -> list[dict]:
    out = []
    for e in history(name)[1]:
        out += journal_of(e)
    return out


def activities(name: str, kind: str) -> list[tuple[dict, HistoryEvent]]:
    """(input, closing event) of every activity of ``kind``."""
    scheduled, out = {}, []
    for e in history(name)[1]:
        if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            if a.activity_type.name == kind:
                scheduled[e.event_id] = first_value(a.input)
        elif e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            if sid in scheduled:
                out.append((scheduled[sid], e))
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_mapping_is_deterministic_and_prefix_stable(name):
    """Same history, same events; a prefix of history maps to a prefix of the log
    (so a follower that sees history grow writes what a one-shot export writes)."""
    sid, events = history(name)
    full = mapped(name)
    assert [m.model_dump() for m in full] == [m.model_dump() for m in mapped(name)]
    for k in range(len(events) + 1):
        part = map_history(sid, events[:k])
        assert part == full[: len(part)]
    lines = [line_bytes(e) for e in Chain().link_all(full)]
    assert lines == [line_bytes(e) for e in Chain().link_all(mapped(name))]


def test_demo_has_every_required_type_and_the_sse_types():
    types = {m.type for m in mapped("demo")}
    assert types >= {
        "RUN_CREATED", "RUN_STATE_CHANGED", "WORK_ITEM_QUEUED", "WORK_ITEM_STARTED",
        "WORK_ITEM_FINISHED", "ISSUE_OPENED", "ISSUE_RESOLVED", "ARTIFACT_WRITTEN",
        "LLM_CALL_STARTED", "LLM_CALL_FINISHED", "RUN_COMPLETED",
        "execution_state", "conversation.state.changed", "interaction.requested",
        "interaction.reply.accepted", "text", "tool_result"}


@pytest.mark.parametrize("name", SCENARIOS)
def test_llm_payloads_are_exactly_the_binding_ones(name):
    calls = activities(name, "llm_call")
    events = mapped(name)
    started = [m.payload for m in events if m.type == "LLM_CALL_STARTED"]
    finished = [m.payload for m in events if m.type == "LLM_CALL_FINISHED"]
    assert len(started) == len(finished) == len(calls) > 0
    for (inp, done), s, f in zip(calls, started, finished, strict=True):
        result = LLMCallResult.model_validate(
            first_value(done.activity_task_completed_event_attributes.result))
        want = llm_call_started(LLMCallInput.model_validate(inp))
        assert s == want.model_dump(mode="json", exclude_none=True)
        assert LLMCallStarted.model_validate(s) == result.started
        assert f == result.finished.model_dump(mode="json", exclude_none=True)
        assert set(s) <= set(LLMCallStarted.model_fields)
        assert set(f) <= set(LLMCallFinished.model_fields)


@pytest.mark.parametrize("name", SCENARIOS)
def test_artifacts_hold_the_llm_answers_and_tool_outputs(name):
    events = mapped(name)
    output_hash = {m.payload["call_id"]: m.payload["output_hash"]
                   for m in events if m.type == "LLM_CALL_FINISHED"}
    tools = {inp["execution_id"]: first_value(e.activity_task_completed_event_attributes.result)
             for inp, e in activities(name, "call_tool")}
    seen = set()
    for m in events:
        if m.type != "ARTIFACT_WRITTEN":
            continue
        p, art = m.payload, m.artifact
        assert art is not None and art.path == p["path"] and p["path"] not in seen
        seen.add(p["path"])
        assert hashlib.sha256(art.content).hexdigest() == p["sha256"]
        if p["call_id"]:  # the evidence file hashes to LLM_CALL_FINISHED.output_hash
            assert p["sha256"] == output_hash[p["call_id"]]
        else:
            assert json.loads(art.content) == tools[p["work_item_id"]]
    assert len(seen) == len(output_hash) + len(tools)


@pytest.mark.parametrize("name", SCENARIOS)
def test_contracts_map_to_work_items_and_execution_state(name):
    entries = journal(name)
    events = mapped(name)
    transitions = [e["data"] for e in entries if e["kind"] == "contract.transition"]
    states = [m.payload for m in events if m.type == "execution_state"]
    assert len(states) == len(transitions)
    for t, s in zip(transitions, states, strict=True):
        assert set(s) == set(ExecutionStateEvent.model_fields)
        assert (s["execution_id"], s["from_status"], s["to_status"], s["trigger"]) == (
            t["execution_id"], t["from_status"], t["to_status"], t["trigger"])
    created = [e["data"]["execution_id"] for e in entries if e["kind"] == "contract.created"]
    for kind in ("WORK_ITEM_QUEUED", "WORK_ITEM_STARTED"):
        assert [m.payload["work_item_id"] for m in events if m.type == kind] == created
    finished = [m.payload["work_item_id"] for m in events if m.type == "WORK_ITEM_FINISHED"]
    assert sorted(finished) == sorted(created)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_request_is_an_issue_and_every_reply_appears_once(name):
    entries = journal(name)
    replies = [e["data"] for e in entries if e["kind"] == "reply.accepted"]
    events = mapped(name)
    opened = [m.payload for m in events if m.type == "ISSUE_OPENED"]
    resolved = [m.payload for m in events if m.type == "ISSUE_RESOLVED"]
    asked = [e["data"]["detail"]["request_id"] for e in entries
             if e["kind"] == "session.status" and e["data"]["event"] == "interaction.requested"]
    assert [o["issue_id"] for o in opened] == asked
    assert [r["issue_id"] for r in resolved] == asked  # each one resolved, once
    answered = [r for r in resolved if r["resolution"] in ("answered", "auto_decided")]
    assert [(r["issue_id"], r["answer"], r["by"]) for r in answered] == [
        (r["request_id"], r["answer"], r["by"]) for r in replies]


def test_outcomes_of_the_scenarios():
    by = {n: mapped(n) for n in SCENARIOS}
    assert by["demo"][-1].type == "RUN_COMPLETED"
    assert by["demo"][-1].payload["status"] == "succeeded"
    rejected = [m.payload for m in by["rejected"] if m.type == "WORK_ITEM_FINISHED"]
    assert [r["outcome"] for r in rejected] == ["rejected"]
    auto = [m.payload for m in by["auto_timeout"] if m.type == "ISSUE_RESOLVED"]
    assert auto[0]["resolution"] == "auto_decided" and auto[0]["auto"] is True
    canceled = by["canceled"]
    assert "RUN_CANCEL_REQUESTED" in {m.type for m in canceled}
    assert canceled[-1].type == "RUN_COMPLETED" and canceled[-1].payload["status"] == "canceled"
    issue = [m.payload for m in canceled if m.type == "ISSUE_RESOLVED"]
    assert issue[0]["resolution"] == "run.canceled"


@pytest.mark.parametrize("name", SCENARIOS)
def test_ids_times_and_spans_come_from_history(name):
    sid, events = history(name)
    run_id = events[0].workflow_execution_started_event_attributes.original_execution_run_id
    out = mapped(name)
    root = ids.session_span(sid)
    assert len({m.event_id for m in out}) == len(out)
    assert all(re.fullmatch(rf"{run_id}:\d+:\d+", m.event_id) for m in out)
    assert {m.trace_id for m in out} == {ids.trace_id(sid)}
    assert {m.run_id for m in out} == {sid}
    stamps = [m.ts for m in out]
    assert stamps == sorted(stamps)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", t) for t in stamps)
    for m in out:
        if m.type.startswith("LLM_CALL_"):
            call = m.payload["call_id"]
            assert (m.span_id, m.parent_span_id) == (ids.llm_span(sid, call),
                                                    ids.reasoning_span(sid, call))
        elif m.type in ("WORK_ITEM_QUEUED", "WORK_ITEM_STARTED", "WORK_ITEM_FINISHED"):
            assert (m.span_id, m.parent_span_id) == (
                ids.work_item_span(sid, m.payload["work_item_id"]), root)
        elif m.type.startswith("RUN_"):
            assert (m.span_id, m.parent_span_id) == (root, None)


@pytest.mark.parametrize("name", SCENARIOS)
def test_events_and_snapshot_validate_against_the_shipped_schemas(name):
    check = jsonschema.Draft202012Validator(load("event"),
                                            format_checker=jsonschema.FormatChecker())
    events = [e.model_dump() for e in Chain().link_all(mapped(name))]
    for e in events:
        check.validate(e)
    snapshot = LogSnapshot.replay(history(name)[0], events).data
    jsonschema.Draft202012Validator(load("snapshot")).validate(snapshot)


def _with(events, index: int, event: HistoryEvent) -> list[HistoryEvent]:
    out = list(events)
    out[index] = event
    return out


def _llm_completion(name: str) -> tuple[int, HistoryEvent]:
    _, events = history(name)
    _, done = activities(name, "llm_call")[0]
    return events.index(done), done


def test_a_failed_llm_call_maps_to_llm_call_failed_with_its_detail():
    sid, events = history("rejected")
    i, done = _llm_completion("rejected")
    detail = LLMCallFailed(call_id=f"{sid}-llm-0", latency_ms=12, error_class="HTTPError",
                           error_summary="rate limited", retryable=True, http_status=429)
    failed = HistoryEvent(event_id=done.event_id, event_time=done.event_time,
                          event_type=ET.EVENT_TYPE_ACTIVITY_TASK_FAILED)
    a = failed.activity_task_failed_event_attributes
    a.scheduled_event_id = done.activity_task_completed_event_attributes.scheduled_event_id
    a.failure.message = "rate limited"
    p = a.failure.application_failure_info.details.payloads.add()
    p.metadata["encoding"] = b"json/plain"
    p.data = detail.model_dump_json().encode()
    out = map_history(sid, _with(events, i, failed)[: i + 1])
    assert out[-1].type == "LLM_CALL_FAILED"
    assert out[-1].payload == detail.model_dump(mode="json", exclude_none=True)


def test_a_timed_out_llm_call_gets_a_failed_payload_made_from_history():
    sid, events = history("rejected")
    i, done = _llm_completion("rejected")
    timed = HistoryEvent(event_id=done.event_id, event_time=done.event_time,
                         event_type=ET.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT)
    a = timed.activity_task_timed_out_event_attributes
    a.scheduled_event_id = done.activity_task_completed_event_attributes.scheduled_event_id
    a.failure.message = "activity StartToClose timeout"
    out = map_history(sid, _with(events, i, timed)[: i + 1])
    p = LLMCallFailed.model_validate(out[-1].payload)
    assert out[-1].type == "LLM_CALL_FAILED" and p.error_class == "TimeoutError"
    assert p.call_id == f"{sid}-llm-0" and p.latency_ms >= 0 and not p.retryable


def test_history_it_cannot_map_exactly_is_refused():
    sid, events = history("demo")
    memo = next(e for e in events if e.event_type == ET.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED)
    i = events.index(memo)
    gap = HistoryEvent()
    gap.CopyFrom(memo)
    field = gap.workflow_properties_modified_event_attributes.upserted_memo.fields[
        JOURNAL_MEMO_KEY]
    entries = json.loads(field.data)
    entries[0]["seq"] = 5
    field.data = json.dumps(entries).encode()
    with pytest.raises(MappingError, match="journal entry seq 5"):
        map_history(sid, _with(events, i, gap))
    with pytest.raises(MappingError, match="after the run closed"):
        map_history(sid, [*events, events[-1]])
    with pytest.raises(MappingError, match="a second first run"):
        map_history(sid, [events[0], events[0]])
    continued = HistoryEvent()
    continued.CopyFrom(events[0])
    continued.workflow_execution_started_event_attributes.continued_execution_run_id = "r0"
    with pytest.raises(MappingError, match="every run from the first one"):
        SessionMapper(sid).feed(continued)


def test_the_journal_in_activity_headers_maps_as_the_memo_did():
    """Sessions started since the journal rides in activity headers: one memo event
    fewer per activity, and the same log (types, journal-derived payloads)."""
    _, by_memo = history("demo")
    _, by_header = history("demo_journal_header")

    def count(events, kind):
        return sum(1 for e in events if e.event_type == kind)

    activities = count(by_header, ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert activities == count(by_memo, ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) > 0
    memos = ET.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
    assert count(by_header, memos) <= count(by_memo, memos) - activities + 1
    assert journal("demo_journal_header") and [e["kind"] for e in journal("demo")] == [
        e["kind"] for e in journal("demo_journal_header")]
    assert [m.type for m in mapped("demo")] == [m.type for m in mapped("demo_journal_header")]


def test_refused_signals_map_to_interaction_reply_refused():
    """Recorded refusals (a UI operator's malformed and stale signals) become
    `interaction.reply.refused` lines; the log's fold counts them as journal entries
    and leaves the session as it was."""
    from observation.log_view import fold

    events = mapped("operator_signals")
    refused = [m.payload for m in events if m.type == "interaction.reply.refused"]
    assert [(p["signal"], p["request_id"]) for p in refused] == [
        ("submit_reply", None), ("submit_reply", "stale"), ("end_conversation", None)]
    assert refused[0]["reason"].startswith("malformed signal: expected a JSON object")
    assert len(journal("operator_signals")) == fold(history("operator_signals")[0], [
        {**m.envelope(), "seq": i + 1, "event_hash": ""} for i, m in enumerate(events)
    ]).journal_seq
