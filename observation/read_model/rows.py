"""What the read model stores, made from a session's log fold (pure, no I/O).

``batch(view, since)`` turns a :class:`~observation.log_view.SessionLogView` into
the rows that changed after log line ``since``: the session's row (always), and
the contracts, memory facts and status changes whose last change is after it.
The fold (``log_view.py``) stays the one definition of how events change a
session; this module only lays its result out as rows.

A contract row keeps seed 000's snapshot as JSON with ``duration_in_state_ms``
left at 0: the reader computes it from ``entered_state_at`` and its own clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from observation.log_view import SessionLogView
from observation.projections import (
    execution_snapshot,
    has_side_effects,
    has_suspended,
    was_suspended,
)
from observation.read_model.access import AccessFold
from observation.read_model.json_text import dumps, dumps_typed, floatless
from observation.read_model.notices import NoticeRow
from workflows.contract import (
    CONTRACT_TABLE,
    ExecutionContract,
    ExecutionStatus,
    TransitionRecord,
    Trigger,
    summarize_action,
)
from workflows.session_state import StatusChange
from workflows.statechart import SessionEvent, SessionStatus


@dataclass(slots=True)  # not frozen: made per commit, a frozen one costs 3x
class SessionRow:
    session_id: str
    status: str | None
    execution_status: str | None
    mode: str | None
    task_queue: str | None
    pending: str | None  # JSON
    waiting_since: str | None
    started_at: str | None
    closed_at: str | None
    turns: int
    replies: int
    llm_calls: int
    contracts_total: int
    terminal_contracts: int
    has_suspended: bool
    status_counts: str  # JSON {contract status: count}
    facts_total: int
    history_total: int
    failure_reason: str | None
    last_text: str | None
    closed: bool
    journal_seq: int
    last_seq: int
    last_hash: str


SESSION_COLUMNS: tuple[str, ...] = tuple(SessionRow.__dataclass_fields__)


@dataclass(slots=True)  # not frozen: made per commit, a frozen one costs 3x
class ContractRow:
    ordinal: int  # creation order within the session, from 0
    execution_id: str
    status: str
    entered_state_at: str
    snapshot: str  # JSON, duration_in_state_ms = 0
    transitions: str  # JSON list of TransitionRecord
    seq: int  # the log line of its last change


@dataclass(slots=True)  # not frozen: made per commit, a frozen one costs 3x
class EntryRow:
    """A memory fact or a status change: ``body`` is its JSON."""

    ordinal: int
    body: str
    seq: int


@dataclass(slots=True)  # not frozen: made per commit, a frozen one costs 3x
class SessionBatch:
    """The rows a log batch changed, as of log line ``session.last_seq``."""

    session: SessionRow
    contracts: list[ContractRow] = field(default_factory=list)
    facts: list[EntryRow] = field(default_factory=list)
    history: list[EntryRow] = field(default_factory=list)
    # Who is named (``access.AccessFold.rows``): None when unchanged by this batch.
    access: list[tuple[str, str]] | None = None
    # The notices of the batch's lines (``notices.py``): inserted, never replaced.
    notices: list[NoticeRow] = field(default_factory=list)
    # A fork's parent and the parent's seq (``rm_lineage``): the parent lists its forks.
    forked_from: tuple[str, int] | None = None

    @property
    def session_id(self) -> str:
        return self.session.session_id

    def holds_seq(self, seq: int) -> bool:
        """Whether some row of it changed at or before log line ``seq`` (``since(seq)``
        leaves something out)."""
        return any(r.seq <= seq for rows in (self.contracts, self.facts, self.history,
                                             self.notices) for r in rows)

    def since(self, seq: int) -> SessionBatch:
        """Only the rows changed after log line ``seq`` (the store has the rest)."""
        return SessionBatch(self.session, [c for c in self.contracts if c.seq > seq],
                            [f for f in self.facts if f.seq > seq],
                            [h for h in self.history if h.seq > seq], self.access,
                            [n for n in self.notices if n.seq > seq], self.forked_from)


def status_counts(view: SessionLogView) -> tuple[str, int]:
    """The session's ``status_counts`` (JSON) and ``terminal_contracts``."""
    counts = {s.value: n for s, n in sorted(view.statuses.items()) if n}
    terminal = sum(n for s, n in view.statuses.items() if s in CONTRACT_TABLE.terminal)
    return dumps_typed(counts), terminal


