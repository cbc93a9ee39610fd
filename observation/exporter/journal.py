"""Journal entries (the workflow's ``hitlflow.journal`` memo) to log events.

The journal says what the workflow decided: status changes with their FCMP events,
contracts and their transitions, replies, messages, the assistant's text, plan
events, waits for the model provider. Part of the pure mapping (see ``mapping.py``).

Which kinds exist and the first log line each makes (its lead, which read-your-writes
counts) are declared in ``observation/event_types.py`` (``JOURNAL_KINDS``): every
entry mapped here is checked against it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from observation import event_types as ev
from observation.event_types import DECISION_TERMS, ISSUE_TERMS, JOURNAL_KINDS, is_journal_lead
from observation.exporter import ids
from observation.exporter.decode import MappingError
from observation.exporter.model import MappedEvent
from workflows import wait_policy
from workflows.config import SessionConfig
from workflows.contract import (
    CONTRACT_TABLE,
    ExecutionContract,
    ExecutionStatus,
    TransitionRecord,
    summarize_action,
)
from workflows.execution_views import has_side_effects
from workflows.plan import PLAN_EVENT_TYPES
from workflows.session_state import PendingRequest
from workflows.statechart import SessionEvent


class JournalMapper:
    """State and rules for journal entries; ``SessionMapper`` adds the history events."""

    sid: str
    _out: list[MappedEvent]  # the lines made so far for the history event being fed

    def __init__(self) -> None:
        self.journal_seq = 0
        self.contracts: dict[str, ExecutionContract] = {}
        # The request to the person now open (seed 004's pending request; in the
        # log, between its ISSUE_OPENED and ISSUE_RESOLVED): its journal detail.
        self.pending_request: dict[str, Any] | None = None
        # The first run's session config (the wait's steps: ``next_wait_step``), as its
        # input holds it; parsed when first needed.
        self.session_config: dict[str, Any] | None = None
        self._wait_config: SessionConfig | None = None
        self._summaries: dict[str, str] = {}  # execution id -> its action's summary

    # provided by SessionMapper
    def emit(self, type: str, payload: dict[str, Any], span: str | None = None,
             parent: str | None = None, artifact: Any = None) -> MappedEvent:
        raise NotImplementedError

    def _work_span(self, execution_id: str | None) -> tuple[str | None, str | None]:
        if execution_id is None:
            return None, None
        return ids.work_item_span(self.sid, execution_id), ids.session_span(self.sid)

    def journal(self, entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            seq = entry.get("seq")
            if seq != self.journal_seq:
                raise MappingError(
                    f"journal entry seq {seq} where {self.journal_seq} was expected: "
                    "the journal in history has a gap or a repeat")
            self.journal_seq += 1
            kind, data, at = entry["kind"], entry["data"], entry["at"]
            if kind not in JOURNAL_KINDS:
                raise MappingError(f"unknown journal kind {kind!r} (seq {seq})")
            start = len(self._out)
            getattr(self, handler_name(kind))(data, at)
            _check_lead(kind, seq, self._out[start:])

    # -- the session statechart ------------------------------------------------------

    def _j_session_status(self, d: dict[str, Any], at: str) -> None:
        detail = d.get("detail") or {}
        self.emit(ev.RUN_STATE_CHANGED, {
            "old_state": d["from_status"], "new_state": d["to_status"],
            "trigger": d["event"], "detail": detail, "at": at})
        if d["event"] == SessionEvent.INTERACTION_REQUESTED:
            self.pending_request = detail
            self.emit(ev.ISSUE_OPENED, {
                "issue_id": detail["request_id"], "kind": detail["kind"],
                "prompt": detail.get("prompt", ""),
                "work_item_id": detail.get("execution_id"),
                "options": detail.get("options", []), "fields": detail.get("fields", []),
                "opened_at": detail.get("created_at", at),
                # what the person must look at (a plan step's output); only when set,
                # so older histories export to the same bytes
                **({"output": detail["output"]} if detail.get("output") else {}),
                **({"reason_code": detail["reason_code"]} if detail.get("reason_code") else {}),
                **_present(detail, ISSUE_TERMS)},
                *self._work_span(detail.get("execution_id")))
        elif (self.pending_request is not None and d["from_status"] == "waiting_user"
              and d["to_status"] != "waiting_user"):
            issue, self.pending_request = self.pending_request, None
            self.emit(ev.ISSUE_RESOLVED, {
                "issue_id": issue["request_id"], "kind": issue["kind"],
                "resolution": d["event"], "answer": detail.get("answer"),
                "by": detail.get("by"), "auto": False, "detail": detail, "resolved_at": at},
                *self._work_span(issue.get("execution_id")))
        for f in d.get("fcmp", []):
            self.emit(f["type"], dict(f["payload"]))

    def _j_reply_accepted(self, d: dict[str, Any], at: str) -> None:
        issue = self.pending_request
        if issue is None or issue["request_id"] != d["request_id"]:
            raise MappingError(f"reply to {d['request_id']!r} accepted, but that request "
                               "is not open in the journal")
        self.pending_request = None
        self.emit(ev.ISSUE_RESOLVED, {
            "issue_id": d["request_id"], "kind": d["kind"],
            "resolution": "auto_decided" if d.get("auto") else "answered",
            "answer": d["answer"], "by": d["by"], "auto": bool(d.get("auto")),
            "detail": {}, "resolved_at": at, **_present(d, DECISION_TERMS)},
            *self._work_span(issue.get("execution_id")))

    def _j_approval_recorded(self, d: dict[str, Any], at: str) -> None:
        """One approval of several (two-person rule): the request stays open."""
        issue = self.pending_request
        if issue is None or issue["request_id"] != d["request_id"]:
            raise MappingError(f"approval of {d['request_id']!r} recorded, but that request "
                               "is not open in the journal")
        self.emit(ev.ISSUE_APPROVAL_RECORDED, {
            "issue_id": d["request_id"], "kind": d["kind"], "principal": d["principal"],
            "by": d["principal"].get("name") or d["principal"]["subject"],
            "approvals": d["approvals"], "approvals_required": d["approvals_required"],
            **_present(d, ("digest", "via")), "approved_at": at},
            *self._work_span(d.get("execution_id")))

    def _j_request_reminded(self, d: dict[str, Any], at: str) -> None:
        """The wait's reminder (workflows.wait_policy): the request stays open."""
        # a new dict: the open one is also the payload of a line already written
        self.pending_request = {**self._open_request(d, "reminded"), "reminded_at": at}
        self.emit(ev.ISSUE_REMINDED, {
            "issue_id": d["request_id"], "kind": d["kind"], "approvers": d["approvers"],
            **_present(d, ("digest",)), "reminded_at": at},
            *self._work_span(d.get("execution_id")))

    def _j_request_escalated(self, d: dict[str, Any], at: str) -> None:
        """The wait's escalation: the request is for more people from now on."""
        self.pending_request = {**self._open_request(d, "escalated"),
                                "approvers": d["approvers"], "escalated_at": at}
        self.emit(ev.ISSUE_ESCALATED, {
            "issue_id": d["request_id"], "kind": d["kind"], "approvers": d["approvers"],
            "escalated_to": d["escalated_to"], **_present(d, ("digest",)),
            "escalated_at": at},
            *self._work_span(d.get("execution_id")))

    def next_wait_step(self) -> datetime | None:
        """When the open request's next reminder or escalation is due (None: none is
        left, or nothing is open): a parked follower is woken then (the step changes
        nothing visibility shows). Its timeout needs no wake: it changes the status."""
        if self.pending_request is None or self.session_config is None:
            return None
        try:
            if self._wait_config is None:
                self._wait_config = SessionConfig.model_validate(self.session_config)
            pending = PendingRequest.model_validate(self.pending_request)
        except ValueError:  # not a config or request this version reads: no wake
            return None
        step = wait_policy.next_step(self._wait_config, pending, pending.created_at)
        return step.at if step is not None and step.name != "timeout" else None

    def _open_request(self, d: dict[str, Any], what: str) -> dict[str, Any]:
        issue = self.pending_request
        if issue is None or issue["request_id"] != d["request_id"]:
            raise MappingError(f"request {d['request_id']!r} {what}, but that request is "
                               "not open in the journal")
        return issue

    def _j_request_decided(self, d: dict[str, Any], at: str) -> None:
        """A tool call a rule or a standing decision decided without asking: the request
        it stands for, opened and resolved at once, naming what decided it."""
        span = self._work_span(d.get("execution_id"))
        self.emit(ev.ISSUE_OPENED, {
            "issue_id": d["request_id"], "kind": d["kind"], "prompt": d.get("prompt", ""),
            "work_item_id": d.get("execution_id"), "options": [], "fields": [],
            "opened_at": d.get("created_at", at), "auto_decision": d["decision"],
            **_present(d, ("digest", "rule"))}, *span)
        set_by = d.get("standing_set_by")
        by = f"rule {d['rule']}" if d.get("rule") else \
            f"standing decision {d.get('standing_id')} of " \
            f"{(set_by or {}).get('name') or (set_by or {}).get('subject')}"
        self.emit(ev.ISSUE_RESOLVED, {
            "issue_id": d["request_id"], "kind": d["kind"],
            "resolution": "decided_by_rule" if d.get("rule") else "decided_by_standing",
            "answer": {"approved": d["decision"] == "allow", "auto": True}, "by": by,
            "auto": True, "detail": {}, "resolved_at": at,
            **_present(d, ("digest", "rule", "standing_id", "standing_set_by"))}, *span)

    def _j_standing_revoked(self, d: dict[str, Any], at: str) -> None:
        self.emit(ev.STANDING_DECISION_REVOKED, {**d, "at": at})

    def _j_reply_refused(self, d: dict[str, Any], at: str) -> None:
        """A stale or malformed signal the workflow refused (the session unchanged)."""
        self.emit(ev.REPLY_REFUSED, {**d, "at": at})

    def _j_message_accepted(self, d: dict[str, Any], at: str) -> None:
        self.emit(ev.MESSAGE, {"text": d["text"], "at": at, **_present(d, ("by", "principal"))})

    def _j_turn_interrupted(self, d: dict[str, Any], at: str) -> None:
        """A message with if_busy interrupt ended the agent's turn (workflows.steering):
        what was cut (an LLM call, a read-only or reversible tool call, or nothing),
        the call it waited for instead, why and by whom."""
        self.emit(ev.TURN_INTERRUPTED, {**d, "at": at})

    def _j_llm_waiting(self, d: dict[str, Any], at: str) -> None:
        # The session waits for the model provider (rate limited, or an error that
        # may pass) until ``retry_at``: workflows/provider_wait.py.
        self.emit(ev.PROVIDER_WAITING, {**d, "at": at})

    def _j_assistant_text(self, d: dict[str, Any], at: str) -> None:
        self.emit(ev.TEXT, {**d, "at": at}, ids.reasoning_span(self.sid, d["call_id"]),
                  ids.session_span(self.sid))

    # -- contracts --------------------------------------------------------------------

    def _j_contract_created(self, d: dict[str, Any], at: str) -> None:
        c = ExecutionContract.model_validate({**d, "session_id": self.sid})
        self.contracts[c.execution_id] = c
        # fixed for the contract (its action): each transition's state names it again
        summary = self._summaries[c.execution_id] = summarize_action(
            c.action_type, c.action_detail)
        self.emit(ev.WORK_ITEM_QUEUED, {
            "work_item_id": c.execution_id, "action_type": c.action_type.value,
            "action_summary": summary,
            "action_detail": d["action_detail"], "irreversible": c.irreversible,
            "idempotency_key": c.idempotency_key, "created_at": d["created_at"]},
            *self._work_span(c.execution_id))

    def _j_contract_transition(self, d: dict[str, Any], at: str) -> None:
        c = self.contracts.get(d["execution_id"])
        if c is None:
            raise MappingError(f"transition of unknown contract {d['execution_id']!r}")
        record = TransitionRecord.model_validate(
            {k: d[k] for k in TransitionRecord.model_fields})
        c.status = record.to_status
        span = self._work_span(c.execution_id)
        state = {**execution_state(c, record, self._summaries[c.execution_id]),
                 **_present(d, ("principal", "digest"))}  # a person's decision: who, on what
        self.emit(ev.EXECUTION_STATE, state, *span)
        who = {"trigger": d["trigger"], "actor": d["actor"],
               "actor_category": d["actor_category"]}
        if record.from_status is ExecutionStatus.PENDING:
            self.emit(ev.WORK_ITEM_STARTED, {
                "work_item_id": c.execution_id, "started_at": d["timestamp"], **who}, *span)
        if record.to_status in CONTRACT_TABLE.terminal:
            self.emit(ev.WORK_ITEM_FINISHED, {
                "work_item_id": c.execution_id, "outcome": record.to_status.value,
                "finished_at": d["timestamp"], **who, "result": d.get("result"),
                "error_message": d.get("error_message"),
                **({"reason_code": d["reason_code"]} if d.get("reason_code") else {})}, *span)

    # -- plan sessions (seed 002) -------------------------------------------------------

    def _j_plan_event(self, d: dict[str, Any], at: str) -> None:
        kind = d.get("type")
        if kind not in PLAN_EVENT_TYPES:
            raise MappingError(f"plan event of unknown type {kind!r}")
        self.emit(kind, {**d, "at": at})


