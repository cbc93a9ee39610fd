"""Seed 001 (ExecutionContract): every scenario that needs no Temporal.

Each test names the seed 001 scenario it checks. The parts of a scenario that
belong to the session workflow (GraphState, checkpoints, "graph execution
resumes") are tested with the workflow; here is the contract itself.
"""

from __future__ import annotations

import ast
import pathlib
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from workflows.contract import (
    ACTOR_CATEGORY,
    CONTRACT_TABLE,
    ActionType,
    Actor,
    ExecutionContract,
    ExecutionStatus,
    ExecutionStep,
    ResumeRefusedError,
    Trigger,
    check_idempotency,
    idempotency_key_for,
    summarize_action,
)
from workflows.fsm import InvalidTransitionError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = ExecutionStatus
TERMINAL = (S.COMPLETED, S.FAILED, S.REJECTED, S.CANCELLED)

# The transition table of seed 001, written out independently of CONTRACT_TABLE.
SEED_001_TRANSITIONS: dict[ExecutionStatus, dict[Trigger, ExecutionStatus]] = {
    S.PENDING: {Trigger.START: S.RUNNING},
    S.RUNNING: {
        Trigger.SUCCEED: S.COMPLETED,
        Trigger.FAIL: S.FAILED,
        Trigger.REJECT: S.REJECTED,
        Trigger.SUSPEND: S.WAITING,
        Trigger.CANCEL: S.CANCELLED,
    },
    S.WAITING: {Trigger.RESUME: S.RUNNING, Trigger.CANCEL: S.CANCELLED,
                Trigger.TIMEOUT: S.CANCELLED},
    S.COMPLETED: {},
    S.FAILED: {},
    S.REJECTED: {},
    S.CANCELLED: {},
}

# The shortest trigger path from PENDING to each status.
PATH_TO: dict[ExecutionStatus, list[Trigger]] = {
    S.PENDING: [],
    S.RUNNING: [Trigger.START],
    S.WAITING: [Trigger.START, Trigger.SUSPEND],
    S.COMPLETED: [Trigger.START, Trigger.SUCCEED],
    S.FAILED: [Trigger.START, Trigger.FAIL],
    S.REJECTED: [Trigger.START, Trigger.REJECT],
    S.CANCELLED: [Trigger.START, Trigger.CANCEL],
}


def tool_contract(execution_id: str = "exec-1", **kw: object) -> ExecutionContract:
    fields: dict[str, object] = dict(
        execution_id=execution_id,
        session_id="sess-1",
        action_type=ActionType.TOOL_CALL,
        action_detail={"server": "fs", "tool": "write_file",
                       "arguments": {"path": "a.txt", "content": "hi"}},
        created_at=T0,
    )
    fields.update(kw)
    return ExecutionContract(**fields)  # type: ignore[arg-type]


def drive(contract: ExecutionContract, triggers: list[Trigger], actor: Actor = Actor.TOOL_NODE,
          start: datetime = T0) -> ExecutionContract:
    for i, trig in enumerate(triggers, start=1):
        contract.transition(trig, actor=actor, timestamp=start + timedelta(seconds=i))
    return contract


def contract_in(status: ExecutionStatus, **kw: object) -> ExecutionContract:
    c = drive(tool_contract(**kw), PATH_TO[status])
    assert c.status == status
    return c


# -- Requirement: Execution Contract Lifecycle ---------------------------------


def test_seed001_creating_a_contract_for_tool_call() -> None:
    """Scenario: Creating a contract for tool call -> tool_call, own id, PENDING."""
    a = tool_contract("exec-a")
    b = tool_contract("exec-b")
    assert a.action_type == "tool_call"
    assert a.status is S.PENDING
    assert a.transitions == []
    assert a.result is None and a.error_message is None
    assert a.execution_id != b.execution_id


def test_seed001_creating_a_contract_for_ecs_request() -> None:
    """Scenario: Creating a contract for ECS request -> ecs_request, PENDING."""
    c = ExecutionContract(
        execution_id="exec-ecs",
        session_id="sess-1",
        action_type="ecs_request",
        action_detail={"kind": "confirm", "prompt": "Delete a.txt?"},
        created_at=T0,
    )
    assert c.action_type is ActionType.ECS_REQUEST
    assert c.status is S.PENDING
    assert not c.is_terminal


def test_seed001_contract_requires_an_execution_id() -> None:
    """Scenario: Creating a contract -> the contract SHALL have an ``execution_id``."""
    with pytest.raises(ValidationError):
        ExecutionContract(session_id="s", action_type="tool_call", created_at=T0)  # type: ignore[call-arg]


