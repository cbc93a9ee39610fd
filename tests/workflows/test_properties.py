"""Property-based tests (hypothesis) of the pure core.

Random trigger sequences over the contract FSM (seed 001) and the session
statechart (seed 004), random transition tables for ``derive_topology``,
random inputs for ``resolve()`` and random logs for ``replay()`` (seed 002).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows.contract import (
    CONTRACT_TABLE,
    ActionType,
    Actor,
    ExecutionContract,
    Trigger,
)
from workflows.execution_views import execution_snapshot
from workflows.fsm import (
    Edge,
    InvalidTransitionError,
    TransitionTable,
    derive_topology,
    render_markdown,
)
from workflows.plan import (
    Advance,
    Fail,
    FailReason,
    PlanReplayError,
    PlanState,
    Retry,
    StepApproved,
    StepCompleted,
    StepReset,
    StepSkipped,
    StepWaiting,
    TaskReset,
    TaskStarted,
    TaskStopped,
    VerifyOutcome,
    WindowLaunched,
    WindowLost,
    YieldOnFailHuman,
    YieldVerifyHuman,
    apply,
    replay,
    resolve,
)
from workflows.statechart import SESSION_TABLE, SessionEvent, SessionPolicy, SessionStatus, fire
from workflows.tables import TABLES

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROPS = settings(max_examples=200, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])
BOGUS = ["bogus", "START", "", "Resume", "interaction.reply", "run.done"]


# -- the contract FSM under random trigger sequences (seed 001) ------------------------

contract_triggers = st.lists(
    st.one_of(st.sampled_from(list(Trigger)), st.sampled_from(BOGUS)), max_size=30
)


@PROPS
@given(triggers=contract_triggers, actors=st.lists(st.sampled_from(list(Actor)), min_size=1),
       irreversible=st.booleans())
def test_contract_random_trigger_sequences(
    triggers: list[str], actors: list[Actor], irreversible: bool
) -> None:
    """Terminal absorbs; refused changes nothing; transition_count == len(transitions)."""
    c = ExecutionContract(execution_id="e", session_id="s", action_type=ActionType.TOOL_CALL,
                          action_detail={"tool": "t"}, irreversible=irreversible, created_at=T0)
    accepted = 0
    for i, trig in enumerate(triggers):
        actor = actors[i % len(actors)]
        when = T0 + timedelta(seconds=i + 1)
        known = trig in Trigger._value2member_map_
        edge = CONTRACT_TABLE.edge(c.status, Trigger(trig)) if known else None
        before = c.model_dump()
        was_terminal = c.is_terminal
        if edge is None:
            with pytest.raises(InvalidTransitionError) as info:
                c.transition(trig, actor=actor, timestamp=when, result="r", error_message="x")
            assert c.model_dump() == before
            assert info.value.allowed == sorted(CONTRACT_TABLE.allowed_triggers(c.status))
            continue
        assert not was_terminal, "a terminal state must absorb every trigger"
        record = c.transition(trig, actor=actor, timestamp=when)
        accepted += 1
        assert record.from_status == before["status"]
        assert record.to_status == edge.target == c.status
        assert record.timestamp == when
        assert record.actor == actor.value
        assert c.transitions[-1] == record
    snap = execution_snapshot(c, T0 + timedelta(days=1))
    assert len(c.transitions) == accepted == snap.transition_count
    # The records form one chain from the initial state to the current one.
    chain = [CONTRACT_TABLE.initial] + [t.to_status for t in c.transitions]
    assert [t.from_status for t in c.transitions] == chain[:-1]
    assert chain[-1] == c.status == snap.current_status
    assert snap.is_terminal == (c.status in CONTRACT_TABLE.terminal)
    assert snap.last_trigger == (c.transitions[-1].trigger.value if c.transitions else None)


# -- the session statechart under random events and policies (seed 004) ---------------

policies = st.builds(SessionPolicy, mode=st.sampled_from(["interactive", "auto"]),
                     interactive_require_user_reply=st.booleans())
session_events = st.lists(
    st.one_of(st.sampled_from(list(SessionEvent)), st.sampled_from(BOGUS)), max_size=30
)


@PROPS
@given(policy=policies, events=session_events)
def test_session_random_event_sequences(policy: SessionPolicy, events: list[str]) -> None:
    """Terminal absorbs; refused changes nothing; every transition has its FCMP output."""
    status = SESSION_TABLE.initial
    transitions = []
    for ev in events:
        known = ev in SessionEvent._value2member_map_
        edge = SESSION_TABLE.edge(status, SessionEvent(ev), policy) if known else None
        if edge is None:
            with pytest.raises(InvalidTransitionError):
                fire(status, ev, policy)
            continue
        assert status not in SESSION_TABLE.terminal, "a terminal state must absorb"
        t = fire(status, ev, policy, {"n": len(transitions)})
        assert (t.from_status, t.to_status) == (status, edge.target)
        changed = t.fcmp[-1]
        assert changed.type == "conversation.state.changed"
        assert changed.payload == {"from": status.value, "to": t.to_status.value, "trigger": ev}
        if ev.startswith("interaction."):
            assert [e.type for e in t.fcmp] == [ev, "conversation.state.changed"]
            assert t.fcmp[0].payload == {"n": len(transitions)}
        else:
            assert len(t.fcmp) == 1
        transitions.append(t)
        status = t.to_status
    chain = [SESSION_TABLE.initial] + [t.to_status for t in transitions]
    assert [t.from_status for t in transitions] == chain[:-1]


@PROPS
@given(policy=policies, status=st.sampled_from(list(SessionStatus)))
def test_session_allowed_triggers_agree_with_fire(
    policy: SessionPolicy, status: SessionStatus
) -> None:
    """The allowed list (shown in errors and the UI) is exactly what fire() accepts."""
    accepted = set()
    for ev in SessionEvent:
        try:
            fire(status, ev, policy)
        except InvalidTransitionError as err:
            assert err.allowed == sorted(SESSION_TABLE.allowed_triggers(status, policy))
        else:
            accepted.add(ev)
    assert accepted == set(SESSION_TABLE.allowed_triggers(status, policy))
    if status in SESSION_TABLE.terminal:
        assert accepted == set()


# -- topology agrees with the table: the declared ones and random ones -----------------


@st.composite
def random_tables(draw: st.DrawFn) -> TransitionTable:
    n = draw(st.integers(2, 6))
    m = draw(st.integers(1, 5))
    states_enum = StrEnum("States", {f"S{i}": f"s{i}" for i in range(n)})  # type: ignore[misc]
    trig_enum = StrEnum("Trigs", {f"T{j}": f"t{j}" for j in range(m)})  # type: ignore[misc]
    states, trigs = list(states_enum), list(trig_enum)
    terminal = frozenset(draw(st.sets(st.sampled_from(states[1:]))))
    open_states = [s for s in states if s not in terminal]
    pairs = draw(st.sets(st.tuples(st.sampled_from(open_states), st.sampled_from(trigs))))
    edges = tuple(Edge(s, t, draw(st.sampled_from(states))) for s, t in sorted(pairs))
    return TransitionTable(
        name="random",
        states=states_enum,
        triggers=trig_enum,
        initial=states[0],
        terminal=terminal,
        stable=frozenset(draw(st.sets(st.sampled_from(states)))) | terminal,
        resumable=frozenset(draw(st.sets(st.sampled_from(open_states)))),
        edges=edges,
    )


def check_topology(table: TransitionTable) -> None:
    topo = derive_topology(table)
    states = list(table.states)
    assert [n.status for n in topo.nodes] == [str(s) for s in states]
    for node, s in zip(topo.nodes, states, strict=True):
        assert node.is_terminal == (s in table.terminal)
        assert node.is_initial == (s == table.initial)
        assert node.is_stable == (s in table.stable)
        assert node.is_resumable == (s in table.resumable)
    assert [(e.from_status, e.trigger, e.to_status, e.guard) for e in topo.edges] == [
        (str(e.source), str(e.trigger), str(e.target), e.guard) for e in table.edges
    ]
    allowed = {(str(e.source), str(e.target)) for e in table.edges}
    every = {(str(a), str(b)) for a, b in itertools.permutations(states, 2)}
    forbidden = [(f.from_status, f.to_status) for f in topo.forbidden_transitions]
    assert len(forbidden) == len(set(forbidden))
    assert set(forbidden) == every - allowed
    assert all(f.reason for f in topo.forbidden_transitions)
    terminal = {str(s) for s in table.terminal}
    assert not [e for e in topo.edges if e.from_status in terminal]
    for f in topo.forbidden_transitions:
        if f.from_status in terminal:
            assert "terminal" in f.reason
    assert topo.initial_status == str(table.initial)
    assert set(topo.terminal_statuses) == terminal
    assert set(topo.resumable_statuses) == {str(s) for s in table.resumable}
    assert set(topo.stable_statuses) == {str(s) for s in table.stable}
    doc = render_markdown(table)
    for e in table.edges:
        assert f"| `{e.source}` | `{e.trigger}` | `{e.target}` |" in doc
    for f in topo.forbidden_transitions:
        assert f"- `{f.from_status}` -> `{f.to_status}`: {f.reason}" in doc


@pytest.mark.parametrize("name", sorted(TABLES))
def test_declared_topology_agrees_with_table(name: str) -> None:
    """Invariant 2: topology, forbidden list and docs are derived from the one table."""
    check_topology(TABLES[name])


@PROPS
@given(table=random_tables())
def test_random_topology_agrees_with_table(table: TransitionTable) -> None:
    """Invariant 2: derive_topology agrees with any table, not just the two declared."""
    check_topology(table)


@PROPS
@given(table=random_tables(), data=st.data())
def test_random_table_target_agrees_with_edges(table: TransitionTable, data: st.DataObject) -> None:
    """The table's validation accepts exactly its rows."""
    state = data.draw(st.sampled_from(list(table.states)))
    trig = data.draw(st.sampled_from(list(table.triggers)))
    rows = [e for e in table.edges if e.source == state and e.trigger == trig]
    if rows:
        assert table.target(state, trig) == rows[0].target
    else:
        with pytest.raises(InvalidTransitionError):
            table.target(state, trig)


