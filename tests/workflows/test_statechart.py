"""Seed 004 (the canonical session statechart): every scenario, without Temporal.

Each test names the seed 004 scenario it checks.
"""

from __future__ import annotations

from collections import deque

import pytest

from workflows.fsm import InvalidTransitionError
from workflows.statechart import (
    DEFAULT_POLICY,
    SESSION_TABLE,
    SessionEvent,
    SessionPolicy,
    SessionStatus,
    fire,
    is_terminal,
)

Q, R, W = SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.WAITING_USER
OK, KO, X = SessionStatus.SUCCEEDED, SessionStatus.FAILED, SessionStatus.CANCELED
E = SessionEvent

STRICT = SessionPolicy(mode="interactive", interactive_require_user_reply=True)
LENIENT = SessionPolicy(mode="interactive", interactive_require_user_reply=False)
AUTO = SessionPolicy(mode="auto", interactive_require_user_reply=False)
AUTO_STRICT = SessionPolicy(mode="auto", interactive_require_user_reply=True)
ALL_POLICIES = [STRICT, LENIENT, AUTO, AUTO_STRICT]


def policy_id(p: SessionPolicy) -> str:
    return f"{p.mode}-{'strict' if p.interactive_require_user_reply else 'lenient'}"


def run(events: list[SessionEvent], policy: SessionPolicy = DEFAULT_POLICY,
        start: SessionStatus = Q) -> list[SessionStatus]:
    status, seen = start, [start]
    for ev in events:
        status = fire(status, ev, policy).to_status
        seen.append(status)
    return seen


def reachable(policy: SessionPolicy) -> set[SessionStatus]:
    seen, todo = {SESSION_TABLE.initial}, deque([SESSION_TABLE.initial])
    while todo:
        s = todo.popleft()
        for trig in SESSION_TABLE.allowed_triggers(s, policy):
            t = SESSION_TABLE.target(s, trig, policy)
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


# -- Requirement: one canonical state machine -----------------------------------


def test_seed004_canonical_state_set() -> None:
    """Requirement: queued/running/waiting_user/succeeded/failed/canceled is the only set."""
    assert [s.value for s in SessionStatus] == [
        "queued", "running", "waiting_user", "succeeded", "failed", "canceled",
    ]
    assert SESSION_TABLE.initial is Q
    assert SESSION_TABLE.terminal == frozenset({OK, KO, X})
    assert SESSION_TABLE.resumable == frozenset({W})


@pytest.mark.parametrize(
    ("last", "terminal"),
    [(E.RUN_SUCCEEDED, OK), (E.RUN_FAILED, KO), (E.RUN_CANCELED, X)],
    ids=["succeeded", "failed", "canceled"],
)
@pytest.mark.parametrize("policy", ALL_POLICIES, ids=policy_id)
def test_seed004_canonical_lifecycle(
    last: SessionEvent, terminal: SessionStatus, policy: SessionPolicy
) -> None:
    """Scenario: canonical lifecycle -> queued, running, waiting_user, queued, running, terminal."""
    seen = run([E.TURN_STARTED, E.INTERACTION_REQUESTED, E.REPLY_ACCEPTED, E.TURN_STARTED, last],
               policy)
    assert seen == [Q, R, W, Q, R, terminal]
    assert is_terminal(seen[-1])
    assert not any(is_terminal(s) for s in seen[:-1])


# -- Requirement: explicit events drive the branches -------------------------------


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=policy_id)
def test_seed004_waiting_user_reply_accepted(policy: SessionPolicy) -> None:
    """Scenario: waiting_user reply event -> interaction.reply.accepted takes it to queued."""
    t = fire(W, E.REPLY_ACCEPTED, policy)
    assert (t.from_status, t.to_status, t.event) == (W, Q, E.REPLY_ACCEPTED)


@pytest.mark.parametrize("status", [Q, R, OK, KO, X], ids=str)
def test_seed004_reply_accepted_only_while_waiting_user(status: SessionStatus) -> None:
    """Scenario: waiting_user reply event -> a reply is only accepted in waiting_user."""
    with pytest.raises(InvalidTransitionError):
        fire(status, E.REPLY_ACCEPTED)


@pytest.mark.parametrize("policy", [LENIENT, AUTO], ids=["interactive", "auto"])
def test_seed004_strict_false_timeout_auto_decide(policy: SessionPolicy) -> None:
    """Scenario: strict=false timeout auto decision -> auto_decide.timeout, run to queued."""
    t = fire(W, E.AUTO_DECIDE_TIMEOUT, policy, {"decision": "default"})
    assert (t.from_status, t.to_status) == (W, Q)
    assert t.event == "interaction.auto_decide.timeout"
    assert E.AUTO_DECIDE_TIMEOUT in SESSION_TABLE.allowed_triggers(W, policy)
    # strict=false has no "expired" path: the timeout always decides.
    assert E.REPLY_EXPIRED not in SESSION_TABLE.allowed_triggers(W, policy)
    with pytest.raises(InvalidTransitionError):
        fire(W, E.REPLY_EXPIRED, policy)