# -- Requirement: Execution Status Enumeration ---------------------------------


def test_seed001_valid_status_values() -> None:
    """Scenario: Valid status values -> exactly 7; 4 terminal; WAITING stable."""
    assert [s.name for s in ExecutionStatus] == [
        "PENDING", "RUNNING", "WAITING", "COMPLETED", "FAILED", "REJECTED", "CANCELLED",
    ]
    assert CONTRACT_TABLE.terminal == frozenset(TERMINAL)
    assert S.WAITING in CONTRACT_TABLE.stable
    assert S.WAITING not in CONTRACT_TABLE.terminal
    for status in TERMINAL:
        assert CONTRACT_TABLE.allowed_triggers(status) == []


@pytest.mark.parametrize("status", list(ExecutionStatus), ids=str)
def test_seed001_valid_state_transitions(status: ExecutionStatus) -> None:
    """Scenario: Valid state transitions -> the table is exactly seed 001's."""
    expected = SEED_001_TRANSITIONS[status]
    assert set(CONTRACT_TABLE.allowed_triggers(status)) == set(expected)
    for trigger in Trigger:
        if trigger in expected:
            assert CONTRACT_TABLE.target(status, trigger) == expected[trigger]
            c = contract_in(status)
            record = c.transition(trigger, actor=Actor.SYSTEM, timestamp=T0 + timedelta(hours=1))
            assert (record.from_status, record.to_status) == (status, expected[trigger])
            assert c.status == expected[trigger]
        else:
            with pytest.raises(InvalidTransitionError):
                CONTRACT_TABLE.target(status, trigger)


def test_seed001_pending_only_starts() -> None:
    """Scenario: Valid state transitions -> PENDING's only transition is start -> RUNNING."""
    assert CONTRACT_TABLE.allowed_triggers(S.PENDING) == [Trigger.START]


def test_seed001_waiting_cancel_and_timeout_both_cancel() -> None:
    """Scenario: Valid state transitions -> WAITING: CANCELLED via cancel or timeout."""
    for trigger in (Trigger.CANCEL, Trigger.TIMEOUT):
        c = contract_in(S.WAITING)
        c.transition(trigger, actor=Actor.TIMER, timestamp=T0 + timedelta(days=3))
        assert c.status is S.CANCELLED
        assert c.transitions[-1].trigger is trigger


@pytest.mark.parametrize("status", TERMINAL, ids=str)
@pytest.mark.parametrize("trigger", list(Trigger), ids=str)
def test_seed001_invalid_state_transition_rejected(
    status: ExecutionStatus, trigger: Trigger
) -> None:
    """Scenario: Invalid state transition rejected -> raise; status stays unchanged."""
    c = contract_in(status, result="r")
    before = c.model_dump()
    with pytest.raises(InvalidTransitionError) as info:
        c.transition(trigger, actor=Actor.SYSTEM, timestamp=T0 + timedelta(hours=1),
                     result="other", error_message="boom")
    assert c.model_dump() == before
    assert info.value.state == status.value
    assert info.value.allowed == []
    assert "terminal" in str(info.value)


def test_seed001_non_terminal_invalid_transition_names_the_allowed_triggers() -> None:
    """Scenario: Invalid state transition rejected -> the error says what is allowed."""
    c = contract_in(S.WAITING)
    before = c.model_dump()
    with pytest.raises(InvalidTransitionError) as info:
        c.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=T0 + timedelta(hours=1))
    assert c.model_dump() == before
    assert info.value.allowed == ["cancel", "resume", "timeout"]
    assert "succeed" in str(info.value) and "waiting" in str(info.value)


@pytest.mark.parametrize("bogus", ["START", "finish", "", "resume ", "completed"])
@pytest.mark.parametrize("status", [S.PENDING, S.RUNNING, S.WAITING, S.COMPLETED], ids=str)
def test_seed001_unknown_trigger_string_rejected_and_nothing_changed(
    status: ExecutionStatus, bogus: str
) -> None:
    """Scenario: Invalid state transition rejected -> an unknown trigger string is refused."""
    c = contract_in(status)
    before = c.model_dump()
    with pytest.raises(InvalidTransitionError) as info:
        c.transition(bogus, actor=Actor.SYSTEM, timestamp=T0 + timedelta(hours=1))
    assert c.model_dump() == before
    assert info.value.trigger == bogus
    assert info.value.allowed == sorted(SEED_001_TRANSITIONS[status])