def test_table_refuses_a_terminal_state_with_an_outbound_edge() -> None:
    """Seed 001: terminal states have no transitions out; the table itself refuses one."""
    with pytest.raises(ValueError, match="terminal"):
        TransitionTable(
            name="bad", states=SessionStatus, triggers=SessionEvent,
            initial=SessionStatus.QUEUED, terminal=frozenset({SessionStatus.FAILED}),
            stable=frozenset(), resumable=frozenset(),
            edges=(Edge(SessionStatus.FAILED, SessionEvent.TURN_STARTED, SessionStatus.RUNNING),),
        )


def test_table_refuses_duplicate_rows_and_unknown_guards() -> None:
    """Invariant 2: one row per (state, trigger); guards are declared."""
    base = dict(name="bad", states=SessionStatus, triggers=SessionEvent,
                initial=SessionStatus.QUEUED, terminal=frozenset(), stable=frozenset(),
                resumable=frozenset())
    row = Edge(SessionStatus.QUEUED, SessionEvent.TURN_STARTED, SessionStatus.RUNNING)
    with pytest.raises(ValueError, match="declared twice"):
        TransitionTable(**base, edges=(row, row))  # type: ignore[arg-type]
    guarded = Edge(SessionStatus.QUEUED, SessionEvent.TURN_STARTED, SessionStatus.RUNNING,
                   guard="nope")
    with pytest.raises(ValueError, match="unknown guard"):
        TransitionTable(**base, edges=(guarded,))  # type: ignore[arg-type]