def session_row(view: SessionLogView, access: AccessFold | None = None,
                suspended: bool | None = None,
                counts: tuple[str, int] | None = None) -> SessionRow:
    """``suspended``: whether some contract was ever suspended, when the caller keeps
    it (:class:`Suspended`); else every contract is looked at. ``counts``: what
    :func:`status_counts` gives, when the caller kept it."""
    pending = view.pending
    if pending is not None and access is not None:
        pending = {**pending, **access.pending_extras(pending.get("request_id"))}
    counts_text, terminal = status_counts(view) if counts is None else counts
    return SessionRow(
        session_id=view.session_id, status=view.status.value if view.status else None,
        execution_status=view.execution_status, mode=view.mode, task_queue=view.task_queue,
        pending=dumps(pending) if pending is not None else None,
        waiting_since=view.waiting_since, started_at=view.started_at,
        closed_at=view.closed_at, turns=view.turns, replies=view.replies,
        llm_calls=view.llm_calls, contracts_total=len(view.contracts),
        terminal_contracts=terminal,
        has_suspended=has_suspended(view.contracts) if suspended is None else suspended,
        status_counts=counts_text, facts_total=len(view.facts),
        history_total=view.history_total, failure_reason=view.failure_reason,
        last_text=view.last_text, closed=view.closed, journal_seq=view.journal_seq,
        last_seq=view.last_seq, last_hash=view.last_hash)


