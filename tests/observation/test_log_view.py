"""The log fold (pure): a session's contracts, memory and status history rebuilt from
its exported log equal what the workflow itself recorded (its journal in history)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observation.exporter import Chain, line_bytes, map_history
from observation.exporter.decode import journal_of, load_history
from observation.log_pages import contract_page, fact_page, history_page, history_tail
from observation.log_view import fold
from observation.projections import execution_fact, execution_snapshot
from workflows.contract import ExecutionContract, TransitionRecord
from workflows.session_state import StatusChange

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")
NOW = datetime(2030, 1, 1, tzinfo=UTC)


@cache
def log_lines(name: str) -> tuple[str, tuple[dict, ...]]:
    sid, events = load_history((HISTORIES / f"{name}.json").read_text())
    lines = [json.loads(line_bytes(e)) for e in Chain().link_all(map_history(sid, events))]
    return sid, tuple(lines)


def recorded(name: str):
    """What the workflow decided, from its journal (independent of the log mapping)."""
    sid, events = load_history((HISTORIES / f"{name}.json").read_text())
    contracts: dict[str, ExecutionContract] = {}
    facts, history = [], []
    for e in events:
        for entry in journal_of(e):
            d = entry["data"]
            if entry["kind"] == "contract.created":
                contracts[d["execution_id"]] = ExecutionContract(**d, session_id=sid)
            elif entry["kind"] == "contract.transition":
                c = contracts[d["execution_id"]]
                c.transitions.append(TransitionRecord.model_validate(d))
                c.status = c.transitions[-1].to_status
                if c.is_terminal:
                    c.error_message = d.get("error_message")
                    # The log is RFC 8785 JSON: an object's keys come back sorted, and
                    # a fact's result_summary (a repr) shows them so.
                    c.result = json.loads(json.dumps(d.get("result"), sort_keys=True))
                    facts.append(execution_fact(c, c.transitions[-1].timestamp))
            elif entry["kind"] == "session.status":
                history.append(StatusChange(**{k: d[k] for k in (
                    "from_status", "to_status", "event", "fcmp")}, at=entry["at"]))
    return list(contracts.values()), facts, history


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_fold_gives_what_the_workflow_recorded(name):
    sid, lines = log_lines(name)
    view = fold(sid, lines)
    contracts, facts, history = recorded(name)
    assert ([execution_snapshot(c, NOW) for c in view.contracts]
            == [execution_snapshot(c, NOW) for c in contracts])
    assert [c.transitions for c in view.contracts] == [c.transitions for c in contracts]
    assert view.facts == facts
    assert view.history == history
    assert (view.last_seq, view.last_hash) == (len(lines), lines[-1]["event_hash"])
    assert view.closed and view.status == history[-1].to_status


def test_counters_of_the_demo():
    sid, lines = log_lines("demo")
    view = fold(sid, lines)
    assert (view.turns, view.replies, view.llm_calls) == (3, 2, 5)
    assert view.last_text.startswith("Done: groceries saved")
    assert sum(view.statuses.values()) == len(view.contracts)


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_prefix_folds_to_a_prefix(name):
    sid, lines = log_lines(name)
    for k in range(len(lines) + 1):
        view = fold(sid, lines[:k])
        assert [c.execution_id for c in view.contracts] == \
            [c.execution_id for c in fold(sid, lines).contracts][:len(view.contracts)]
        assert view.last_seq == k


# -- pages over the log overlaid by the live query ------------------------------------


def _walk(page_of, limit: int) -> list:
    seen, offset = [], 0
    while True:
        page = page_of(offset, limit)
        seen += page.items
        if page.next_offset is None:
            return seen
        assert page.next_offset == offset + len(page.items) and page.items
        offset = page.next_offset


@given(logged=st.integers(0, 5), live_from=st.integers(0, 5), limit=st.integers(1, 7))
def test_contract_pages_cover_log_and_live_exactly_once(logged, live_from, limit):
    """The log has the first ``logged`` contracts of the demo; the live query knows
    those from ``live_from`` on (the current run), with a newer status."""
    sid, lines = log_lines("demo")
    full = fold(sid, lines)
    later = {c.execution_id for c in full.contracts[logged:]}
    view = fold(sid, [line for line in lines if not later & {
        line["payload"].get("work_item_id"), line["payload"].get("execution_id")}])
    assert len(view.contracts) == logged
    live = [execution_snapshot(c, NOW).model_copy(update={"last_actor": "live"})
            for c in full.contracts[min(live_from, logged):]]
    got = _walk(lambda o, n: contract_page(view, live, o, n, NOW), limit)
    assert [s.execution_id for s in got] == [c.execution_id for c in full.contracts]
    fresh = {s.execution_id for s in live}
    assert all((s.last_actor == "live") == (s.execution_id in fresh) for s in got)
    page = contract_page(view, live, 0, limit, NOW)
    assert (page.total, page.terminal, page.active) == (5, 5, 0)


def test_timeline_page_carries_the_transitions_of_its_contracts():
    sid, lines = log_lines("demo")
    view = fold(sid, lines)
    page = contract_page(view, [], 1, 2, NOW)
    ids = {s.execution_id for s in page.items}
    assert {t.execution_id for t in page.transitions} == ids
    assert len(page.transitions) == sum(len(c.transitions) for c in view.contracts[1:3])
    assert list(page.transitions) == sorted(page.transitions,
                                            key=lambda t: (t.timestamp, t.execution_id))


@given(cut=st.integers(0, 5), limit=st.integers(1, 4))
def test_fact_pages_append_the_live_facts_the_log_lacks(cut, limit):
    sid, lines = log_lines("demo")
    full = fold(sid, lines)
    view = fold(sid, lines)
    view.facts, view.fact_ids = view.facts[:cut], {f.execution_id for f in view.facts[:cut]}
    got = _walk(lambda o, n: fact_page(view, full.facts, o, n), limit)
    assert got == full.facts


@given(logged=st.integers(0, 8), live_from=st.integers(0, 8), limit=st.integers(1, 5))
def test_history_tail_counts_changes_that_share_a_time(logged, live_from, limit):
    sid, lines = log_lines("demo")
    history = fold(sid, lines).history
    assert len({c.at for c in history}) < len(history)  # ties exist in this history
    # The live query's history starts a run, never inside one workflow task's changes.
    starts = [i for i in range(len(history)) if i == 0 or history[i].at != history[i - 1].at]
    live_from = max(i for i in starts if i <= min(live_from, logged))
    view = fold(sid, lines)
    view.history = history[:logged]
    assert history_tail(history[:logged], history[live_from:]) == history[logged:]
    assert _walk(lambda o, n: history_page(view, history[live_from:], o, n), limit) == history


def test_a_question_about_a_call_that_may_have_run_keeps_its_reason_code():
    """outcome_unknown: the approved call's server died holding it; the person is asked
    (the pending request says why, as a code) and answers "try again"."""
    sid, lines = log_lines("outcome_unknown")
    opened = [i for i, e in enumerate(lines) if e["type"] == "ISSUE_OPENED"]
    assert [lines[i]["payload"].get("reason_code") for i in opened] == [
        None, "outcome_unknown"]
    asking = fold(sid, lines[:opened[1] + 1])
    assert asking.pending is not None and asking.pending["reason_code"] == "outcome_unknown"
    assert asking.pending["options"] == ["done", "not done", "try again"]
    assert "reason_code" not in fold(sid, lines[:opened[0] + 1]).pending  # the approval
    (finished,) = [e["payload"] for e in lines if e["type"] == "WORK_ITEM_FINISHED"]
    assert (finished["outcome"], finished["reason_code"]) == ("completed", "retried_by_person")
    assert fold(sid, lines).pending is None
