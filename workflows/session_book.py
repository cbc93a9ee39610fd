"""``SessionBook``: the only writer of a session's state (no Temporal import).

The workflow changes its :class:`~workflows.session_state.SessionState` only
through a book, passing ``workflow.now()`` in: statechart events, contracts and
their transitions, the model's context, the person's requests and replies, each
noted in the journal. Deterministic and testable without a server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from workflows.contract import (
    ActionType,
    Actor,
    ExecutionContract,
    ExecutionStatus,
    ExecutionStep,
    TransitionRecord,
    Trigger,
)
from workflows.execution_views import execution_fact
from workflows.io import ChatMessage
from workflows.people import PrincipalRef, StandingDecision
from workflows.session_state import (
    RECENT,
    UNANSWERED_KEPT,
    JournalEntry,
    JournalKind,
    PendingRequest,
    ReplyRecord,
    SessionState,
    StatusChange,
    UnansweredRequest,
    clip_result,
    once_done_record,
)
from workflows.statechart import SessionEvent, fire


class SessionBook:
    """The only writer of a :class:`SessionState`. Every method takes ``now``."""

    def __init__(self, state: SessionState) -> None:
        self.state = state

    def journal(self, kind: JournalKind, now: datetime, data: dict[str, Any]) -> None:
        s = self.state
        s.journal_outbox.append(JournalEntry(seq=s.journal_seq, kind=kind, at=now, data=data))
        s.journal_seq += 1

    def take_journal(self) -> list[JournalEntry]:
        out, self.state.journal_outbox = self.state.journal_outbox, []
        return out

    # -- the statechart --------------------------------------------------------

    def fire(
        self, event: SessionEvent, now: datetime, detail: dict[str, Any] | None = None
    ) -> StatusChange:
        t = fire(self.state.status, event, self.state.config.policy, detail)
        change = StatusChange(
            from_status=t.from_status, to_status=t.to_status, event=t.event, at=now,
            fcmp=list(t.fcmp),
        )
        self.state.status = t.to_status
        _append(self.state.status_history, change, RECENT)
        self.journal("session.status", now,
                  {**change.model_dump(mode="json", exclude={"at"}), "detail": detail or {}})
        return change

    # -- contracts ------------------------------------------------------------

    def new_contract(
        self,
        execution_id: str,
        action_type: ActionType,
        detail: dict[str, Any],
        now: datetime,
        *,
        irreversible: bool = False,
        idempotency_key: str | None = None,
    ) -> ExecutionContract:
        c = ExecutionContract(
            execution_id=execution_id,
            session_id=self.state.session_id,
            action_type=action_type,
            action_detail=detail,
            irreversible=irreversible,
            idempotency_key=idempotency_key,
            created_at=now,
        )
        self.state.contracts.append(c)
        self.state.contracts_total += 1
        self.journal("contract.created", now, c.model_dump(
            mode="json", include={"execution_id", "action_type", "action_detail",
                                  "irreversible", "idempotency_key", "created_at"}))
        return c

    def transition(
        self,
        contract: ExecutionContract,
        trigger: Trigger,
        actor: Actor,
        now: datetime,
        *,
        result: Any = None,
        error_message: str | None = None,
        reason_code: str | None = None,
        decided: dict[str, Any] | None = None,
    ) -> TransitionRecord:
        """``decided``: who decided it and on what (``principal``, ``digest``), for a
        transition a person's reply makes; in the journal only when given."""
        record = contract.transition(
            trigger, actor=actor, timestamp=now, result=result, error_message=error_message,
            reason_code=reason_code,
        )
        _append(self.state.execution_trace, ExecutionStep.from_record(record), RECENT)
        outcome: dict[str, Any] = {}
        if contract.is_terminal:
            outcome = {"result": clip_result(contract.result),
                       "error_message": contract.error_message}
        if contract.reason_code is not None and (reason_code or contract.is_terminal):
            outcome["reason_code"] = contract.reason_code  # only when set: older journals
        self.journal("contract.transition", now,
                     {**record.model_dump(mode="json"), **outcome, **(decided or {})})
        if contract.is_terminal:
            self._closed(contract, now)
        return record

    def _closed(self, contract: ExecutionContract, now: datetime) -> None:
        s = self.state
        _append(s.memory, execution_fact(contract, now), self.facts_window)
        record = once_done_record(contract)
        if record is not None:
            s.once_done[contract.idempotency_key] = record  # type: ignore[index]
        closed = [c for c in s.contracts if c.is_terminal]
        if len(closed) > RECENT:
            gone = {c.execution_id for c in closed[:len(closed) - RECENT]}
            s.contracts = [c for c in s.contracts if c.execution_id not in gone]

    @property
    def facts_window(self) -> int:
        agent = self.state.config.agent
        return agent.context.max_facts if agent is not None else RECENT

    def say(self, message: ChatMessage) -> None:
        """Add a message to the conversation, keeping it within the context policy."""
        s = self.state
        s.conversation.append(message)
        agent = s.config.agent
        if agent is not None:
            keep = context_window(s.conversation, agent.context.max_messages,
                                  agent.context.max_chars)
            s.messages_dropped += len(s.conversation) - len(keep)
            s.conversation = keep

    def cancel_open_contracts(self, now: datetime, reason: str, actor: Actor) -> None:
        """Close every open contract as CANCELLED (a PENDING one is started first:
        the table has no PENDING -> CANCELLED edge)."""
        for c in self.state.open_contracts():
            if c.status == ExecutionStatus.PENDING:
                self.transition(c, Trigger.START, actor, now)
            self.transition(c, Trigger.CANCEL, actor, now, error_message=reason)

    # -- the person ------------------------------------------------------------

    def refuse(self, refusal: dict[str, Any], now: datetime) -> None:
        """A signal that could not be taken (stale or malformed): recorded, nothing
        else changes (``interaction.reply.refused`` in the log)."""
        self.journal("reply.refused", now, refusal)

    def request(self, pending: PendingRequest) -> None:
        self.state.pending = pending

    def record_unanswered(
        self, pending: PendingRequest, how: Literal["expired", "auto_decided"],
        now: datetime, answer: dict[str, Any] | None = None,
    ) -> None:
        record = UnansweredRequest(request_id=pending.request_id, how=how, at=now,
                                   answer=answer)
        self.state.unanswered = [*self.state.unanswered, record][-UNANSWERED_KEPT:]

    def accept_reply(
        self, answer: dict[str, Any], by: str, now: datetime, *, auto: bool = False,
        principal: PrincipalRef | None = None, attribution: dict[str, Any] | None = None,
    ) -> ReplyRecord:
        """``attribution``: what the log says of the decision besides who made it
        (``digest``, ``edited_digest``, ``approvals``, ``standing_decision``...)."""
        pending = self.state.pending
        if pending is None:
            raise ValueError("no request is pending")
        record = ReplyRecord(
            request_id=pending.request_id, kind=pending.kind, answer=answer, by=by, at=now,
            auto=auto, principal=principal,
        )
        _append(self.state.replies, record, RECENT)
        self.state.replies_total += 1
        if not auto:  # max_turns bounds the agent alone; a person's answer resets it
            self.state.turn_llm_calls = 0
        self.state.pending = None
        self.journal("reply.accepted", now, {**record.model_dump(mode="json", exclude={"at"}),
                                             **(attribution or {})})
        return record

    def record_approval(self, principal: PrincipalRef, now: datetime,
                        via: str | None = None) -> None:
        """One approval of several (``approvals_required``): the request stays pending
        with its tally (which continue-as-new carries, in the request). ``via``: how
        it came (``link``: a signed action link), only when said."""
        pending = self.state.pending
        if pending is None:
            raise ValueError("no request is pending")
        pending.approvals = [*pending.approvals, principal]
        self.journal("approval.recorded", now, {
            "request_id": pending.request_id, "kind": pending.kind,
            "principal": principal.model_dump(mode="json"), "digest": pending.digest,
            "approvals": [a.model_dump(mode="json") for a in pending.approvals],
            "approvals_required": pending.approvals_required,
            "execution_id": pending.execution_id, **({"via": via} if via else {})})

    def remind(self, addressees: list[str], now: datetime) -> None:
        """The wait's reminder (``workflows.wait_policy``): once per request."""
        pending = self._pending()
        pending.reminded_at = now
        self.journal("request.reminded", now, {
            "request_id": pending.request_id, "kind": pending.kind,
            **({"digest": pending.digest} if pending.digest else {}),
            "approvers": list(addressees), "execution_id": pending.execution_id})

    def escalate(self, approvers: list[str], added: list[str], now: datetime) -> None:
        """The wait's escalation: the request is for ``approvers`` from now on (its
        addressees and the ones ``added``); once per request."""
        pending = self._pending()
        pending.approvers = list(approvers)
        pending.escalated_at = now
        self.journal("request.escalated", now, {
            "request_id": pending.request_id, "kind": pending.kind,
            **({"digest": pending.digest} if pending.digest else {}),
            "approvers": list(approvers), "escalated_to": list(added),
            "execution_id": pending.execution_id})

    def _pending(self) -> PendingRequest:
        if self.state.pending is None:
            raise ValueError("no request is pending")
        return self.state.pending

    def decided_without_asking(self, detail: dict[str, Any], now: datetime) -> None:
        """A tool call a rule or a standing decision decided (no request to a person):
        ``detail`` names the request it stands for, what was asked, its digest, the
        decision and what made it."""
        self.journal("request.decided", now, detail)

    def add_standing(self, standing: StandingDecision, limit: int) -> None:
        s = self.state
        s.standing_decisions = [*s.standing_decisions, standing][-limit:]

    def revoke_standing(self, standing_id: str, by: PrincipalRef, now: datetime) -> None:
        s = self.state
        gone = next(sd for sd in s.standing_decisions if sd.standing_id == standing_id)
        s.standing_decisions = [sd for sd in s.standing_decisions
                                if sd.standing_id != standing_id]
        self.journal("standing.revoked", now, {
            "standing_id": standing_id, "tool": gone.tool, "server": gone.server,
            "arguments": gone.arguments, "set_by": gone.set_by.model_dump(mode="json"),
            "revoked_by": by.model_dump(mode="json")})

    def take_message(self, text: str, principal: PrincipalRef | None) -> None:
        """A message from the person, into the inbox, with who sent it."""
        s = self.state
        senders = s.inbox_from[:len(s.inbox)]
        s.inbox_from = [*senders, *[None] * (len(s.inbox) - len(senders)), principal]
        s.inbox.append(text)

    def take_inbox(self) -> list[tuple[str, PrincipalRef | None]]:
        """The inbox's messages with their senders, emptied."""
        s = self.state
        out = [(text, s.inbox_from[i] if i < len(s.inbox_from) else None)
               for i, text in enumerate(s.inbox)]
        s.inbox, s.inbox_from = [], []
        return out


def context_window(messages: list[ChatMessage], max_messages: int,
                   max_chars: int) -> list[ChatMessage]:
    """The latest messages within both budgets (at least the last one). The window
    never starts with a tool result: a model cannot take one without its call."""
    start, chars = len(messages), 0
    while start > 0:
        size = len(messages[start - 1].content)
        if len(messages) - start >= max_messages or (
                start < len(messages) and chars + size > max_chars):
            break
        start -= 1
        chars += size
    while start < len(messages) - 1 and messages[start].role == "tool":
        start += 1
    return messages[start:]


def _append(items: list[Any], item: Any, keep: int) -> None:
    items.append(item)
    if len(items) > keep:
        del items[:len(items) - keep]