class TransitionTexts:
    """What a session's rows are made of, kept from one commit to the next, so that a
    commit costs what changed (the observer keeps one; a row made without it is made
    from scratch, the reference each kept part is tested against,
    ``tests/observation/test_read_model_rows.py``):

    * each contract's transitions as JSON: a transition is written once it can no
      longer change (a later one follows it: the fold names the actor of the last
      one only), not again at every change of its contract;
    * what a contract's snapshot holds that never changes once it is queued (its
      ids, action, summary, creation time as JSON): the snapshot's dict is laid out
      from them and the contract's changing fields, no pydantic model built;
    * each status change's fields as JSON and its FCMP events' JSON, each made once
      (the fold only appends FCMP events to the last change);
    * the session's contract status counts, made again only when a contract changed;
    * who is named, as handed over last: rows equal to them are not written again.
    """

    def __init__(self) -> None:
        self._texts: dict[int, tuple[list[str], int]] = {}  # index: (texts, final ones)
        self._dumps: dict[int, list[dict[str, Any]]] = {}  # index: the final ones' dumps
        self._static: dict[int, dict[str, Any]] = {}  # index: a snapshot's fixed part
        self._times: dict[int, tuple[TransitionRecord, str]] = {}  # index: last's time
        self._changes: dict[int, tuple[StatusChange, str, str, list[str]]] = {}
        self.counts: tuple[str, int] | None = None  # status counts' JSON, terminal ones
        # Who is named, as last handed over (None: unknown, a failed write forgot it).
        self.access: list[tuple[str, str]] | None = None

    def of(self, i: int, transitions: list[TransitionRecord],
           last: dict[str, Any] | None = None) -> str:
        """The transitions' JSON (``last``: the last one's dump, when made already)."""
        texts, final = self._texts.get(i, ([], 0))
        del texts[final:]  # the last one written may have changed since
        n = len(transitions)
        texts += [dumps_typed(last if last is not None and k == n - 1
                              else self.dump(i, transitions, k)) for k in range(final, n)]
        self._texts[i] = texts, max(n - 1, 0)
        return f"[{','.join(texts)}]"

    def dump(self, i: int, transitions: list[TransitionRecord], k: int) -> dict[str, Any]:
        """``transitions[k].model_dump(mode="json")`` (:func:`_transition_dump`), kept
        once a later one follows."""
        done = self._dumps.setdefault(i, [])
        if k < len(done):
            return done[k]
        t = transitions[k]
        known = self._times.get(i)  # the last one's time, kept (only its actor changes)
        if known is not None and known[0] is t:
            out = _transition_dump(t, known[1])
        else:
            out = _transition_dump(t)
            self._times[i] = (t, out["timestamp"])
        if k == len(done) and k < len(transitions) - 1:
            done.append(out)
        return out

    def row(self, i: int, c: ExecutionContract) -> tuple[dict[str, Any], str]:
        """The contract's snapshot (:meth:`snapshot`) and transitions' JSON (:meth:`of`),
        its last transition dumped once for both."""
        ts = c.transitions
        last = self.dump(i, ts, len(ts) - 1) if ts else None
        return self.snapshot(i, c, last), self.of(i, ts, last)

    def snapshot(self, i: int, c: ExecutionContract,
                 last_dump: dict[str, Any] | None = None) -> dict[str, Any]:
        """``execution_snapshot(c, entered).model_dump(mode="json")`` (``entered``: the
        time it entered its state, so ``duration_in_state_ms`` is 0)."""
        static = self._static.get(i)
        if static is None or static["execution_id"] != c.execution_id:
            static = self._static[i] = _snapshot_static(c)
        ts = c.transitions
        status = c.status
        snap = dict(static)
        snap["current_status"] = _VALUE[status]
        snap["is_terminal"] = status in _TERMINAL
        snap["is_stable"] = status in _STABLE
        snap["is_resumable"] = status in _RESUMABLE
        snap["irreversible"] = c.irreversible
        snap["has_side_effects"] = has_side_effects(c)
        snap["idempotency_key"] = c.idempotency_key
        snap["transition_count"] = len(ts)
        if ts:
            last = ts[-1]
            dumped = last_dump if last_dump is not None else self.dump(i, ts, len(ts) - 1)
            snap["last_trigger"] = dumped["trigger"]
            snap["last_actor"] = last.actor
            snap["last_actor_category"] = last.actor_category
            snap["entered_state_at"] = dumped["timestamp"]
        else:
            snap["last_trigger"] = snap["last_actor"] = snap["last_actor_category"] = None
            snap["entered_state_at"] = static["created_at"]
        snap["duration_in_state_ms"] = 0
        snap["result"] = _json_any(c.result)
        snap["error_message"] = c.error_message
        return snap

    def change(self, i: int, change: StatusChange,
               raw: Sequence[tuple[str, dict[str, Any]]] = ()) -> str:
        """``_change_text(change.model_dump(mode="json"))`` of the change with ``raw``
        (the FCMP events the fold has not made into models yet, ``(type, payload)``)
        after its ``fcmp``: the change's own fields and each FCMP event made into JSON
        once, laid out as canonical JSON lays out the dict (sorted keys ``at``,
        ``event``, ``fcmp``, ``from_status``, ``to_status``; no whitespace)."""
        kept = self._changes.get(i)
        if kept is None or kept[0] is not change:
            kept = self._changes[i] = (
                change, f'{{"at":{dumps(_time_text(change.at))},'
                f'"event":{dumps(_value(change.event))},"fcmp":[',
                f'],"from_status":{dumps(_value(change.from_status))},'
                f'"to_status":{dumps(_value(change.to_status))}}}', [])
        _, start, end, fcmp = kept
        events = change.fcmp
        if len(fcmp) > len(events) + len(raw):  # changed under us: made again
            del fcmp[:]
        fcmp += [_fcmp_text(f.type, f.payload) for f in events[len(fcmp):]]
        fcmp += [_fcmp_text(t, p) for t, p in raw[len(fcmp) - len(events):]]
        return start + ",".join(fcmp) + end


def _fcmp_text(type_: str, payload: dict[str, Any]) -> str:
    """``dumps(FcmpEvent(type=type_, payload=payload).model_dump(mode="json"))``."""
    text = dumps_typed(payload) if floatless(payload) else dumps(_json_any(payload))
    return f'{{"payload":{text},"type":{dumps(type_)}}}'