def test_seed001_trigger_given_as_its_string_value_is_accepted() -> None:
    """Scenario: Valid state transitions -> a trigger's wire value works like the enum."""
    c = tool_contract()
    record = c.transition("start", actor="tool_node", timestamp=T0)
    assert record.trigger is Trigger.START
    assert c.status is S.RUNNING


# -- Requirement: Structured Execution Results ---------------------------------


def test_seed001_toolnode_reports_success_via_contract() -> None:
    """Scenario: ToolNode reports success -> COMPLETED, result, timestamp, actor=tool_node."""
    c = contract_in(S.RUNNING)
    when = T0 + timedelta(minutes=5)
    output = {"content": [{"type": "text", "text": "wrote 2 bytes"}]}
    record = c.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=when, result=output)
    assert c.status is S.COMPLETED
    assert c.result == output
    assert c.error_message is None
    assert c.transitions[-1] == record
    assert record.actor == "tool_node"
    assert record.actor_category == "tool"
    assert record.timestamp == when


def test_seed001_toolnode_reports_failure_via_contract() -> None:
    """Scenario: ToolNode reports failure -> FAILED, error_message, timestamp, actor=tool_node."""
    c = contract_in(S.RUNNING)
    when = T0 + timedelta(minutes=5)
    record = c.transition(Trigger.FAIL, actor=Actor.TOOL_NODE, timestamp=when,
                          error_message="ENOENT: no such file a.txt")
    assert c.status is S.FAILED
    assert c.error_message == "ENOENT: no such file a.txt"
    assert c.result is None
    assert record.actor == "tool_node"
    assert record.timestamp == when


def test_seed001_reasoningnode_reads_structured_contract_status() -> None:
    """Scenario: ReasoningNode reads structured contract status (not observation strings)."""
    ok = contract_in(S.RUNNING, execution_id="ok")
    ok.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=T0 + timedelta(hours=1),
                  result={"rows": 3})
    ko = contract_in(S.RUNNING, execution_id="ko")
    ko.transition(Trigger.FAIL, actor=Actor.TOOL_NODE, timestamp=T0 + timedelta(hours=1),
                  error_message="timeout")
    # A JSON round trip (how the contract crosses Temporal) keeps the structure.
    for c in (ok, ko):
        again = ExecutionContract.model_validate_json(c.model_dump_json())
        assert again == c
    assert (ok.status, ok.result, ok.error_message) == (S.COMPLETED, {"rows": 3}, None)
    assert (ko.status, ko.result, ko.error_message) == (S.FAILED, None, "timeout")


# -- Requirement: Execution Trace Recording ------------------------------------


def test_seed001_recording_a_state_transition_as_execution_step() -> None:
    """Scenario: Recording a state transition -> ExecutionStep with node_id, action, ..."""
    c = contract_in(S.RUNNING)
    when = T0 + timedelta(seconds=42)
    record = c.transition(Trigger.SUSPEND, actor=Actor.ECS_NODE, timestamp=when)
    step = ExecutionStep.from_record(record, turn=3)
    assert step.node_id == "ecs_node"
    assert step.action == {
        "contract_id": "exec-1",
        "from": "running",
        "to": "waiting",
        "trigger": "suspend",
    }
    assert step.timestamp == when
    assert step.metadata == {"actor_category": "interaction", "turn": 3}


def test_seed001_trace_available_for_diagnostic_review() -> None:
    """Scenario: Trace available for diagnostic review -> every transition, with its actor."""
    tool = tool_contract("exec-tool")
    ecs = ExecutionContract(execution_id="exec-ecs", session_id="sess-1",
                            action_type="ecs_request", created_at=T0)
    tool.transition(Trigger.START, actor=Actor.TOOL_NODE, timestamp=T0 + timedelta(seconds=1))
    ecs.transition(Trigger.START, actor=Actor.ECS_NODE, timestamp=T0 + timedelta(seconds=2))
    ecs.transition(Trigger.SUSPEND, actor=Actor.ECS_NODE, timestamp=T0 + timedelta(seconds=3))
    tool.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=T0 + timedelta(seconds=4),
                    result="ok")
    ecs.resume(actor=Actor.USER, timestamp=T0 + timedelta(seconds=5))
    ecs.transition(Trigger.SUCCEED, actor=Actor.ECS_NODE, timestamp=T0 + timedelta(seconds=6))

    trace = sorted(
        (ExecutionStep.from_record(r) for c in (tool, ecs) for r in c.transitions),
        key=lambda s: s.timestamp,
    )
    assert len(trace) == len(tool.transitions) + len(ecs.transitions) == 6
    assert [(s.action["contract_id"], s.action["to"], s.node_id) for s in trace] == [
        ("exec-tool", "running", "tool_node"),
        ("exec-ecs", "running", "ecs_node"),
        ("exec-ecs", "waiting", "ecs_node"),
        ("exec-tool", "completed", "tool_node"),
        ("exec-ecs", "running", "user"),
        ("exec-ecs", "completed", "ecs_node"),
    ]
    assert all(s.metadata["actor_category"] for s in trace)


