"""Every log event type, declared once: the name on the wire, where it comes from,
its payload model (where one exists) and its schema in ``schemas/event.schema.json``.

The mapper (``exporter/mapping.py``, ``activities.py``, ``gates.py``, ``journal.py``)
writes these names; the three folds over a log (``exporter/snapshot.py``,
``log_view.py``, ``telemetry/project.py``) dispatch on them through :class:`LogFold`;
the SSE stream picks with :func:`is_sse`. The names are byte-identical to the log's
(seed 003's are binding): change one and every saved log changes.

Read-your-writes (``log_view.py``) counts the workflow's journal entries a log
reflects by counting their *lead* lines, the first line each entry makes:
:data:`JOURNAL_KINDS` declares them, the journal mapper checks every entry it maps
against it, and the log view counts with :func:`is_journal_lead`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel

from observation.projections import ExecutionStateEvent
from workflows.io import LLMCallFailed, LLMCallFinished, LLMCallStarted
from workflows.plan import PLAN_EVENT_TYPES, PlanEvent
from workflows.statechart import SessionEvent

# -- the names ------------------------------------------------------------------------

# The session's run (Temporal's workflow runs): from history.
RUN_CREATED = "RUN_CREATED"
SESSION_FORKED = "SESSION_FORKED"  # a fork's line 1: its parent, seq and line hash (issue 27)
RUN_CANCEL_REQUESTED = "RUN_CANCEL_REQUESTED"
RUN_CONTINUED_AS_NEW = "RUN_CONTINUED_AS_NEW"
RUN_COMPLETED = "RUN_COMPLETED"
RUN_FAILED = "RUN_FAILED"
# Activities: from history.
LLM_CALL_STARTED = "LLM_CALL_STARTED"
LLM_CALL_FINISHED = "LLM_CALL_FINISHED"
LLM_CALL_FAILED = "LLM_CALL_FAILED"
TOOL_CALL_STARTED = "TOOL_CALL_STARTED"
TOOL_RESULT = "tool_result"
TOOLS_LISTED = "TOOLS_LISTED"
ARTIFACT_WRITTEN = "ARTIFACT_WRITTEN"
GATE_RUN_STARTED = "GATE_RUN_STARTED"
GATE_RUN_FINISHED = "GATE_RUN_FINISHED"
# What the workflow decided: from its journal.
RUN_STATE_CHANGED = "RUN_STATE_CHANGED"
ISSUE_OPENED = "ISSUE_OPENED"  # a request to the person (seed 004's pending request)
ISSUE_RESOLVED = "ISSUE_RESOLVED"  # ... answered, decided or withdrawn
ISSUE_APPROVAL_RECORDED = "ISSUE_APPROVAL_RECORDED"  # one approval of several (issue 24)
STANDING_DECISION_REVOKED = "STANDING_DECISION_REVOKED"  # "do not ask again" undone
ISSUE_REMINDED = "ISSUE_REMINDED"  # the wait's reminder (issue 26)
ISSUE_ESCALATED = "ISSUE_ESCALATED"  # the wait's escalation: the request's addressees grow
TURN_INTERRUPTED = "TURN_INTERRUPTED"  # a message cut the agent's turn (issue 27)
REPLY_REFUSED = "interaction.reply.refused"
MESSAGE = "message"
PROVIDER_WAITING = "provider.waiting"
TEXT = "text"
WORK_ITEM_QUEUED = "WORK_ITEM_QUEUED"
WORK_ITEM_STARTED = "WORK_ITEM_STARTED"
WORK_ITEM_FINISHED = "WORK_ITEM_FINISHED"
EXECUTION_STATE = "execution_state"
# Seed 004's FCMP events, after the RUN_STATE_CHANGED they belong to: the session
# statechart's ``interaction.*`` triggers, then the state change itself.
CONVERSATION_STATE_CHANGED = "conversation.state.changed"
INTERACTION_REQUESTED = SessionEvent.INTERACTION_REQUESTED.value  # a request opens
FCMP_INTERACTION_TYPES: tuple[str, ...] = tuple(
    e.value for e in SessionEvent if e.value.startswith("interaction."))
FCMP_PREFIXES = ("conversation.", "interaction.")

#: What a request says of who may answer it and on what (issue 24), on its ISSUE_OPENED;
#: each only when the workflow set it, so older histories export to the same bytes.
ISSUE_TERMS = ("asked", "digest", "approvers", "approvals_required", "rule", "separation_of_duties",
               "editable", "input_schema")
#: What a decision says of who made it and on what, on its ISSUE_RESOLVED.
DECISION_TERMS = ("principal", "digest", "edited_digest", "edited_by", "edited_arguments",
                  "approvals", "standing_decision", "via")

#: How a session's log ends (the last line of a closed session).
END_TYPES = (RUN_COMPLETED, RUN_FAILED)

# -- the table ------------------------------------------------------------------------

Source = Literal["history", "activity", "journal"]


@dataclass(frozen=True)
class LogEventType:
    name: str  # the ``type`` of the log line
    source: Source  # history event, activity, or workflow journal entry
    payload: type[BaseModel] | None = None  # the model its payload is a dump of
    schema: str | None = None  # its ``$defs`` entry in schemas/event.schema.json
    seed: bool = False  # seed 003 requires it
    sse: bool = False  # the HTTP API streams it


def _plan_models() -> dict[str, type[BaseModel]]:
    union = get_args(get_args(PlanEvent)[0])
    return {cls.model_fields["type"].default: cls for cls in union}


_PLAN_MODELS = _plan_models()
#: A seed 002 plan event model -> its log type (the model's ``type`` literal).
PLAN_TYPE_OF: Mapping[type[BaseModel], str] = {m: t for t, m in _PLAN_MODELS.items()}
_T = LogEventType
EVENT_TYPES: tuple[LogEventType, ...] = (
    _T(RUN_CREATED, "history", schema="RUN_CREATED", seed=True),
    _T(SESSION_FORKED, "history", schema="SESSION_FORKED"),
    _T(RUN_CANCEL_REQUESTED, "history"),
    _T(RUN_CONTINUED_AS_NEW, "history"),
    _T(RUN_COMPLETED, "history", schema="RUN_ENDED", seed=True),
    _T(RUN_FAILED, "history", schema="RUN_ENDED", seed=True),
    _T(LLM_CALL_STARTED, "activity", LLMCallStarted, "LLM_CALL_STARTED", seed=True),
    _T(LLM_CALL_FINISHED, "activity", LLMCallFinished, "LLM_CALL_FINISHED", seed=True),
    _T(LLM_CALL_FAILED, "activity", LLMCallFailed, "LLM_CALL_FAILED", seed=True),
    _T(TOOL_CALL_STARTED, "activity"),
    _T(TOOL_RESULT, "activity", schema="tool_result", sse=True),
    _T(TOOLS_LISTED, "activity"),
    _T(ARTIFACT_WRITTEN, "activity", schema="ARTIFACT_WRITTEN", seed=True),
    _T(GATE_RUN_STARTED, "activity", schema="GATE_RUN_STARTED", seed=True),
    _T(GATE_RUN_FINISHED, "activity", schema="GATE_RUN_FINISHED", seed=True),
    _T(RUN_STATE_CHANGED, "journal", schema="RUN_STATE_CHANGED", seed=True),
    _T(ISSUE_OPENED, "journal", schema="ISSUE_OPENED", seed=True),
    _T(ISSUE_RESOLVED, "journal", schema="ISSUE_RESOLVED", seed=True),
    _T(ISSUE_APPROVAL_RECORDED, "journal", schema="ISSUE_APPROVAL_RECORDED", sse=True),
    _T(STANDING_DECISION_REVOKED, "journal", schema="STANDING_DECISION_REVOKED", sse=True),
    _T(ISSUE_REMINDED, "journal", schema="ISSUE_REMINDED", sse=True),
    _T(ISSUE_ESCALATED, "journal", schema="ISSUE_ESCALATED", sse=True),
    _T(TURN_INTERRUPTED, "journal", schema="TURN_INTERRUPTED", sse=True),
    *(_T(t, "journal") for t in FCMP_INTERACTION_TYPES),
    _T(CONVERSATION_STATE_CHANGED, "journal", schema="conversation.state.changed", sse=True),
    _T(REPLY_REFUSED, "journal"),
    _T(MESSAGE, "journal"),
    _T(PROVIDER_WAITING, "journal", schema="provider.waiting", sse=True),
    _T(TEXT, "journal", schema="text", sse=True),
    _T(WORK_ITEM_QUEUED, "journal", schema="WORK_ITEM_QUEUED", seed=True),
    _T(WORK_ITEM_STARTED, "journal", schema="WORK_ITEM_STARTED", seed=True),
    _T(WORK_ITEM_FINISHED, "journal", schema="WORK_ITEM_FINISHED", seed=True),
    _T(EXECUTION_STATE, "journal", ExecutionStateEvent, "execution_state", sse=True),
    # seed 002's plan events: the event plus the journal entry's ``at``
    *(_T(t, "journal", _PLAN_MODELS[t]) for t in PLAN_EVENT_TYPES),
)
BY_NAME: Mapping[str, LogEventType] = {t.name: t for t in EVENT_TYPES}

#: Seed 003's required types that a session produces (gates: plan sessions).
SEED_TYPES = tuple(t.name for t in EVENT_TYPES if t.seed)
#: The types the HTTP API streams over SSE, and the prefix it streams whole.
SSE_TYPES = tuple(t.name for t in EVENT_TYPES if t.sse)
SSE_PREFIXES = ("interaction.",)


def is_sse(event_type: str) -> bool:
    return event_type in SSE_TYPES or event_type.startswith(SSE_PREFIXES)


# -- the journal's leads -----------------------------------------------------------------

#: The resolutions of an ISSUE_RESOLVED made by a ``reply.accepted`` entry (others
#: come after a RUN_STATE_CHANGED, resolved by the statechart event).
REPLY_RESOLUTIONS = frozenset({"answered", "auto_decided"})


@dataclass(frozen=True)
class JournalLead:
    """What the first log line of a journal entry of one kind is (its lead), and
    that no other line of the entry is one."""

    types: tuple[str, ...]
    when: Callable[[dict[str, Any]], bool] | None = None  # a test of its payload


def _a_reply(payload: dict[str, Any]) -> bool:
    return payload.get("resolution") in REPLY_RESOLUTIONS


def _decided_without_asking(payload: dict[str, Any]) -> bool:
    """The ISSUE_OPENED of a call a rule or a standing decision decided (the others
    follow the RUN_STATE_CHANGED of their ``interaction.requested``)."""
    return "auto_decision" in payload


#: Every journal kind (``workflows/session_state.py``'s ``JournalKind``) -> its lead.
JOURNAL_KINDS: Mapping[str, JournalLead] = {
    "session.status": JournalLead((RUN_STATE_CHANGED,)),
    "contract.created": JournalLead((WORK_ITEM_QUEUED,)),
    "contract.transition": JournalLead((EXECUTION_STATE,)),
    "reply.accepted": JournalLead((ISSUE_RESOLVED,), _a_reply),
    "reply.refused": JournalLead((REPLY_REFUSED,)),
    "message.accepted": JournalLead((MESSAGE,)),
    "assistant.text": JournalLead((TEXT,)),
    "llm.waiting": JournalLead((PROVIDER_WAITING,)),
    "plan.event": JournalLead(PLAN_EVENT_TYPES),
    "approval.recorded": JournalLead((ISSUE_APPROVAL_RECORDED,)),
    "request.decided": JournalLead((ISSUE_OPENED,), _decided_without_asking),
    "standing.revoked": JournalLead((STANDING_DECISION_REVOKED,)),
    "request.reminded": JournalLead((ISSUE_REMINDED,)),
    "request.escalated": JournalLead((ISSUE_ESCALATED,)),
    "turn.interrupted": JournalLead((TURN_INTERRUPTED,)),
}
_LEAD_OF: dict[str, JournalLead] = {t: lead for lead in JOURNAL_KINDS.values()
                                    for t in lead.types}


def is_journal_lead(event_type: str, payload: dict[str, Any]) -> bool:
    """Whether a log line is the first one of a workflow journal entry."""
    lead = _LEAD_OF.get(event_type)
    return lead is not None and (lead.when is None or lead.when(payload))


# -- folds over a log ---------------------------------------------------------------------


def folds(*types: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a :class:`LogFold` method as the handler of these log event types."""
    def mark(handler: Callable[..., None]) -> Callable[..., None]:
        handler._folds = types  # type: ignore[attr-defined]
        return handler
    return mark


class LogFold:
    """A fold over a log's lines: a subclass marks its handlers with :func:`folds`,
    and ``handlers`` (event type -> handler, in the table's order) is built from
    them, each type checked against :data:`EVENT_TYPES`."""

    handlers: ClassVar[Mapping[str, Callable[..., None]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found: dict[str, Callable[..., None]] = {}
        for name, member in vars(cls).items():
            for t in getattr(member, "_folds", ()):
                if t not in BY_NAME:
                    raise TypeError(f"{cls.__name__}.{name} folds {t!r}, not a log event "
                                    "type (observation/event_types.py)")
                if t in found:
                    raise TypeError(f"{cls.__name__} folds {t!r} twice")
                found[t] = member
        cls.handlers = {t.name: found[t.name] for t in EVENT_TYPES if t.name in found}