@pytest.mark.parametrize("policy", [STRICT, AUTO_STRICT, DEFAULT_POLICY],
                         ids=["interactive", "auto", "default"])
def test_seed004_auto_decide_refused_when_reply_required(policy: SessionPolicy) -> None:
    """Scenario: strict=false timeout auto decision -> REFUSED when a reply is required."""
    assert policy.interactive_require_user_reply is True
    with pytest.raises(InvalidTransitionError) as info:
        fire(W, E.AUTO_DECIDE_TIMEOUT, policy)
    assert "interaction.auto_decide.timeout" in str(info.value)
    assert "interaction.auto_decide.timeout" not in info.value.allowed
    # The strict policy withdraws the request instead.
    assert fire(W, E.REPLY_EXPIRED, policy).to_status is Q


def test_seed004_default_policy_is_strict_interactive() -> None:
    """Scenario: strict=false timeout auto decision -> only when explicitly configured."""
    assert SessionPolicy() == DEFAULT_POLICY
    assert DEFAULT_POLICY.mode == "interactive"
    assert DEFAULT_POLICY.interactive_require_user_reply is True


# -- Requirement: restart recovery uses one recovery event ------------------------


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=policy_id)
def test_seed004_restart_preserve_waiting(policy: SessionPolicy) -> None:
    """Scenario: restart keeps waiting -> restart.preserve_waiting, still waiting_user."""
    t = fire(W, E.RESTART_PRESERVE_WAITING, policy)
    assert t.event == "restart.preserve_waiting"
    assert (t.from_status, t.to_status) == (W, W)
    # ... and the person's reply is still accepted afterwards.
    assert fire(t.to_status, E.REPLY_ACCEPTED, policy).to_status is Q


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=policy_id)
def test_seed004_restart_reconcile_failed(policy: SessionPolicy) -> None:
    """Scenario: restart recovery fails -> restart.reconcile_failed, run to failed."""
    t = fire(W, E.RESTART_RECONCILE_FAILED, policy)
    assert t.event == "restart.reconcile_failed"
    assert (t.from_status, t.to_status) == (W, KO)
    assert is_terminal(t.to_status)
    for ev in SessionEvent:
        with pytest.raises(InvalidTransitionError):
            fire(t.to_status, ev, policy)


@pytest.mark.parametrize("event", [E.RESTART_PRESERVE_WAITING, E.RESTART_RECONCILE_FAILED],
                         ids=str)
@pytest.mark.parametrize("status", [Q, R, OK, KO, X], ids=str)
def test_seed004_restart_events_only_converge_waiting_user(
    status: SessionStatus, event: SessionEvent
) -> None:
    """Requirement: restart recovery MUST use one recovery event -> for waiting_user only."""
    with pytest.raises(InvalidTransitionError):
        fire(status, event)


# -- Requirement: auto is a policy subset of interactive ----------------------------


def test_seed004_auto_terminal_states_same_as_interactive() -> None:
    """Scenario: auto terminal mapping is the same -> succeeded|failed|canceled only."""
    for policy in ALL_POLICIES:
        assert reachable(policy) & SESSION_TABLE.terminal == {OK, KO, X}
        assert reachable(policy) == set(SessionStatus)
    for status in SessionStatus:
        for ev in (E.RUN_SUCCEEDED, E.RUN_FAILED, E.RUN_CANCELED, E.CONVERSATION_ENDED,
                   E.RESTART_RECONCILE_FAILED):
            targets = set()
            for policy in ALL_POLICIES:
                try:
                    targets.add(fire(status, ev, policy).to_status)
                except InvalidTransitionError:
                    targets.add(None)
            assert len(targets) == 1, (status, ev, targets)


def test_seed004_auto_is_a_policy_subset_of_the_one_table() -> None:
    """Requirement: auto MUST be a policy subset -> same table, a subset of its edges."""
    all_edges = {(e.source, e.trigger, e.target) for e in SESSION_TABLE.edges}
    for policy in ALL_POLICIES:
        allowed = {
            (s, trig, SESSION_TABLE.target(s, trig, policy))
            for s in SessionStatus
            for trig in SESSION_TABLE.allowed_triggers(s, policy)
        }
        assert allowed <= all_edges
        # Only the two guarded edges differ between policies.
        missing = {(s, t) for s, t, _ in all_edges - allowed}
        assert missing <= {(W, E.AUTO_DECIDE_TIMEOUT), (W, E.REPLY_EXPIRED)}
        assert len(missing) == 1
    # The mode alone changes nothing: only interactive_require_user_reply selects.
    for strict in (True, False):
        a = SessionPolicy(mode="auto", interactive_require_user_reply=strict)
        i = SessionPolicy(mode="interactive", interactive_require_user_reply=strict)
        for s in SessionStatus:
            assert SESSION_TABLE.allowed_triggers(s, a) == SESSION_TABLE.allowed_triggers(s, i)


