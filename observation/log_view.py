"""A session's past folded from its exported log: the pure half of the read model.

``SessionLogView.apply`` takes the log's events one at a time (dicts, as on disk,
in ``seq`` order) and keeps the session's contracts (rebuilt as seed 001
``ExecutionContract``s, so every seed 000 projection applies to them), its memory
``ExecutionFact``s and its status history. No I/O and no clock here: the reader
(``log_reader.py``) feeds it, and the SQLite read model (issue 10) can store it.

What the log does not say, and what is used instead:

* ``execution_state`` carries a transition's ``actor_category`` but not its
  ``actor``. ``WORK_ITEM_STARTED``/``FINISHED`` (next lines, same history event)
  name the actor of the start and the terminal transition; the others (suspend,
  resume) are inferred from the category and trigger (``workflows.contract.actor_of``),
  which is unique for every transition the workflow makes today.
* A terminal contract's ``result`` is the journal's copy, clipped to
  ``JOURNAL_RESULT_LIMIT`` characters (the whole one is in the tool artifact),
  and, the log being RFC 8785 JSON, an object's keys come back sorted: a memory
  fact's ``result_summary`` (a repr) lists them sorted where the workflow's
  lists them in the tool's order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from observation import event_types as ev
from observation.event_types import (
    FCMP_PREFIXES,
    JOURNAL_KINDS,
    LogFold,
    folds,
    is_journal_lead,
)
from observation.projections import ExecutionFact, execution_fact
from workflows.contract import (
    ActionType,
    ExecutionContract,
    ExecutionStatus,
    TransitionRecord,
    Trigger,
    actor_of,
)
from workflows.session_state import StatusChange
from workflows.statechart import FcmpEvent, SessionStatus

GENESIS = "0" * 64
# How Temporal names a closed run, by the closing log event's ``outcome``.
EXECUTION_STATUS_OF = {"completed": "completed", "workflow_failed": "failed",
                       "canceled": "canceled", "terminated": "terminated",
                       "timed_out": "timed_out"}

def infer_actor(contract: ExecutionContract, category: str, trigger: str) -> str:
    return actor_of(category, trigger, gate=bool(contract.action_detail.get("gate")))


def _history_event(event_id: str) -> str:
    """``<run id>:<history event id>``: the lines one history event made share it."""
    return event_id.rsplit(":", 1)[0]


@dataclass
class SessionLogView(LogFold):
    """Everything the API serves about a session's past, as of log line ``last_seq``."""

    session_id: str
    contracts: list[ExecutionContract] = field(default_factory=list)  # creation order
    index: dict[str, int] = field(default_factory=dict)
    facts: list[ExecutionFact] = field(default_factory=list)  # the order they were recorded
    fact_ids: set[str] = field(default_factory=set)
    # The status changes (``history``), their FCMP events not yet made into models:
    # ``_fcmp_raw[i]``, ``(type, payload)`` each, in order after ``_changes[i].fcmp``.
    _changes: list[StatusChange] = field(default_factory=list)
    _fcmp_raw: dict[int, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    statuses: Counter[ExecutionStatus] = field(default_factory=Counter)
    status: SessionStatus | None = None
    turns: int = 0
    replies: int = 0
    llm_calls: int = 0
    last_text: str | None = None
    failure_reason: str | None = None
    # The session ended: the log is complete, nothing live can add to it.
    closed: bool = False
    # A fork's parent (its line 1, ``SESSION_FORKED``): (parent session, the parent's seq).
    forked_from: tuple[str, int] | None = None
    last_seq: int = 0
    last_hash: str = GENESIS
    # What the session waits for (seed 004's pending request, as the API shows it).
    pending: dict[str, Any] | None = None
    waiting_since: str | None = None
    mode: str | None = None
    task_queue: str | None = None
    started_at: str | None = None
    closed_at: str | None = None
    # Temporal's name for the workflow's state: running until the log says it closed.
    execution_status: str | None = None
    # Journal entries the log reflects: a write's answer says which one it needs.
    journal_seq: int = 0
    # The log line at which each contract / status change last changed (same order as
    # ``contracts`` / ``history``); facts never change once recorded.
    contract_seq: list[int] = field(default_factory=list)
    history_seq: list[int] = field(default_factory=list)
    fact_seq: list[int] = field(default_factory=list)
    # Indexes of the contracts and status changes changed since ``take_touched``.
    touched_contracts: set[int] = field(default_factory=set)
    touched_history: set[int] = field(default_factory=set)
    _change_from: str | None = None  # the history event of the last status change
    _seq: int = 0  # the line being applied

    def apply(self, event: dict[str, Any]) -> None:
        seq = self._seq = event["seq"]
        kind, payload = event["type"], event["payload"]
        plan = _PLANS.get(kind)  # one lookup per line: its handler, whether it may lead
        if plan is None:
            plan = _plan(kind)
        handler, may_lead = plan
        if handler is not None:
            handler(self, payload, event)
        # The first line of each workflow journal entry: counting them gives the
        # journal position the log has reached (read-your-writes).
        if may_lead and is_journal_lead(kind, payload):
            self.journal_seq += 1
        self.last_seq, self.last_hash = seq, event["event_hash"]

    @property
    def history(self) -> list[StatusChange]:
        """The status changes, each with its FCMP events (made into models here, when
        read: the read model writes them from :meth:`fcmp_raw`)."""
        if self._fcmp_raw:
            for i, raw in self._fcmp_raw.items():
                self._changes[i].fcmp.extend(FcmpEvent(type=t, payload=p) for t, p in raw)
            self._fcmp_raw.clear()
        return self._changes

    @history.setter
    def history(self, changes: list[StatusChange]) -> None:
        self._changes, self._fcmp_raw = changes, {}

    @property
    def history_total(self) -> int:
        return len(self._changes)

    def change(self, i: int) -> tuple[StatusChange, list[tuple[str, dict[str, Any]]]]:
        """Status change ``i`` and the FCMP events that follow those in its ``fcmp``
        (``(type, payload)``), not made into models."""
        return self._changes[i], self._fcmp_raw.get(i, [])

    def take_touched(self) -> tuple[set[int], set[int]]:
        """The contracts and status changes changed since the last call (by index)."""
        out = self.touched_contracts, self.touched_history
        self.touched_contracts, self.touched_history = set(), set()
        return out

    def _touch_contract(self, i: int) -> None:
        self.contract_seq[i] = self._seq
        self.touched_contracts.add(i)

    def contract(self, execution_id: str) -> ExecutionContract | None:
        i = self.index.get(execution_id)
        return self.contracts[i] if i is not None else None

    # -- contracts -----------------------------------------------------------------

    @folds(ev.WORK_ITEM_QUEUED)
    def _queued(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        c = ExecutionContract(
            execution_id=p["work_item_id"], session_id=self.session_id,
            action_type=ActionType(p["action_type"]), action_detail=p["action_detail"],
            irreversible=p["irreversible"], idempotency_key=p["idempotency_key"],
            created_at=p["created_at"])
        self.index[c.execution_id] = len(self.contracts)
        self.contracts.append(c)
        self.contract_seq.append(self._seq)
        self._touch_contract(len(self.contracts) - 1)
        self.statuses[c.status] += 1

    @folds(ev.EXECUTION_STATE)
    def _state(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        c = self._known(p["execution_id"])
        record = TransitionRecord(
            execution_id=c.execution_id, from_status=p["from_status"],
            to_status=p["to_status"], trigger=Trigger(p["trigger"]),
            actor=infer_actor(c, p["actor_category"], p["trigger"]),
            actor_category=p["actor_category"],
            timestamp=p["timestamp"])
        self.statuses[c.status] -= 1
        c.status = record.to_status
        self.statuses[c.status] += 1
        c.transitions.append(record)
        self._touch_contract(self.index[c.execution_id])

    @folds(ev.WORK_ITEM_STARTED)
    def _started(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self._name_actor(self._known(p["work_item_id"]), p["actor"])

    @folds(ev.WORK_ITEM_FINISHED)
    def _finished(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        c = self._known(p["work_item_id"])
        self._name_actor(c, p["actor"])
        c.result, c.error_message = p.get("result"), p.get("error_message")
        # As the workflow records it: at the terminal transition's time.
        self.facts.append(execution_fact(c, c.transitions[-1].timestamp))
        self.fact_ids.add(c.execution_id)
        self.fact_seq.append(self._seq)
        self._touch_contract(self.index[c.execution_id])

    def _known(self, execution_id: str) -> ExecutionContract:
        c = self.contract(execution_id)
        if c is None:
            raise ValueError(f"the log names contract {execution_id!r} before queuing it")
        return c

    def _name_actor(self, c: ExecutionContract, actor: str) -> None:
        if c.transitions:
            c.transitions[-1].actor = actor
            self._touch_contract(self.index[c.execution_id])

    # -- the session -------------------------------------------------------------

    @folds(ev.RUN_STATE_CHANGED)
    def _status(self, p: dict[str, Any], event: dict[str, Any]) -> None:
        change = StatusChange(from_status=p["old_state"], to_status=p["new_state"],
                              event=p["trigger"], at=p["at"])
        if change.from_status == SessionStatus.QUEUED and \
                change.to_status == SessionStatus.RUNNING:
            self.turns += 1  # as the workflow counts turns
        self.status = change.to_status
        self._changes.append(change)
        self.history_seq.append(self._seq)
        self.touched_history.add(len(self._changes) - 1)
        self._change_from = _history_event(event["event_id"])
        waiting = change.to_status == SessionStatus.WAITING_USER
        if waiting and change.from_status != SessionStatus.WAITING_USER:
            self.waiting_since = p["at"]  # as the WaitingSince search attribute
        elif not waiting:
            self.waiting_since = None

    @folds(ev.TURN_INTERRUPTED)
    def _interrupted(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self.turns += 1  # a message cut the turn: a new one starts (issue 27)

    def _fcmp(self, event: dict[str, Any]) -> None:
        # A status change's FCMP events follow it, from the same history event.
        # Kept as they are (a copy, as the model's validation makes), made into
        # ``FcmpEvent``s only when ``history`` is read: what the model would refuse is
        # refused here.
        if self._changes and self._change_from == _history_event(event["event_id"]):
            payload = event["payload"]
            if type(payload) is not dict or not all(type(k) is str for k in payload):
                raise ValueError(f"{event['type']}: its payload is not a JSON object")
            i = len(self._changes) - 1
            raw = self._fcmp_raw.get(i)
            if raw is None:
                raw = self._fcmp_raw[i] = []
            raw.append((event["type"], dict(payload)))
            self.history_seq[-1] = self._seq
            self.touched_history.add(i)

    @folds(ev.SESSION_FORKED)
    def _forked(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self.forked_from = (p["parent_session_id"], int(p["parent_seq"]))

    @folds(ev.RUN_CREATED)
    def _created(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self.mode = (p.get("config") or {}).get("mode")
        self.task_queue = p.get("task_queue")
        if self.status is None:
            self.status = SessionStatus(p.get("run_state") or "queued")
        self.started_at = p.get("created_at")
        self.execution_status = "running"

    @folds(ev.ISSUE_OPENED)
    def _opened(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self.pending = {
            "request_id": p["issue_id"], "kind": p["kind"], "prompt": p.get("prompt", ""),
            "execution_id": p.get("work_item_id"), "options": p.get("options") or [],
            "fields": p.get("fields") or [], "created_at": p.get("opened_at"),
            "output": p.get("output")}
        if p.get("reason_code"):  # "did it happen?" on a call that may have run
            self.pending["reason_code"] = p["reason_code"]
        # who may answer and on what (issue 24): only when the request says
        self.pending.update({k: p[k] for k in ev.ISSUE_TERMS if k in p})

    @folds(ev.ISSUE_APPROVAL_RECORDED)
    def _approved_once(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        """One approval of several: who has approved so far is part of the request."""
        if self.pending is not None and self.pending["request_id"] == p.get("issue_id"):
            self.pending["approvals"] = p["approvals"]

    @folds(ev.ISSUE_REMINDED)
    def _reminded(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        """The wait's reminder: the request shows when (issue 26)."""
        if self.pending is not None and self.pending["request_id"] == p.get("issue_id"):
            self.pending["reminded_at"] = p.get("reminded_at")

    @folds(ev.ISSUE_ESCALATED)
    def _escalated(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        """The wait's escalation: the request is for its new addressees from now on."""
        if self.pending is not None and self.pending["request_id"] == p.get("issue_id"):
            self.pending["approvers"] = list(p.get("approvers") or [])
            self.pending["escalated_to"] = list(p.get("escalated_to") or [])
            self.pending["escalated_at"] = p.get("escalated_at")

    @folds(ev.ISSUE_RESOLVED)
    def _resolved(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        if p.get("resolution") in ev.REPLY_RESOLUTIONS:
            self.replies += 1
        if self.pending is not None and self.pending["request_id"] == p.get("issue_id"):
            self.pending = None

    @folds(ev.TEXT)
    def _text(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self.llm_calls += 1  # one `text` per answered LLM call
        if p.get("text"):
            self.last_text = p["text"]

    @folds(ev.RUN_COMPLETED)
    def _run_completed(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self._close(p)

    @folds(ev.RUN_FAILED)
    def _run_failed(self, p: dict[str, Any], _: dict[str, Any]) -> None:
        self.failure_reason = p.get("failure_reason")
        self._close(p)

    def _close(self, p: dict[str, Any]) -> None:
        self.closed = True
        self.pending = self.waiting_since = None
        self.closed_at = p.get("finished_at")
        self.execution_status = EXECUTION_STATUS_OF.get(p.get("outcome", ""), "completed")


def _fcmp_line(view: SessionLogView, _: dict[str, Any], event: dict[str, Any]) -> None:
    view._fcmp(event)


#: Each line type's handler (a fold's, the FCMP events', or None) and whether a line of
#: it may be a journal entry's first (``is_journal_lead`` is asked only then), made
#: once per type the first time it is seen.
_PLANS: dict[str, tuple[Callable[..., None] | None, bool]] = {}
_LEAD_TYPES = frozenset(t for lead in JOURNAL_KINDS.values() for t in lead.types)


def _plan(kind: str) -> tuple[Callable[..., None] | None, bool]:
    handler = SessionLogView.handlers.get(kind)
    if handler is None and kind.startswith(FCMP_PREFIXES):
        handler = _fcmp_line
    plan = _PLANS[kind] = (handler, kind in _LEAD_TYPES)
    return plan


def fold(session_id: str, events: Iterable[dict[str, Any]]) -> SessionLogView:
    view = SessionLogView(session_id)
    for event in events:
        view.apply(event)
    return view