#: Every member of the rows' ``StrEnum`` fields, and its value.
_VALUES: dict[Any, str] = {m: m.value for kind in (ExecutionStatus, Trigger, SessionStatus,
                                                   SessionEvent) for m in kind}


def _value(member: Any) -> Any:
    """A ``StrEnum`` field as ``model_dump(mode="json")`` gives it: its value (one
    lookup: a member hashes and compares as its value)."""
    return _VALUES.get(member, member) if type(member) is not str else member


def _time_text(at: datetime) -> str:
    """A ``datetime`` field as ``model_dump(mode="json")`` gives it."""
    return _TIME.dump_python(at, mode="json")


def _transition_dump(t: TransitionRecord, time_text: str | None = None) -> dict[str, Any]:
    """``t.model_dump(mode="json")``, without the model's serializer (``time_text``: its
    ``timestamp``'s, when known)."""
    return {"execution_id": t.execution_id, "from_status": _value(t.from_status),
            "to_status": _value(t.to_status), "trigger": _value(t.trigger),
            "actor": t.actor, "actor_category": t.actor_category,
            "timestamp": _time_text(t.timestamp) if time_text is None else time_text}


_VALUE: dict[Any, str] = {m: m.value for m in ExecutionStatus}
_TERMINAL = frozenset(CONTRACT_TABLE.terminal)
_STABLE = frozenset(CONTRACT_TABLE.stable)
_RESUMABLE = frozenset(CONTRACT_TABLE.resumable)
_TIME: TypeAdapter[datetime] = TypeAdapter(datetime)
_ANY: TypeAdapter[Any] = TypeAdapter(Any)


def _json_any(value: Any) -> Any:
    """A field typed ``Any`` as ``model_dump(mode="json")`` gives it: a value read from a
    log line (str, int, float, bool, None, lists and dicts of them) is itself."""
    return value if value is None or plain_or_float(value) else _ANY.dump_python(
        value, mode="json")


def plain_or_float(value: Any) -> bool:
    """Only JSON's types (exact ``str``, ``int``, ``float``, ``bool``, ``None``, ``list``,
    ``dict`` with ``str`` keys): what a JSON dump of it leaves as it is."""
    t = type(value)
    if t is str or t is int or t is bool or t is float or value is None:
        return True
    if t is dict:
        return all(type(k) is str and plain_or_float(v) for k, v in value.items())
    if t is list:
        return all(plain_or_float(v) for v in value)
    return False


def _snapshot_static(c: ExecutionContract) -> dict[str, Any]:
    return {"execution_id": c.execution_id, "session_id": c.session_id,
            "action_type": c.action_type.value,
            "action_summary": summarize_action(c.action_type, c.action_detail),
            "created_at": _time_text(c.created_at)}


def _snapshot_text(snap: dict) -> str:
    """A snapshot's JSON: only its ``result`` (``Any``) may hold a float."""
    return dumps_typed(snap) if floatless(snap["result"]) else dumps(snap)


def _change_text(change: dict) -> str:
    """A status change's JSON: only its FCMP events' payloads (``Any``) may hold one."""
    return dumps_typed(change) if floatless(change["fcmp"]) else dumps(change)


def contract_row(view: SessionLogView, i: int,
                 texts: TransitionTexts | None = None) -> ContractRow:
    c = view.contracts[i]
    if texts is None:
        entered = c.transitions[-1].timestamp if c.transitions else c.created_at
        snap = execution_snapshot(c, entered).model_dump(mode="json")
        transitions = dumps([t.model_dump(mode="json") for t in c.transitions])
    else:
        snap, transitions = texts.row(i, c)
    return ContractRow(
        ordinal=i, execution_id=c.execution_id, status=snap["current_status"],
        entered_state_at=snap["entered_state_at"], snapshot=_snapshot_text(snap),
        transitions=transitions, seq=view.contract_seq[i])