# -- Requirement: canonical state events map to FCMP events --------------------------


def test_seed004_fcmp_user_reply_resume() -> None:
    """Scenario: user reply resumes -> interaction.reply.accepted, then state.changed."""
    t = fire(W, E.REPLY_ACCEPTED, STRICT, {"reply": "yes", "request_id": "req-1"})
    assert [e.type for e in t.fcmp] == ["interaction.reply.accepted", "conversation.state.changed"]
    assert t.fcmp[0].payload == {"reply": "yes", "request_id": "req-1"}
    assert t.fcmp[1].payload == {
        "from": "waiting_user", "to": "queued", "trigger": "interaction.reply.accepted",
    }


def test_seed004_fcmp_auto_decision_resume() -> None:
    """Scenario: auto decision resumes -> interaction.auto_decide.timeout, then state.changed."""
    t = fire(W, E.AUTO_DECIDE_TIMEOUT, LENIENT)
    assert [e.type for e in t.fcmp] == [
        "interaction.auto_decide.timeout", "conversation.state.changed",
    ]
    assert t.fcmp[0].payload == {}
    assert t.fcmp[1].payload == {
        "from": "waiting_user", "to": "queued", "trigger": "interaction.auto_decide.timeout",
    }


@pytest.mark.parametrize(
    ("status", "event", "target"),
    [(Q, E.TURN_STARTED, R), (R, E.RUN_SUCCEEDED, OK), (R, E.RUN_FAILED, KO),
     (W, E.RESTART_RECONCILE_FAILED, KO), (W, E.MESSAGE_ACCEPTED, Q), (R, E.RUN_CANCELED, X)],
    ids=str,
)
def test_seed004_fcmp_state_changed_for_every_transition(
    status: SessionStatus, event: SessionEvent, target: SessionStatus
) -> None:
    """Requirement: key transitions output conversation.state.changed (and nothing else)."""
    t = fire(status, event, STRICT, {"ignored": True})
    assert [e.type for e in t.fcmp] == ["conversation.state.changed"]
    assert t.fcmp[0].payload == {"from": status.value, "to": target.value,
                                 "trigger": event.value}


def test_seed004_fcmp_interaction_requested_is_announced() -> None:
    """Requirement: interaction events are output as FCMP events before state.changed."""
    t = fire(R, E.INTERACTION_REQUESTED, STRICT, {"request_id": "req-9", "kind": "confirm"})
    assert [e.type for e in t.fcmp] == ["interaction.requested", "conversation.state.changed"]
    assert t.fcmp[0].payload == {"request_id": "req-9", "kind": "confirm"}


def test_seed004_fcmp_payload_is_a_copy_of_the_detail() -> None:
    """Requirement: FCMP output -> later changes to the caller's dict do not leak in."""
    detail = {"reply": "yes"}
    t = fire(W, E.REPLY_ACCEPTED, STRICT, detail)
    detail["reply"] = "no"
    assert t.fcmp[0].payload == {"reply": "yes"}


# -- refused events ----------------------------------------------------------------


@pytest.mark.parametrize("status", [OK, KO, X], ids=str)
def test_seed004_terminal_states_absorb_every_event(status: SessionStatus) -> None:
    """Scenario: auto terminal mapping -> terminal is final in every policy."""
    for policy in ALL_POLICIES:
        assert SESSION_TABLE.allowed_triggers(status, policy) == []
        for ev in SessionEvent:
            with pytest.raises(InvalidTransitionError) as info:
                fire(status, ev, policy)
            assert info.value.allowed == []


@pytest.mark.parametrize("bogus", ["interaction.reply", "REPLY_ACCEPTED", "", "reply.accepted"])
def test_seed004_unknown_event_rejected(bogus: str) -> None:
    """Requirement: only the explicit event set drives transitions."""
    with pytest.raises(InvalidTransitionError) as info:
        fire(W, bogus)
    assert info.value.trigger == bogus
    assert "interaction.reply.accepted" in info.value.allowed


def test_seed004_event_given_as_wire_string() -> None:
    """Requirement: explicit events -> the wire name of an event works like the enum."""
    t = fire(W, "interaction.reply.accepted")
    assert t.event is E.REPLY_ACCEPTED
    assert t.to_status is Q
