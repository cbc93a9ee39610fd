"""The canonical session statechart of seed 004, declared once as data.

``auto`` mode is a *policy* over the same table (guards on two edges), not a
second machine: both modes share one set of states and one set of terminal
states. Every transition yields its FCMP output: ``conversation.state.changed``
and, for ``interaction.*`` events, the interaction event itself.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from workflows.fsm import Edge, TransitionTable


class SessionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_USER = "waiting_user"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class SessionEvent(StrEnum):
    TURN_STARTED = "turn.started"
    INTERACTION_REQUESTED = "interaction.requested"
    REPLY_ACCEPTED = "interaction.reply.accepted"
    AUTO_DECIDE_TIMEOUT = "interaction.auto_decide.timeout"
    REPLY_EXPIRED = "interaction.reply.expired"
    MESSAGE_ACCEPTED = "message.accepted"
    RESTART_PRESERVE_WAITING = "restart.preserve_waiting"
    RESTART_RECONCILE_FAILED = "restart.reconcile_failed"
    RUN_SUCCEEDED = "run.succeeded"
    CONVERSATION_ENDED = "conversation.ended"
    RUN_FAILED = "run.failed"
    RUN_CANCELED = "run.canceled"


class SessionPolicy(BaseModel):
    """The knobs that select a policy subset of the one table."""

    model_config = ConfigDict(frozen=True)
    mode: Literal["interactive", "auto"] = "interactive"
    interactive_require_user_reply: bool = True


DEFAULT_POLICY = SessionPolicy()


def _policy(p: object) -> SessionPolicy:
    return p if isinstance(p, SessionPolicy) else DEFAULT_POLICY


Q, R, W = SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.WAITING_USER
OK, KO, X = SessionStatus.SUCCEEDED, SessionStatus.FAILED, SessionStatus.CANCELED
E = SessionEvent

SESSION_TABLE: TransitionTable[SessionStatus, SessionEvent] = TransitionTable(
    name="session",
    states=SessionStatus,
    triggers=SessionEvent,
    initial=Q,
    terminal=frozenset({OK, KO, X}),
    stable=frozenset({W, OK, KO, X}),
    resumable=frozenset({W}),
    guards={
        # strict=false: a reply timeout makes the documented default decision.
        "auto_decide": lambda p: not _policy(p).interactive_require_user_reply,
        # strict: a reply timeout only expires the request (if configured).
        "strict": lambda p: _policy(p).interactive_require_user_reply,
    },
    edges=(
        Edge(Q, E.TURN_STARTED, R, doc="a worker picks up the turn"),
        Edge(Q, E.RUN_FAILED, KO, doc="the turn cannot start"),
        Edge(Q, E.RUN_CANCELED, X, doc="cancelled before it ran"),
        Edge(R, E.INTERACTION_REQUESTED, W, doc="the agent needs the person"),
        Edge(R, E.RUN_SUCCEEDED, OK, doc="the driver finished"),
        Edge(R, E.RUN_FAILED, KO, doc="a non-retryable failure"),
        Edge(R, E.RUN_CANCELED, X, doc="cancelled while running"),
        Edge(W, E.REPLY_ACCEPTED, Q, doc="the person answered the pending request"),
        Edge(W, E.AUTO_DECIDE_TIMEOUT, Q, guard="auto_decide",
             doc="no reply in time: the default decision is taken"),
        Edge(W, E.REPLY_EXPIRED, Q, guard="strict",
             doc="no reply in time: the request is withdrawn (timeout trigger)"),
        Edge(W, E.MESSAGE_ACCEPTED, Q, doc="a new message from the person starts a turn"),
        Edge(W, E.RESTART_PRESERVE_WAITING, W, doc="restart: pending request still valid"),
        Edge(W, E.RESTART_RECONCILE_FAILED, KO, doc="restart: pending request not valid"),
        Edge(W, E.CONVERSATION_ENDED, OK, doc="the person ended the conversation"),
        Edge(W, E.RUN_CANCELED, X, doc="cancelled while waiting"),
    ),
)


class FcmpEvent(BaseModel):
    """One FCMP protocol event (seed 004)."""

    model_config = ConfigDict(frozen=True)
    type: str
    payload: dict[str, Any]


class SessionTransition(BaseModel):
    model_config = ConfigDict(frozen=True)
    from_status: SessionStatus
    to_status: SessionStatus
    event: SessionEvent
    fcmp: tuple[FcmpEvent, ...]


def fire(
    status: SessionStatus,
    event: SessionEvent | str,
    policy: SessionPolicy = DEFAULT_POLICY,
    detail: dict[str, Any] | None = None,
) -> SessionTransition:
    """Apply ``event`` in ``status`` under ``policy``; raise if the table forbids it."""
    status = SessionStatus(status)
    target = SESSION_TABLE.target(status, event, policy)
    ev = SessionEvent(event)
    out: list[FcmpEvent] = []
    if ev.value.startswith("interaction."):
        out.append(FcmpEvent(type=ev.value, payload=dict(detail or {})))
    out.append(
        FcmpEvent(
            type="conversation.state.changed",
            payload={"from": status.value, "to": target.value, "trigger": ev.value},
        )
    )
    return SessionTransition(from_status=status, to_status=target, event=ev, fcmp=tuple(out))


def is_terminal(status: SessionStatus) -> bool:
    return SESSION_TABLE.is_terminal(status)


__all__ = [
    "SESSION_TABLE",
    "FcmpEvent",
    "SessionEvent",
    "SessionPolicy",
    "SessionStatus",
    "SessionTransition",
    "fire",
    "is_terminal",
]


# -- seed 003's names ------------------------------------------------------------------

#: Seed 003's run states -> the session status hitlflow writes for them; ``None``: not
#: applicable (the seed's document pipeline: a session has no such state, so no session
#: is ever in it). Sessions follow seed 004's statechart (``SessionStatus``).
#: docs/audit-log.md ("State names") gives the reasons; clients may pass either spelling.
SEED003_RUN_STATES: dict[str, SessionStatus | None] = {
    "CREATED": SessionStatus.QUEUED,
    "CLONED_INPUTS": None,
    "INGESTED": None,
    "FACTS_READY": None,
    "PLAN_READY": None,
    "DRAFTING": None,
    "DRAFT_READY": None,
    "LINKING": None,
    "VALIDATING": None,
    "FIXING": None,
    "READY_FOR_PR": None,
    "PR_OPENED": None,
    "DONE": SessionStatus.SUCCEEDED,
    "FAILED": SessionStatus.FAILED,
    "CANCELLED": SessionStatus.CANCELED,
}


# Every status name a client may pass in (filters): hitlflow's, then seed 003's.
CLIENT_STATUS_NAMES: tuple[str, ...] = (
    *(s.value for s in SessionStatus), *(n for n in SEED003_RUN_STATES))


def status_from_client(value: str) -> tuple[SessionStatus | None, bool]:
    """A status a client passed in: hitlflow's spelling (any case, ``waiting_user``) or
    seed 003's (``DONE``, ``CANCELLED``, ...). ``(status, True)``; ``(None, True)`` for a
    seed state with no counterpart (nothing is ever in it); ``ValueError`` if neither."""
    try:
        return SessionStatus(value.lower()), True
    except ValueError:
        pass
    key = value.upper()
    if key in SEED003_RUN_STATES:
        return SEED003_RUN_STATES[key], True
    accepted = [s.value for s in SessionStatus] + list(SEED003_RUN_STATES)
    raise ValueError(f"unknown status {value!r}; one of {', '.join(accepted)}")