def batch(view: SessionLogView, contracts: Iterable[int], history: Iterable[int],
          facts_from: int, access: AccessFold | None = None,
          notices: list[NoticeRow] | None = None,
          suspended: bool | None = None,
          texts: TransitionTexts | None = None) -> SessionBatch:
    """The session's row, the given contracts and status changes (by index) and the
    facts from index ``facts_from`` on; who is named when ``access`` changed. Its cost
    is that of what changed (``suspended`` given: nothing is done per contract that
    did not change; ``texts``: the transitions written before, kept)."""
    contracts = sorted(contracts)
    counts = None
    if texts is not None:  # the counts change only with a contract
        if contracts or texts.counts is None:
            texts.counts = status_counts(view)
        counts = texts.counts
    return SessionBatch(
        session=session_row(view, access, suspended, counts),
        contracts=[contract_row(view, i, texts) for i in contracts],
        facts=[EntryRow(i, dumps_typed(view.facts[i].model_dump(mode="json")),
                        view.fact_seq[i])
               for i in range(facts_from, len(view.facts))],
        history=[EntryRow(i, _change_text(view.history[i].model_dump(mode="json"))
                          if texts is None else texts.change(i, *view.change(i)),
                          view.history_seq[i]) for i in sorted(history)],
        access=_access_rows(access, texts),
        notices=list(notices or ()), forked_from=view.forked_from)


def _access_rows(access: AccessFold | None, texts: TransitionTexts | None
                 ) -> list[tuple[str, str]] | None:
    """Who is named, when that changed (``texts``: when the rows differ from those
    handed over last: the store has them)."""
    if access is None or not access.take_changed():
        return None
    rows = access.rows()
    if texts is not None:
        if rows == texts.access:
            return None
        texts.access = rows
    return rows


def full_batch(view: SessionLogView, access: AccessFold | None = None,
               notices: list[NoticeRow] | None = None) -> SessionBatch:
    """Every row of the session (a rebuild)."""
    if access is not None:
        access.changed = True
    return batch(view, range(len(view.contracts)), range(view.history_total), 0, access,
                 notices)


class Suspended:
    """Seed 000's ``has_suspended`` kept as contracts change: a contract that was
    suspended stays so (its transitions only grow), so only the contracts a batch
    touched are looked at, not all of the session's."""

    def __init__(self) -> None:
        self.value = False

    def update(self, view: SessionLogView, touched: Iterable[int]) -> bool:
        if not self.value:
            self.value = any(was_suspended(view.contracts[i]) for i in touched)
        return self.value


class MergedBatch:
    """Batches of one session, merged in the order added (each :meth:`add` costs what
    the batch holds, however many came before): what writing them one after another
    would write, as one batch (:meth:`batch`): the latest session row, each contract
    and status change at its latest, the facts and notices of all, who is named as
    of the latest batch that says."""

    def __init__(self, first: SessionBatch) -> None:
        self.session_id = first.session_id
        self.session = first.session
        self.contracts: dict[int, ContractRow] = {}
        self.facts: dict[int, EntryRow] = {}
        self.history: dict[int, EntryRow] = {}
        self.access: list[tuple[str, str]] | None = None
        self.notices: dict[str, NoticeRow] = {}
        self.forked_from: tuple[str, int] | None = None
        self.add(first)

    def add(self, b: SessionBatch) -> MergedBatch:
        if b.session_id != self.session_id:
            raise ValueError(f"batches of two sessions: {self.session_id}, {b.session_id}")
        self.session = b.session
        self.contracts.update((c.ordinal, c) for c in b.contracts)
        self.facts.update((f.ordinal, f) for f in b.facts)
        self.history.update((h.ordinal, h) for h in b.history)
        if b.access is not None:
            self.access = b.access
        for n in b.notices:
            self.notices.setdefault(n.notice_id, n)
        self.forked_from = b.forked_from or self.forked_from
        return self

    def batch(self) -> SessionBatch:
        def ordered(rows: dict) -> list:
            return [rows[k] for k in sorted(rows)]
        return SessionBatch(self.session, ordered(self.contracts), ordered(self.facts),
                            ordered(self.history), self.access, list(self.notices.values()),
                            self.forked_from)


def merge(a: SessionBatch, b: SessionBatch) -> SessionBatch:
    """``a`` then ``b`` (a later batch of the same session) as one batch."""
    return MergedBatch(a).add(b).batch()