def test_seed001_every_actor_has_a_category_and_unknown_actors_are_external() -> None:
    """Scenario: Trace available for diagnostic review -> each transition names its actor."""
    assert set(ACTOR_CATEGORY) == set(Actor)
    c = tool_contract()
    record = c.transition(Trigger.START, actor="mcp:custom", timestamp=T0)
    assert (record.actor, record.actor_category) == ("mcp:custom", "external")
    record = c.transition(Trigger.SUSPEND, actor=Actor.USER, timestamp=T0)
    assert (record.actor, record.actor_category) == ("user", "human")


# -- Requirement: Irreversible Operation Protection ----------------------------


def test_seed001_blocking_duplicate_irreversible_execution() -> None:
    """Scenario: Blocking duplicate irreversible execution -> creation rejected, told why."""
    key = idempotency_key_for({"tool": "write_file", "arguments": {"path": "a.txt"}})
    done = contract_in(S.RUNNING, irreversible=True, idempotency_key=key)
    done.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=T0 + timedelta(hours=1),
                    result={"written": 2})
    decision = check_idempotency([done], key)
    assert decision.allowed is False
    assert "already completed" in decision.reason
    assert decision.completed_execution_id == "exec-1"
    assert decision.completed_result == {"written": 2}


def test_seed001_allowing_retry_after_failure() -> None:
    """Scenario: Allowing retry after failure -> allowed; the retry has a new execution_id."""
    key = idempotency_key_for({"tool": "write_file", "arguments": {"path": "a.txt"}})
    failed = contract_in(S.FAILED, irreversible=True, idempotency_key=key)
    decision = check_idempotency([failed], key)
    assert decision.allowed is True
    assert decision.completed_execution_id is None
    retry = tool_contract("exec-2", irreversible=True, idempotency_key=key)
    assert retry.execution_id != failed.execution_id
    assert retry.status is S.PENDING
    # Once the retry completed, a third attempt is blocked.
    drive(retry, [Trigger.START, Trigger.SUCCEED])
    decision = check_idempotency([failed, retry], key)
    assert decision.allowed is False
    assert decision.completed_execution_id == "exec-2"


@pytest.mark.parametrize("status", [S.REJECTED, S.CANCELLED, S.WAITING, S.RUNNING], ids=str)
def test_seed001_only_a_completed_irreversible_contract_blocks_its_key(
    status: ExecutionStatus,
) -> None:
    """Scenario: Blocking duplicate irreversible execution -> only COMPLETED blocks."""
    c = contract_in(status, irreversible=True, idempotency_key="idem-x")
    assert check_idempotency([c], "idem-x").allowed is True


def test_seed001_idempotency_is_per_key() -> None:
    """Scenario: Blocking duplicate irreversible execution -> other keys and no key pass."""
    done = contract_in(S.COMPLETED, irreversible=True, idempotency_key="idem-a")
    assert check_idempotency([done], "idem-b").allowed is True
    assert check_idempotency([done], None).allowed is True
    assert check_idempotency([], "idem-a").allowed is True


def test_seed001_idempotency_key_is_the_same_for_the_same_operation() -> None:
    """Scenario: Blocking duplicate irreversible execution -> the key identifies the operation."""
    a = idempotency_key_for({"tool": "rm", "arguments": {"path": "x", "force": True}})
    b = idempotency_key_for({"arguments": {"force": True, "path": "x"}, "tool": "rm"})
    c = idempotency_key_for({"tool": "rm", "arguments": {"path": "y", "force": True}})
    assert a == b
    assert a != c
    assert a.startswith("idem-")


# -- Requirement: Suspend and Resume via Contract --------------------------------