# -- resolve() is total ----------------------------------------------------------------


@PROPS
@given(
    exit_code=st.integers(-255, 255),
    outcome=st.sampled_from(list(VerifyOutcome)),
    on_fail=st.sampled_from([None, "retry", "human"]),
    retry_count=st.integers(0, 20),
    max_retries=st.integers(0, 20),
    feedback=st.text(max_size=20),
)
def test_resolve_is_total(exit_code: int, outcome: VerifyOutcome, on_fail: str | None,
                          retry_count: int, max_retries: int, feedback: str) -> None:
    """Seed 002 §6: resolve() never raises; Advance only when exit_code == 0."""
    action = resolve(exit_code, outcome, on_fail, retry_count, max_retries,  # type: ignore[arg-type]
                     feedback=feedback)
    assert action == resolve(exit_code, outcome, on_fail, retry_count, max_retries,  # type: ignore[arg-type]
                             feedback=feedback)
    ok_run = exit_code == 0
    if isinstance(action, Advance):
        assert ok_run and outcome in (VerifyOutcome.NOT_CONFIGURED, VerifyOutcome.PASSED)
    elif isinstance(action, YieldVerifyHuman):
        assert ok_run and outcome is VerifyOutcome.HUMAN_REQUIRED
    else:
        assert not ok_run or outcome is VerifyOutcome.FAILED
        assert action.feedback  # a failure always says why
        if feedback:
            assert action.feedback == feedback
        if isinstance(action, Retry):
            assert on_fail == "retry" and retry_count < max_retries
            assert action.attempt == retry_count + 1
        elif isinstance(action, YieldOnFailHuman):
            assert on_fail == "human"
        else:
            assert isinstance(action, Fail)
            expected = (FailReason.RETRIES_EXHAUSTED if on_fail == "retry"
                        else FailReason.NO_FAILURE_ROUTE)
            assert action.reason is expected
            assert on_fail != "human"


