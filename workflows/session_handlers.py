"""The session's handlers: the signals and updates that come in from outside (a
reply, a message, the end of the conversation, recovery) and the queries that
everything observing a session asks. A mixin of ``SessionWorkflow``
(``workflows.session``), which registers them under the same names.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import workflows.agent as agent  # `from workflows import agent` is not passed through
    import workflows.decisions as decisions
    from workflows.cancel import late_reply_problem
    from workflows.execution_views import (
        ExecutionConsequenceView,
        ExecutionFact,
        ExecutionObserver,
        ExecutionSnapshot,
        ExecutionTimeline,
        execution_snapshot,
    )
    from workflows.fsm import StateMachineTopology
    from workflows.messages import (
        Ack,
        Behaviour,
        ContractQuery,
        EndInput,
        LiveSession,
        MessageInput,
        RecoverInput,
        RefusalInput,
        ReplyInput,
        RevokeInput,
        SessionInput,
    )
    from workflows.operators import SIGNALS, refusal, signal_input
    from workflows.people import Principal, StandingDecision
    from workflows.plan_dispatch import step_command_problem
    from workflows.session_state import PendingRequest, SessionState
    from workflows.statechart import SessionStatus, is_terminal
    from workflows.steering import InFlight, SteerDecision, steer

S = SessionStatus


class SessionHandlers:
    """Mixin for SessionWorkflow; relies on its ``_s``, ``_book``, ``_flush`` and
    ``_plan_state``; sets the ``_reply``, ``_end`` and ``_recover`` its run waits on."""

    _s: Any
    _input: SessionInput
    _book: Any
    _reply: ReplyInput | None
    _end: EndInput | None
    _recover: bool
    _refusals_recorded: int
    # steering (issue 27): what the turn awaits now, with its activity's handle; the
    # interrupt asked for (the message that asked it), and whether its call was cut
    _in_flight: tuple[InFlight, Any] | None
    _interrupt: MessageInput | None
    _cutting: Any
    _waited_for: InFlight | None

    # -- signals and updates (operators can send the signals from the Temporal UI) --

    def _refuse(self, signal: str, args: tuple[Any, ...], reason: str,
                why: decisions.AnswerProblem | None = None,
                principal: Principal | None = None) -> None:
        """A stale, malformed or unauthorised signal: one log line, and
        (``REFUSALS_RECORDED``) an ``interaction.reply.refused`` event in the log and
        the stream (with the rule or code and the principal when it is about who may
        answer). The session is unchanged; the workflow task does not fail."""
        workflow.logger.warning("session %s: signal %s refused: %s", self._s.session_id,
                                signal, reason)
        if is_terminal(self._s.status) or not self._input.does(Behaviour.REFUSALS_RECORDED):
            return
        data = refusal(signal, args, reason)
        if why is not None:
            data.update({k: v for k, v in why.details.items() if k in ("rule", "code")})
        if principal is not None:
            data["principal"] = principal.ref().model_dump(mode="json")
        self._book.refuse(data, workflow.now())
        self._flush()  # the main coroutine may wait on: write it into history now

    def _answer_problem(self, reply: ReplyInput) -> decisions.AnswerProblem | None:
        """Who may answer, and whether the answer is for what is asked now
        (``workflows.decisions``): after ``_reply_problem`` found the reply fits."""
        pending = self._s.pending
        if pending is None:
            return None
        approve = reply.approve if pending.kind in ("approval", "confirm") else (
            reply.choice == "approve" if pending.kind in ("step", "window") else None)
        return decisions.answer_problem(
            reply.principal, self._s.config, pending, approve=approve, digest=reply.digest,
            arguments=reply.arguments, remember=reply.remember,
            standing_count=len(self._s.standing_decisions), via=reply.via)

    def _from_temporal_refused(self, principal: Principal | None
                               ) -> decisions.AnswerProblem | None:
        return decisions.source_refusal(principal, self._s.config)

    @staticmethod
    def _raise(problem: decisions.AnswerProblem) -> None:
        """A validator's refusal, typed for the API (403, 409, 422: ``details[0]``)."""
        raise ApplicationError(problem.message, problem.details, type=problem.type,
                               non_retryable=True)

    # Signals take their payload raw and validate it here: the SDK would drop a payload
    # that does not convert to the input type (with a traceback, and nothing recorded).

    @workflow.signal(name="submit_reply", description=SIGNALS["submit_reply"])
    def submit_reply(self, *args: Any) -> None:
        reply, problem = signal_input(ReplyInput, args)
        if reply is not None:
            problem = self._reply_problem(reply)
        if problem or reply is None:
            self._refuse("submit_reply", args, problem or "no reply")
            return
        why = self._answer_problem(reply)
        if why is not None:
            self._refuse("submit_reply", args, why.message, why, reply.principal)
            return
        self._reply = reply

    @workflow.update(name="reply")
    def reply(self, reply: ReplyInput) -> Ack:
        problem = self._reply_problem(reply)
        if problem:  # two replies in one task: the first one wins
            raise ApplicationError(problem, type="ReplyRefused", non_retryable=True)
        self._reply = reply
        return Ack(request_id=reply.request_id, status=self._s.status,
                   journal_seq=self._s.journal_seq + 1)

    @reply.validator
    def _validate_reply(self, reply: ReplyInput) -> None:
        problem = self._reply_problem(reply)
        if problem:
            raise ValueError(problem)
        why = self._answer_problem(reply)
        if why is not None:  # 403, 409 or 422 at the API (details[0])
            self._raise(why)

    def _reply_problem(self, reply: ReplyInput) -> str | None:
        if self._reply is not None:
            return "a reply to this request was already accepted"
        pending = self._s.pending
        if pending is None or pending.request_id != reply.request_id:
            late = late_reply_problem(self._s.unanswered, reply.request_id)
            if late:
                return late
        in_window = pending is not None and pending.kind == "window"
        if self._s.status != S.WAITING_USER and not in_window:
            return f"nothing is pending: the session is {self._s.status.value}"
        problem = agent.reply_problem(pending, reply)
        if problem is None and pending is not None and pending.kind in ("step", "window"):
            if reply.request_id != pending.request_id:
                return (f"reply names request {reply.request_id!r}, but the pending request "
                        f"is {pending.request_id!r}")
            if in_window and reply.choice not in pending.options:
                return f"an in-window step can only be decided with {pending.options}"
            problem = step_command_problem(self._plan_state(), reply.choice, reply.values)
        return problem

    @workflow.signal(name="submit_message", description=SIGNALS["submit_message"])
    def submit_message(self, *args: Any) -> None:
        message, problem = signal_input(MessageInput, args)
        if message is not None and is_terminal(self._s.status):
            problem = f"the session is {self._s.status.value}: it takes no messages"
        if problem or message is None:
            self._refuse("submit_message", args, problem or "no message")
            return
        why = self._from_temporal_refused(message.principal)
        if why is not None:
            self._refuse("submit_message", args, why.message, why)
            return
        decision = self._steer(message)
        if decision.problem is not None:
            self._refuse("submit_message", args, decision.problem.message, decision.problem)
            return
        self._take_message(message, decision)

    def _steer(self, message: MessageInput) -> SteerDecision:
        """What the message's ``if_busy`` does now (``workflows.steering``)."""
        return steer(message.if_busy, self._s.status, plan=self._s.config.plan is not None,
                     in_flight=self._in_flight[0] if self._in_flight else None,
                     plan_interrupt=self._input.does(Behaviour.PLAN_INTERRUPT))

    def _take_message(self, message: MessageInput,
                      decision: SteerDecision | None = None) -> None:
        who = decisions.decider(message.principal, self._s.config)
        self._book.take_message(message.text, who.ref() if who is not None else None)
        if decision is None or decision.action not in ("cut", "after_call"):
            return
        if self._interrupt is None:  # a second interrupt of the same turn: one cut
            self._interrupt = message
        if decision.action == "after_call" and self._in_flight is not None:
            self._waited_for = self._in_flight[0]  # never cut: its outcome is awaited
        if decision.action == "cut" and self._in_flight is not None \
                and self._cutting is None:
            # The activity's cancellation (Temporal's, TRY_CANCEL: the turn goes on at
            # once); ``_activity`` turns it into ``Interrupted``.
            self._cutting = self._in_flight[1]
            self._in_flight[1].cancel()

    @workflow.update(name="send_message")
    def send_message(self, message: MessageInput) -> Ack:
        self._take_message(message, self._steer(message))
        return Ack(status=self._s.status, journal_seq=self._s.journal_seq + 1)

    @send_message.validator
    def _validate_message(self, message: MessageInput) -> None:
        if is_terminal(self._s.status):
            raise ValueError(f"the session is {self._s.status.value}: it takes no messages")
        refused = self._from_temporal_refused(message.principal)
        if refused:
            self._raise(refused)
        problem = self._steer(message).problem
        if problem is not None:  # 409 session_busy / not_interruptible at the API
            self._raise(problem)

    @workflow.signal(name="end_conversation", description=SIGNALS["end_conversation"])
    def end_conversation_signal(self, *args: Any) -> None:
        end, problem = signal_input(EndInput, args)
        problem = problem or self._end_problem()
        if problem or end is None:
            self._refuse("end_conversation", args, problem or "no input")
            return
        why = self._from_temporal_refused(end.principal)
        if why is not None:
            self._refuse("end_conversation", args, why.message, why)
            return
        self._end = end

    def _end_problem(self) -> str | None:
        if self._s.status != S.WAITING_USER:
            return (f"the session is {self._s.status.value}: it can be ended while it "
                    "waits for the person (cancel it otherwise)")
        return None

    @workflow.update(name="end")
    def end(self, end: EndInput) -> Ack:
        self._end = end
        return Ack(status=self._s.status, journal_seq=self._s.journal_seq + 1)

    @end.validator
    def _validate_end(self, end: EndInput) -> None:
        problem = self._end_problem()
        if problem:
            raise ValueError(problem)
        refused = self._from_temporal_refused(end.principal)
        if refused:
            self._raise(refused)

    @workflow.signal(name="record_refusal")
    def record_refusal(self, *args: Any) -> None:
        """The API refused a principal (403): one ``interaction.reply.refused`` line
        (who, what, which rule); nothing else changes. At most
        ``MAX_RECORDED_REFUSALS`` per run are recorded (a flood cannot fill history)."""
        refused, problem = signal_input(RefusalInput, args)
        if refused is None or is_terminal(self._s.status):
            workflow.logger.warning("session %s: record_refusal ignored: %s",
                                    self._s.session_id, problem or "the session is over")
            return
        if self._refusals_recorded >= decisions.MAX_RECORDED_REFUSALS:
            return
        self._refusals_recorded += 1
        p = refused.principal
        self._book.refuse({
            "signal": "record_refusal", "action": refused.action, "rule": refused.rule,
            "code": "forbidden", "reason": refused.message, "message": refused.message,
            "request_id": refused.request_id, "by": decisions.name_of(p),
            "principal": p.ref().model_dump(mode="json")}, workflow.now())
        self._flush()

    @workflow.update(name="revoke_standing")
    def revoke_standing(self, revoke: RevokeInput) -> Ack:
        who = decisions.decider(revoke.principal, self._s.config)
        assert who is not None  # the validator refused it otherwise
        self._book.revoke_standing(revoke.standing_id, who.ref(), workflow.now())
        self._flush()
        return Ack(status=self._s.status, journal_seq=self._s.journal_seq)

    @revoke_standing.validator
    def _validate_revoke(self, revoke: RevokeInput) -> None:
        problem = decisions.revoke_problem(revoke.principal, self._s.config,
                                           self._s.standing_decisions, revoke.standing_id)
        if problem:
            self._raise(problem)

    @workflow.query(name="standing_decisions")
    def standing_decisions(self) -> list[StandingDecision]:
        return self._s.standing_decisions

    @workflow.signal(name="recover")
    def recover(self, input: RecoverInput) -> None:
        if self._s.status == S.WAITING_USER:
            self._recover = True

    # -- queries: everything observation needs ---------------------------------------

    def _observer(self) -> ExecutionObserver:
        return ExecutionObserver(self._s.session_id, self._s.contracts, workflow.now())

    @workflow.query(name="snapshot")
    def snapshot(self) -> LiveSession:
        s, now = self._s, workflow.now()
        last = next((m.content for m in reversed(s.conversation)
                     if m.role == "assistant" and m.content), None)
        return LiveSession(
            session_id=s.session_id, status=s.status, mode=s.config.mode, pending=s.pending,
            contracts=[execution_snapshot(c, now) for c in s.contracts], memory=s.memory,
            status_history=s.status_history, replies=s.replies_total,
            contracts_total=s.contracts_total, turns=s.turns,
            llm_calls=s.llm_calls, failure_reason=s.failure_reason, last_text=last,
        )

    @workflow.query(name="contract_snapshot")
    def contract_snapshot(self, q: ContractQuery) -> ExecutionSnapshot:
        try:
            return self._observer().snapshot(q.execution_id)
        except KeyError:
            raise ValueError(f"no contract {q.execution_id} in this session") from None

    @workflow.query(name="consequence_views")
    def consequence_views(self) -> list[ExecutionConsequenceView]:
        return self._observer().consequence_views()

    @workflow.query(name="timeline")
    def timeline(self) -> ExecutionTimeline:
        return self._observer().timeline()

    @workflow.query(name="topology")
    def topology(self) -> StateMachineTopology:
        return ExecutionObserver.topology()

    @workflow.query(name="memory")
    def memory(self) -> list[ExecutionFact]:
        return self._s.memory

    @workflow.query(name="pending_request")
    def pending_request(self) -> PendingRequest | None:
        return self._s.pending

    @workflow.query(name="state")
    def state(self) -> SessionState:
        return self._s