def test_seed001_ecs_request_suspends_execution() -> None:
    """Scenario: ECS request suspends execution -> PENDING -> RUNNING -> WAITING."""
    c = ExecutionContract(execution_id="exec-ecs", session_id="sess-1",
                          action_type="ecs_request",
                          action_detail={"kind": "confirm", "prompt": "Go?"}, created_at=T0)
    drive(c, [Trigger.START, Trigger.SUSPEND], actor=Actor.ECS_NODE)
    assert [(r.from_status, r.to_status) for r in c.transitions] == [
        (S.PENDING, S.RUNNING), (S.RUNNING, S.WAITING),
    ]
    assert c.status is S.WAITING
    assert not c.is_terminal
    # The checkpoint (Temporal history) holds the contract as JSON: nothing is lost.
    assert ExecutionContract.model_validate_json(c.model_dump_json()) == c


def test_seed001_valid_resume_after_human_response() -> None:
    """Scenario: Valid resume after human response -> WAITING -> RUNNING -> COMPLETED."""
    c = contract_in(S.WAITING)
    record = c.resume(actor=Actor.USER, timestamp=T0 + timedelta(hours=2))
    assert (record.from_status, record.to_status, record.trigger) == (
        S.WAITING, S.RUNNING, Trigger.RESUME,
    )
    assert record.actor_category == "human"
    c.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=T0 + timedelta(hours=3),
                 result="done")
    assert [r.to_status for r in c.transitions[-3:]] == [S.WAITING, S.RUNNING, S.COMPLETED]
    assert c.status is S.COMPLETED


@pytest.mark.parametrize("status", [S.COMPLETED, S.CANCELLED, S.FAILED, S.REJECTED, S.RUNNING,
                                    S.PENDING], ids=str)
def test_seed001_invalid_resume_on_terminated_contract(status: ExecutionStatus) -> None:
    """Scenario: Invalid resume on terminated contract -> rejected with an error, no change."""
    c = contract_in(status)
    before = c.model_dump()
    with pytest.raises(ResumeRefusedError) as info:
        c.resume(actor=Actor.USER, timestamp=T0 + timedelta(hours=2))
    assert c.model_dump() == before
    assert status.value in str(info.value)
    assert "exec-1" in str(info.value)


# -- Timestamps come only from the arguments (determinism for Temporal) -----------


def test_seed001_timestamps_only_come_from_arguments() -> None:
    """Scenario: Recording a state transition -> the timestamp is the one passed in."""
    c = tool_contract()
    long_ago = datetime(1999, 12, 31, 23, 59, tzinfo=UTC)
    record = c.transition(Trigger.START, actor=Actor.TOOL_NODE, timestamp=long_ago)
    assert record.timestamp == long_ago
    assert c.transitions[0].timestamp == long_ago
    with pytest.raises(TypeError):
        c.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE)  # type: ignore[call-arg]
    assert c.status is S.RUNNING and len(c.transitions) == 1


CORE_MODULES = ["workflows/fsm.py", "workflows/contract.py", "workflows/statechart.py",
                "workflows/plan.py", "workflows/execution_views.py",
                "observation/projections.py"]
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "time_ns",
               "random", "uuid4", "uuid1"}


@pytest.mark.parametrize("module", CORE_MODULES)
def test_seed001_core_never_reads_a_clock(module: str) -> None:
    """Scenario: Recording a state transition -> no clock, no randomness in the pure core."""
    root = pathlib.Path(__file__).resolve().parents[2]
    tree = ast.parse((root / module).read_text())
    called = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert not called & CLOCK_CALLS, f"{module} calls {called & CLOCK_CALLS}"
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"time", "random", "uuid", "os", "temporalio"}


# -- action_summary (used by seed 000's projections) ------------------------------


def test_seed001_action_summary_is_a_readable_sentence() -> None:
    """Scenario: Creating a contract -> its action reads as a sentence, not a dict."""
    tool = summarize_action("tool_call", {"server": "fs", "tool": "write_file",
                                          "arguments": {"path": "a.txt"}})
    assert tool == "Call tool write_file(path='a.txt') on fs"
    ecs = summarize_action("ecs_request", {"kind": "confirm", "prompt": "Delete a.txt?"})
    assert ecs == "Ask the person to confirm: Delete a.txt?"
    step = summarize_action("plan_step", {"step": 2, "run": "make test"})
    assert step == "Run plan step 2: 'make test'"
    long = summarize_action("tool_call", {"tool": "t", "arguments": {"x": "y" * 500}})
    assert len(long) < 120 and long.endswith("…)")