# -- replay() under random logs (seed 002 rules 1-2, V4, V11) ---------------------------

STEPS = 3


def plan_events(step: st.SearchStrategy[int]) -> st.SearchStrategy:
    return st.one_of(
        st.builds(TaskStarted, task=st.just("t"), steps=st.just(STEPS)),
        st.builds(TaskStopped, reason=st.sampled_from(["completed", "retries_exhausted",
                                                       "no_failure_route", "canceled"]),
                  step=st.none() | step),
        st.builds(StepCompleted, step=step, exit_code=st.sampled_from([0, 0, 1])),
        st.builds(StepApproved, step=step),
        st.builds(StepSkipped, step=step),
        st.builds(StepWaiting, step=step,
                  reason=st.sampled_from(["verify_human", "on_fail_human", "gate"])),
        st.builds(WindowLaunched, step=step, command=st.just("x")),
        st.builds(WindowLost, step=step, reason=st.just("gone")),
        st.builds(StepReset, step=step, to_step=st.integers(0, STEPS + 1),
                  reason=st.sampled_from(["retry", "human"]), retry_count=st.integers(0, 3)),
        st.just(TaskReset()),
    )


EVENTS_AT = {k: plan_events(st.just(k)) for k in range(STEPS + 2)}
OFFSETS = st.sampled_from([0, 0, 0, -1, None])
ANY_STEP = st.integers(0, STEPS + 1)


@PROPS
@given(data=st.data(), length=st.integers(0, 40))
def test_replay_random_logs_keep_the_rules(data: st.DataObject, length: int) -> None:
    """state = replay(log); the cursor stays in the plan and only moves back on a reset."""
    state = PlanState(steps=STEPS)
    accepted = []
    reached_end = False
    for _ in range(length):
        # Mostly events at (or next to) the cursor, so that logs get far into the plan.
        offset = data.draw(OFFSETS)
        at = data.draw(ANY_STEP) if offset is None else max(0, state.current_step + offset)
        event = data.draw(EVENTS_AT[at])
        before = state.model_dump()
        try:
            after = apply(state, event)
        except PlanReplayError:
            assert state.model_dump() == before
            continue
        accepted.append(event)
        assert 0 <= after.current_step <= STEPS
        reached_end |= after.current_step == STEPS
        assert after.completed_steps == sorted(set(after.completed_steps))
        assert all(i < after.current_step for i in after.completed_steps)
        assert after.retry_count >= 0
        delta = after.current_step - state.current_step
        if delta > 0:
            assert delta == 1
            assert isinstance(event, StepApproved | StepSkipped) or (
                isinstance(event, StepCompleted) and event.exit_code == 0
            )
        elif delta < 0:
            yield_point = isinstance(event, StepWaiting) and event.reason == "verify_human"
            assert isinstance(event, StepReset | TaskReset) or (yield_point and delta == -1)
        if state.stopped is not None:
            assert isinstance(event, TaskReset)
        if after.stopped is not None:
            assert isinstance(event, TaskStopped)
        state = after
    assert replay(STEPS, accepted) == state
    event_types = {type(e).__name__ for e in accepted}
    hypothesis.target(float(len(event_types)), label="event types accepted")
    hypothesis.target(float(reached_end), label="reached the end of the plan")
