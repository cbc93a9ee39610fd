"""Seed 000 (execution observation): every scenario that needs no HTTP.

Each test names the seed 000 scenario it checks. The HTTP scenarios (status
codes, caching, 404) are tested with the API.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from observation.log_pages import contract_page
from observation.projections import (
    SUMMARY_LIMIT,
    ExecutionConsequenceView,
    ExecutionFact,
    ExecutionObserver,
    ExecutionStateEvent,
    at_reader_clock,
    consequence_view,
    execution_fact,
    execution_snapshot,
    execution_state_event,
    has_side_effects,
    merge_transitions,
    render_facts_for_prompt,
    render_for_prompt,
    timeline,
    transition_history,
)
from workflows.contract import (
    CONTRACT_TABLE,
    ActionType,
    Actor,
    ExecutionContract,
    ExecutionStatus,
    ResumeRefusedError,
    Trigger,
)
from workflows.fsm import derive_topology
from workflows.tables import topology

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = ExecutionStatus


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def tool_contract(execution_id: str = "exec-tool", *, created: float = 0,
                  irreversible: bool = False, **kw: object) -> ExecutionContract:
    return ExecutionContract(
        execution_id=execution_id,
        session_id="sess-1",
        action_type=ActionType.TOOL_CALL,
        action_detail={"server": "fs", "tool": "write_file",
                       "arguments": {"path": "notes/a.txt", "content": "hello"}},
        irreversible=irreversible,
        created_at=at(created),
        **kw,  # type: ignore[arg-type]
    )


def ecs_contract(execution_id: str = "exec-ecs", *, created: float = 0) -> ExecutionContract:
    return ExecutionContract(
        execution_id=execution_id,
        session_id="sess-1",
        action_type=ActionType.ECS_REQUEST,
        action_detail={"kind": "confirm", "prompt": "Overwrite notes/a.txt?"},
        created_at=at(created),
    )


def fire(c: ExecutionContract, steps: list[tuple[Trigger, Actor, float]], **kw: object) -> None:
    for i, (trigger, actor, when) in enumerate(steps):
        extra = kw if i == len(steps) - 1 else {}
        c.transition(trigger, actor=actor, timestamp=at(when), **extra)  # type: ignore[arg-type]


def suspended_then_completed(result: object = None) -> ExecutionContract:
    """PENDING -> RUNNING -> WAITING -> RUNNING -> COMPLETED, irreversible."""
    c = tool_contract(irreversible=True)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2),
             (Trigger.RESUME, Actor.USER, 30), (Trigger.SUCCEED, Actor.TOOL_NODE, 31)],
         result=result if result is not None else {"bytes": 5})
    return c


# -- Requirement: Execution Snapshot Projection ----------------------------------------


def test_seed000_snapshot_of_a_pending_contract() -> None:
    """Scenario: Snapshot of a PENDING contract."""
    snap = execution_snapshot(tool_contract(), now=at(5))
    dumped = snap.model_dump(mode="json")
    assert dumped["current_status"] == "pending"
    assert (snap.is_terminal, snap.is_stable, snap.is_resumable) == (False, False, False)
    assert snap.transition_count == 0
    assert (snap.last_trigger, snap.last_actor, snap.last_actor_category) == (None, None, None)
    assert snap.action_summary == "Call tool write_file(content='hello', path='notes/a.txt') on fs"
    assert snap.entered_state_at == at(0)
    assert snap.duration_in_state_ms == 5000


def test_seed000_snapshot_of_a_waiting_contract() -> None:
    """Scenario: Snapshot of a WAITING contract (irreversible)."""
    c = tool_contract(irreversible=True)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2)])
    snap = execution_snapshot(c, now=at(92.5))
    assert snap.current_status == "waiting"
    assert (snap.is_stable, snap.is_resumable, snap.has_side_effects) == (True, True, True)
    assert snap.is_terminal is False
    assert snap.entered_state_at == at(2)
    assert snap.duration_in_state_ms == 90_500
    assert snap.last_trigger == "suspend"
    assert snap.last_actor == "ecs_node"
    assert snap.last_actor_category == "interaction"
    assert snap.transition_count == 2


def test_seed000_snapshot_duration_never_negative() -> None:
    """Scenario: Snapshot of a WAITING contract -> duration from entering, clamped at 0."""
    c = tool_contract()
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 10)])
    assert execution_snapshot(c, now=at(9)).duration_in_state_ms == 0


def test_seed000_snapshot_of_a_terminal_contract() -> None:
    """Scenario: Snapshot of a terminal contract -> terminal, stable, not resumable, result."""
    c = suspended_then_completed(result={"bytes": 5})
    snap = execution_snapshot(c, now=at(100))
    assert snap.current_status == "completed"
    assert (snap.is_terminal, snap.is_stable, snap.is_resumable) == (True, True, False)
    assert snap.result == {"bytes": 5}
    assert snap.transition_count == 4
    assert snap.last_trigger == "succeed"


def test_seed000_snapshot_is_read_only() -> None:
    """Requirement: read-only projection -> taking a snapshot changes nothing."""
    c = suspended_then_completed()
    before = c.model_dump()
    execution_snapshot(c, now=at(100))
    consequence_view(c)
    timeline("sess-1", [c], now=at(100))
    execution_fact(c, now=at(100))
    assert c.model_dump() == before


# -- Requirement: Execution Consequence View --------------------------------------------


def test_seed000_consequence_view_of_a_successful_irreversible_tool_execution() -> None:
    """Scenario: Consequence view of a successful irreversible tool execution."""
    view = consequence_view(suspended_then_completed(result={"bytes": 5}))
    assert view.consequence_label == "SUCCESS"
    assert view.has_side_effects is True
    assert view.was_suspended is True
    assert view.is_still_pending is False
    assert view.result == {"bytes": 5}
    assert view.action_summary.startswith("Call tool write_file(")


def test_seed000_consequence_view_of_a_failed_tool_execution() -> None:
    """Scenario: Consequence view of a failed tool execution."""
    c = tool_contract(irreversible=True)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.FAIL, Actor.TOOL_NODE, 2)],
         error_message="EACCES: permission denied")
    view = consequence_view(c)
    assert view.consequence_label == "FAILED"
    assert view.was_suspended is False
    assert view.is_still_pending is False
    assert view.has_side_effects is False
    assert view.error_message == "EACCES: permission denied"
    assert view.result is None


def test_seed000_consequence_view_of_a_waiting_contract() -> None:
    """Scenario: Consequence view of a WAITING contract -> no side effects yet."""
    c = tool_contract(irreversible=True)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2)])
    view = consequence_view(c)
    assert view.consequence_label == "WAITING"
    assert view.is_still_pending is True
    assert view.has_side_effects is False
    assert view.was_suspended is True


@pytest.mark.parametrize(("trigger", "label"), [
    (Trigger.REJECT, "REJECTED"), (Trigger.CANCEL, "CANCELLED"), (Trigger.SUCCEED, "SUCCESS"),
])
def test_seed000_consequence_labels_of_other_endings(trigger: Trigger, label: str) -> None:
    """Requirement: Execution Consequence View -> every ending has its own label."""
    c = tool_contract(irreversible=True)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (trigger, Actor.USER, 2)])
    view = consequence_view(c)
    assert view.consequence_label == label
    assert view.has_side_effects is (trigger is Trigger.SUCCEED)
    assert view.is_still_pending is False


def test_seed000_reversible_success_has_no_side_effects() -> None:
    """Requirement: Execution Consequence View -> only irreversible success changed the world."""
    c = tool_contract(irreversible=False)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUCCEED, Actor.TOOL_NODE, 2)],
         result="content")
    view = consequence_view(c)
    assert (view.consequence_label, view.has_side_effects) == ("SUCCESS", False)


def test_seed000_reasoningnode_consumes_consequence_views_instead_of_raw_contracts() -> None:
    """Scenario: ReasoningNode consumes consequence views; the prompt shows the indicators."""
    done = suspended_then_completed(result="wrote 5 bytes")
    failed = tool_contract("exec-fail", created=50)
    fire(failed, [(Trigger.START, Actor.TOOL_NODE, 51), (Trigger.FAIL, Actor.TOOL_NODE, 52)],
         error_message="disk full")
    observer = ExecutionObserver("sess-1", [failed, done], now=at(60))
    views = observer.consequence_views()
    assert all(isinstance(v, ExecutionConsequenceView) for v in views)
    assert [v.execution_id for v in views] == ["exec-tool", "exec-fail"]  # by created_at
    text = render_for_prompt(views)
    lines = text.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[SUCCESS] Call tool write_file(")
    assert "has_side_effects=true" in lines[0]
    assert "was_suspended=true" in lines[0]
    assert "result: wrote 5 bytes" in lines[0]
    assert lines[1].startswith("[FAILED] ")
    assert "has_side_effects" not in lines[1] and "was_suspended" not in lines[1]
    assert "error: disk full" in lines[1]


def test_seed000_consequence_view_exposes_no_contract_internals() -> None:
    """Scenario: ReasoningNode SHALL NOT read ExecutionContract.status / transitions."""
    fields = set(ExecutionConsequenceView.model_fields)
    assert not fields & {"status", "transitions", "idempotency_key", "session_id",
                         "action_detail"}
    assert {"consequence_label", "has_side_effects", "was_suspended",
            "is_still_pending"} <= fields


def test_seed000_prompt_marks_a_pending_irreversible_action() -> None:
    """Scenario: injected prompt text -> an irreversible action not yet done says so."""
    c = tool_contract(irreversible=True)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2)])
    text = render_for_prompt([consequence_view(c)])
    assert text.startswith("[WAITING] ")
    assert "irreversible" in text
    assert "has_side_effects=true" not in text


# -- Requirement: Resume Alignment Check (its pure part) ------------------------------


def test_seed000_successful_alignment_before_resume() -> None:
    """Scenario: Successful alignment before resume -> snapshot first, counts match, resume."""
    waiting = ecs_contract()
    fire(waiting, [(Trigger.START, Actor.ECS_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2)])
    done = tool_contract("exec-done", created=3)
    fire(done, [(Trigger.START, Actor.TOOL_NODE, 4), (Trigger.SUCCEED, Actor.TOOL_NODE, 5)])
    observer = ExecutionObserver("sess-1", [waiting, done], now=at(10))
    snaps = observer.timeline().contracts
    resumable = [s.execution_id for s in snaps if s.is_resumable]
    assert resumable == ["exec-ecs"]  # matches the one expected WAITING contract
    waiting.resume(actor=Actor.USER, timestamp=at(11))
    assert waiting.status is S.RUNNING


def test_seed000_alignment_individual_contract_validation() -> None:
    """Scenario: Alignment warning on count mismatch -> each contract is still validated."""
    done = tool_contract("exec-done")
    fire(done, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUCCEED, Actor.TOOL_NODE, 2)])
    snap = ExecutionObserver("sess-1", [done], now=at(3)).snapshot("exec-done")
    assert snap.is_resumable is False
    with pytest.raises(ResumeRefusedError):
        done.resume(actor=Actor.USER, timestamp=at(4))
    with pytest.raises(KeyError):
        ExecutionObserver("sess-1", [done], now=at(3)).snapshot("exec-unknown")


# -- Requirement: Memory Execution Summary -------------------------------------------


def test_seed000_memory_recording_a_successful_tool_execution() -> None:
    """Scenario: Recording a successful tool execution -> execution_fact, truncated result."""
    c = suspended_then_completed(result="x" * 1000)
    fact = execution_fact(c, now=at(40))
    assert fact.type == "execution_fact"
    assert fact.action_summary.startswith("Call tool write_file(")
    assert fact.final_status == "completed"
    assert fact.model_dump(mode="json")["final_status"] == "completed"
    assert fact.irreversible is True
    assert fact.duration_ms == 31_000  # created at 0, completed at 31 s
    assert fact.result_summary is not None
    assert len(fact.result_summary) == SUMMARY_LIMIT
    assert fact.result_summary.endswith("…")
    assert fact.error_summary is None
    assert fact.recorded_at == at(40)


def test_seed000_memory_recording_a_failed_execution() -> None:
    """Scenario: Recording a failed execution -> failed, truncated error, no history."""
    c = tool_contract()
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.FAIL, Actor.TOOL_NODE, 2.25)],
         error_message="Traceback: " + "e" * 800)
    fact = execution_fact(c, now=at(3))
    assert fact.type == "execution_fact"
    assert fact.final_status == "failed"
    assert fact.error_summary is not None
    assert fact.error_summary.startswith("Traceback: ")
    assert len(fact.error_summary) == SUMMARY_LIMIT
    assert fact.result_summary is None
    assert fact.duration_ms == 2250
    # The full transition history is not stored in memory (the timeline has it).
    assert not [f for f in ExecutionFact.model_fields if "transition" in f]
    assert "transition" not in fact.model_dump_json()


def test_seed000_memory_short_results_are_kept_whole() -> None:
    """Scenario: Recording a successful tool execution -> a short result is not cut."""
    fact = execution_fact(suspended_then_completed(result={"bytes": 5}), now=at(40))
    assert fact.result_summary == "{'bytes': 5}"
    text = render_facts_for_prompt([fact])
    assert text.startswith("- Call tool write_file(")
    assert ": completed (irreversible); result: {'bytes': 5}" in text


def test_seed000_memory_cancelled_without_message_says_how_it_ended() -> None:
    """Scenario: Recording a failed execution -> other endings carry an error summary."""
    c = ecs_contract()
    fire(c, [(Trigger.START, Actor.ECS_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2),
             (Trigger.TIMEOUT, Actor.TIMER, 3)])
    fact = execution_fact(c, now=at(4))
    assert fact.final_status == "cancelled"
    assert fact.error_summary == "ended cancelled"


@pytest.mark.parametrize("path", [[], [Trigger.START], [Trigger.START, Trigger.SUSPEND]],
                         ids=["pending", "running", "waiting"])
def test_seed000_memory_only_terminal_contracts_become_facts(path: list[Trigger]) -> None:
    """Requirement: Memory Execution Summary -> recorded when a contract reaches terminal."""
    c = tool_contract()
    fire(c, [(t, Actor.TOOL_NODE, i + 1) for i, t in enumerate(path)])
    with pytest.raises(ValueError, match="only a terminal contract"):
        execution_fact(c, now=at(10))


# -- Requirement: Execution Timeline Query ---------------------------------------------


def test_seed000_per_execution_transition_history() -> None:
    """Scenario: Per-execution transition history (v1-minimal) -> 4 records, in order."""
    c = suspended_then_completed()
    history = transition_history(c)
    assert len(history) == 4
    assert [(r.from_status, r.to_status) for r in history] == [
        (S.PENDING, S.RUNNING), (S.RUNNING, S.WAITING), (S.WAITING, S.RUNNING),
        (S.RUNNING, S.COMPLETED),
    ]
    assert [r.timestamp for r in history] == sorted(r.timestamp for r in history)
    for r in history:
        dumped = r.model_dump(mode="json")
        assert set(dumped) >= {"execution_id", "from_status", "to_status", "trigger", "actor",
                               "actor_category", "timestamp"}
        assert dumped["execution_id"] == "exec-tool"
        assert all(dumped[k] not in (None, "") for k in dumped)
    assert [r.trigger for r in history] == ["start", "suspend", "resume", "succeed"]
    assert [r.actor_category for r in history] == ["tool", "interaction", "human", "tool"]


def test_seed000_full_session_timeline() -> None:
    """Scenario: Full session timeline (v2) -> ordered snapshots, merged transitions, counts."""
    tool = tool_contract("exec-tool", created=0)
    ecs = ecs_contract("exec-ecs", created=1)
    # Interleaved in time: the merge must order by timestamp across contracts.
    tool.transition(Trigger.START, actor=Actor.TOOL_NODE, timestamp=at(2))
    ecs.transition(Trigger.START, actor=Actor.ECS_NODE, timestamp=at(3))
    tool.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=at(4), result="ok")
    ecs.transition(Trigger.SUSPEND, actor=Actor.ECS_NODE, timestamp=at(5))
    tl = timeline("sess-1", [ecs, tool], now=at(10))  # given out of order on purpose
    assert tl.session_id == "sess-1"
    assert [c.execution_id for c in tl.contracts] == ["exec-tool", "exec-ecs"]
    assert [c.current_status for c in tl.contracts] == ["completed", "waiting"]
    assert (tl.total_contracts, tl.terminal_contracts, tl.active_contracts) == (2, 1, 1)
    assert tl.has_suspended is True
    assert [(t.execution_id, t.to_status) for t in tl.transitions] == [
        ("exec-tool", S.RUNNING), ("exec-ecs", S.RUNNING), ("exec-tool", S.COMPLETED),
        ("exec-ecs", S.WAITING),
    ]
    assert ExecutionObserver("sess-1", [tool, ecs], now=at(10)).timeline() == tl


def test_seed000_timeline_without_suspension() -> None:
    """Scenario: Full session timeline -> has_suspended is false when nothing waits."""
    tool = tool_contract()
    fire(tool, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUCCEED, Actor.TOOL_NODE, 2)])
    tl = timeline("sess-1", [tool], now=at(3))
    assert (tl.total_contracts, tl.terminal_contracts, tl.active_contracts) == (1, 1, 0)
    assert tl.has_suspended is False
    empty = timeline("sess-2", [], now=at(3))
    assert (empty.total_contracts, empty.contracts, empty.transitions) == (0, [], [])


# -- Requirement: State Machine Topology Exposure ---------------------------------------


def test_seed000_internal_topology_for_validation() -> None:
    """Scenario: Internal topology for validation (v1-minimal)."""
    topo = ExecutionObserver.topology()
    assert topo == topology("contract") == derive_topology(CONTRACT_TABLE)
    assert [n.status for n in topo.nodes] == [
        "pending", "running", "waiting", "completed", "failed", "rejected", "cancelled",
    ]
    flags = {n.status: (n.is_terminal, n.is_initial, n.is_stable, n.is_resumable)
             for n in topo.nodes}
    assert flags == {
        "pending": (False, True, False, False),
        "running": (False, False, False, False),
        "waiting": (False, False, True, True),
        "completed": (True, False, True, False),
        "failed": (True, False, True, False),
        "rejected": (True, False, True, False),
        "cancelled": (True, False, True, False),
    }
    edges = {(e.from_status, e.trigger, e.to_status) for e in topo.edges}
    assert edges == {
        ("pending", "start", "running"), ("running", "succeed", "completed"),
        ("running", "fail", "failed"), ("running", "reject", "rejected"),
        ("running", "suspend", "waiting"), ("running", "cancel", "cancelled"),
        ("waiting", "resume", "running"), ("waiting", "cancel", "cancelled"),
        ("waiting", "timeout", "cancelled"),
    }
    terminal = {n.status for n in topo.nodes if n.is_terminal}
    assert not [e for e in topo.edges if e.from_status in terminal]
    assert topo.resumable_statuses == ["waiting"]


def test_seed000_forbidden_transitions_included() -> None:
    """Scenario: Forbidden transitions included -> e.g. COMPLETED->RUNNING, WAITING->COMPLETED."""
    topo = ExecutionObserver.topology()
    forbidden = {(f.from_status, f.to_status): f.reason for f in topo.forbidden_transitions}
    assert "completed is terminal" in forbidden[("completed", "running")]
    assert "waiting" in forbidden[("waiting", "completed")]
    assert "resume -> running" in forbidden[("waiting", "completed")]
    assert all(forbidden.values())
    assert ("running", "completed") not in forbidden
    assert len(forbidden) == 7 * 6 - len({(e.from_status, e.to_status) for e in topo.edges})


# -- Requirement: Execution State SSE Event ------------------------------------------


def test_seed000_sse_event_on_state_transition() -> None:
    """Scenario: SSE event on state transition -> RUNNING -> COMPLETED via succeed."""
    c = tool_contract(irreversible=True)
    c.transition(Trigger.START, actor=Actor.TOOL_NODE, timestamp=at(1))
    record = c.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=at(2), result="ok")
    event = execution_state_event(c, record)
    payload = event.model_dump(mode="json")
    assert set(payload) == {
        "execution_id", "action_summary", "from_status", "to_status", "trigger",
        "actor_category", "is_terminal", "is_resumable", "has_side_effects", "timestamp",
    }
    assert set(ExecutionStateEvent.model_fields) == set(payload)
    assert payload["execution_id"] == "exec-tool"
    assert payload["action_summary"].startswith("Call tool write_file(")
    assert (payload["from_status"], payload["to_status"], payload["trigger"]) == (
        "running", "completed", "succeed",
    )
    assert payload["actor_category"] == "tool"
    assert (payload["is_terminal"], payload["is_resumable"], payload["has_side_effects"]) == (
        True, False, True,
    )
    assert event.timestamp == at(2)


def test_seed000_sse_event_for_suspension() -> None:
    """Scenario: SSE event on state transition -> one event per transition, any kind."""
    c = tool_contract(irreversible=True)
    events = []
    for i, (trigger, actor) in enumerate([(Trigger.START, Actor.TOOL_NODE),
                                          (Trigger.SUSPEND, Actor.ECS_NODE)]):
        events.append(execution_state_event(
            c, c.transition(trigger, actor=actor, timestamp=at(i + 1))))
    assert [(e.from_status, e.to_status) for e in events] == [
        (S.PENDING, S.RUNNING), (S.RUNNING, S.WAITING),
    ]
    waiting = events[-1]
    # has_side_effects: the snapshot's definition (an irreversible action), everywhere.
    assert (waiting.is_terminal, waiting.is_resumable, waiting.has_side_effects) == (
        False, True, True,
    )
    assert waiting.actor_category == "interaction"


# -- One definition each: has_side_effects, has_suspended; order; the reader's clock ---


def test_seed000_has_suspended_means_some_contract_was_suspended() -> None:
    """Scenario: Full session timeline -> has_suspended: a contract was suspended, even
    when it has finished since (not "something waits now")."""
    tl = timeline("sess-1", [suspended_then_completed()], now=at(40))
    assert (tl.terminal_contracts, tl.active_contracts, tl.has_suspended) == (1, 0, True)
    page = contract_page(None, [], 0, 10, at(40))
    assert page.has_suspended is False


def test_seed000_snapshot_and_timeline_agree_on_side_effects_of_a_waiting_call() -> None:
    c = tool_contract(irreversible=True)
    fire(c, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2)])
    assert has_side_effects(c) is execution_snapshot(c, at(3)).has_side_effects is True
    assert timeline("sess-1", [c], now=at(3)).contracts[0].has_side_effects is True


def test_seed000_equal_timestamps_keep_the_causal_order() -> None:
    """A step's running -> completed and the next step's pending -> running -> waiting at
    the same instant: the order recorded, not the execution ids' order."""
    first = tool_contract("z-step-1", created=0)
    second = ecs_contract("a-step-2", created=0)
    fire(first, [(Trigger.START, Actor.TOOL_NODE, 1), (Trigger.SUCCEED, Actor.TOOL_NODE, 5)])
    fire(second, [(Trigger.START, Actor.ECS_NODE, 5), (Trigger.SUSPEND, Actor.ECS_NODE, 5)])
    want = [("z-step-1", S.RUNNING), ("z-step-1", S.COMPLETED), ("a-step-2", S.RUNNING),
            ("a-step-2", S.WAITING)]
    merged = merge_transitions([first.transitions, second.transitions])
    assert [(t.execution_id, t.to_status) for t in merged] == want
    # The live overlay (a log-less page) orders the same way.
    snaps = [execution_snapshot(first, at(6)), execution_snapshot(second, at(6))]
    page = contract_page(None, snaps, 0, 10, at(6),
                         [*second.transitions, *first.transitions])
    assert [(t.execution_id, t.to_status) for t in page.transitions] == want


def test_seed000_live_snapshots_are_served_at_the_readers_clock() -> None:
    """Scenario: Snapshot of a WAITING contract -> duration since entering WAITING. A
    snapshot made in the workflow (workflow.now() stands still while it waits) says 0."""
    c = ecs_contract()
    fire(c, [(Trigger.START, Actor.ECS_NODE, 1), (Trigger.SUSPEND, Actor.ECS_NODE, 2)])
    frozen = execution_snapshot(c, at(2))
    assert frozen.duration_in_state_ms == 0
    assert at_reader_clock(frozen, at(27)).duration_in_state_ms == 25_000
    page = contract_page(None, [frozen], 0, 10, at(22), list(c.transitions))
    assert page.items[0].duration_in_state_ms == 20_000
    assert page.has_suspended is True