#: The JSON form pydantic gives a datetime field (``model_dump(mode="json")``).
_json_datetime = TypeAdapter(datetime).serializer.to_python


def execution_state(contract: ExecutionContract, record: TransitionRecord,
                    summary: str) -> dict[str, Any]:
    """``execution_state_event(contract, record).model_dump(mode="json")``, made
    directly from the validated record (``summary``: the contract's
    ``summarize_action``): the same dict, keys in the same order
    (``tests/observation/test_hotpath.py``)."""
    to = record.to_status
    return {
        "execution_id": record.execution_id, "action_summary": summary,
        "from_status": record.from_status.value, "to_status": to.value,
        "trigger": record.trigger.value, "actor_category": record.actor_category,
        "is_terminal": to in CONTRACT_TABLE.terminal,
        "is_resumable": to in CONTRACT_TABLE.resumable,
        "has_side_effects": has_side_effects(contract),
        "timestamp": _json_datetime(record.timestamp, mode="json")}


def _present(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: d[k] for k in keys if d.get(k) not in (None, [], {})}


def handler_name(kind: str) -> str:
    """The ``JournalMapper`` method that maps entries of ``kind``."""
    return "_j_" + kind.replace(".", "_")


def _check_lead(kind: str, seq: int, made: list[MappedEvent]) -> None:
    """The entry's first line is its kind's lead and no other line is a lead, as
    ``JOURNAL_KINDS`` declares: the log view counts leads to know which entries a
    log reflects (read-your-writes)."""
    leads = [is_journal_lead(m.type, m.payload) for m in made]
    if not leads or not leads[0] or made[0].type not in JOURNAL_KINDS[kind].types \
            or any(leads[1:]):
        raise MappingError(f"journal entry {seq} ({kind}) made {[m.type for m in made]}: "
                           "not its lead first and alone (observation/event_types.py)")

