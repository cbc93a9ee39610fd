"""SessionWorkflow: one Temporal workflow per session (workflow id = session id).

``run()`` reads as the statechart: in each state it does that state's work and
fires the table's event. Decisions come from ``workflows.agent`` (pure); state
changes go through ``SessionBook`` (pure); this class only wires them to
Temporal: activities, timers, signals, updates, queries, search attributes.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    import workflows.agent as agent  # `from workflows import agent` is not passed through
    import workflows.decisions as decisions
    import workflows.wait_policy as wait_policy
    from workflows.agent_turn import AgentTurn
    from workflows.cancel import (
        CANCELLED,
        cancelled_in_flight,
        cancelled_in_flight_code,
    )
    from workflows.config import execution_id_for
    from workflows.contract import (
        Actor,
        ExecutionContract,
        Trigger,
    )
    from workflows.messages import (
        Behaviour,
        EndInput,
        MessageInput,
        ReplyInput,
        SessionInput,
        SessionResult,
    )
    from workflows.operators import waiting_details
    from workflows.outcome import NOT_SENT, OUTCOME_UNKNOWN
    from workflows.people import TEMPORAL_ACCESS, PrincipalRef
    from workflows.plan import TaskStopped
    from workflows.plan_turn import PlanTurn
    from workflows.search_attributes import WAITING_SINCE, WAITING_SINCE_UNSET, status_update
    from workflows.session_book import SessionBook
    from workflows.session_handlers import SessionHandlers
    from workflows.session_state import JOURNAL_MEMO_KEY, PendingRequest, SessionState
    from workflows.statechart import SessionEvent, SessionStatus, is_terminal
    from workflows.steering import (
        INTERRUPTED,
        CutText,
        CutTextInput,
        InFlight,
        Interrupted,
        cut_message,
        with_partial,
    )

E, S = SessionEvent, SessionStatus


@workflow.defn(name="SessionWorkflow")
class SessionWorkflow(SessionHandlers, AgentTurn, PlanTurn):
    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        state = input.state or SessionState(
            session_id=input.session_id,
            config=input.config,
            inbox=[input.config.initial_message] if input.config.initial_message else [],
        )
        self._book = SessionBook(state)
        self._input = input
        self._reply: ReplyInput | None = None
        self._end: EndInput | None = None
        self._recover = False
        self._published: SessionStatus | None = None
        self._journal_for_activity: list[dict[str, Any]] | None = None
        self._published_since: Any = None
        self._refusals_recorded = 0  # record_refusal signals recorded in this run
        self._in_flight: tuple[InFlight, Any] | None = None  # steering (issue 27)
        self._interrupt: MessageInput | None = None
        self._cutting: Any = None
        self._waited_for: InFlight | None = None
        self._cut_calls: tuple[int, int] | None = None

    @property
    def _s(self) -> SessionState:
        return self._book.state

    # -- the statechart ---------------------------------------------------------------

    @workflow.run
    async def run(self, input: SessionInput) -> SessionResult:
        workflow.set_current_details(waiting_details(self._s))
        try:
            while not is_terminal(self._s.status):
                match self._s.status:
                    case S.QUEUED:
                        self._fire(E.TURN_STARTED)
                    case S.RUNNING:
                        await self._run_turn()
                    case S.WAITING_USER:
                        await self._wait_for_person()
                await self._maybe_continue_as_new()
        except asyncio.CancelledError:
            # Cancelling is the person's act (the API, or an operator in the UI).
            self._close(E.RUN_CANCELED, CANCELLED, Actor.USER)
            self._flush()
            raise
        await self._wait(workflow.all_handlers_finished)
        return SessionResult(
            session_id=self._s.session_id, status=self._s.status,
            failure_reason=self._s.failure_reason, contracts=self._s.contracts_total,
            turns=self._s.turns,
        )

    def _fire(self, event: SessionEvent, detail: dict[str, Any] | None = None) -> None:
        change = self._book.fire(event, workflow.now(), detail)
        if change.to_status == S.RUNNING and change.from_status == S.QUEUED:
            self._s.turns += 1
        workflow.set_current_details(waiting_details(self._s))

    def _flush(self, *, before_activity: bool = False) -> None:
        """Before every await: publish the status (search attributes, once per task)
        and write the journal into history, so the exporter maps history alone, in
        order, with the right times: in the next activity's header when one is
        about to start (``journal_carrier``), else in a memo upsert."""
        self._publish()
        entries = self._book.take_journal()
        if not entries:
            return
        dumped = [e.model_dump(mode="json") for e in entries]
        if before_activity and self._input.does(Behaviour.JOURNAL_IN_HEADER):
            self._journal_for_activity = dumped
        else:
            workflow.upsert_memo({JOURNAL_MEMO_KEY: dumped})

    def journal_for_activity(self) -> list[dict[str, Any]] | None:
        """Taken by ``journal_carrier``'s interceptor as the activity starts."""
        out, self._journal_for_activity = self._journal_for_activity, None
        return out

    async def _activity(self, name: str, arg: Any, result_type: type, *,
                        contract: ExecutionContract | None = None,
                        steering: InFlight | None = None, **options: Any) -> Any:
        """Every activity goes through here. Temporal delivers the session's
        cancellation as the activity's (an ActivityError whose cause is a
        CancelledError): turn it back into the session's, or the caller would take it
        for an ordinary failure and carry on. ``contract`` is the one the activity
        works for: it ends CANCELLED, saying whether its outcome is unknown.
        ``steering``: what the turn awaits, for an interrupt (``workflows.steering``):
        cut by one, the activity raises ``Interrupted`` (its contract CANCELLED)."""
        self._flush(before_activity=True)
        handle = workflow.start_activity(name, arg, result_type=result_type, **options)
        if self._journal_for_activity is not None:
            raise RuntimeError("the journal was not carried: build the worker with "
                               "workflows.journal_carrier.INTERCEPTORS")
        self._in_flight = (steering, handle) if steering is not None else None
        try:
            return await handle
        except ActivityError as err:
            if not is_cancelled_exception(err):
                raise
            task = asyncio.current_task()
            if self._cutting is handle and steering is not None and not (
                    task is not None and task.cancelling()):  # not the session's cancel
                # (that wins: it came for the same activity while the cut was on its way)
                self._cutting = None
                if contract is not None and not contract.is_terminal:
                    by = decisions.name_of(self._interrupter())
                    self._book.transition(contract, Trigger.CANCEL, Actor.USER,
                                          workflow.now(), error_message=cut_message(by),
                                          reason_code=INTERRUPTED)
                if steering.kind == "llm_call":
                    steering = with_partial(steering, await self._cut_text(steering.id))
                raise Interrupted(steering) from err
            if contract is not None and not contract.is_terminal:
                self._book.transition(contract, Trigger.CANCEL, Actor.USER, workflow.now(),
                                      error_message=cancelled_in_flight(contract),
                                      reason_code=cancelled_in_flight_code(contract))
            raise asyncio.CancelledError(CANCELLED) from err
        finally:
            self._in_flight = None
            if self._cutting is handle:  # it had ended before its cancel could cut it
                self._cutting = None

    async def _cut_text(self, call_id: str) -> CutText | None:
        """What the cut LLM call had streamed (a local activity: the worker's memory of
        it), or None when it cannot say."""
        self._flush()
        try:
            return await workflow.execute_local_activity(
                "llm_cut_text", CutTextInput(session_id=self._s.session_id, call_id=call_id),
                result_type=CutText, start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=1))
        except ActivityError:
            return None

    def _interrupter(self) -> PrincipalRef:
        """Who asked for the interrupt under way (the log's ``by``)."""
        order = self._interrupt
        who = None if order is None else decisions.decider(order.principal, self._s.config)
        return (who or TEMPORAL_ACCESS).ref()

    async def _wait(self, condition: Any, timeout: timedelta | None = None) -> None:
        self._flush()
        await workflow.wait_condition(condition, timeout=timeout)

    async def _sleep(self, delay: timedelta) -> None:
        """A durable timer (a cancel of the session ends it at once)."""
        self._flush()
        await workflow.sleep(delay)

    def _new_execution_id(self) -> str:
        return execution_id_for(self._s.session_id, workflow.uuid4().hex[:16])

    def _publish(self) -> None:
        """Search attributes, so operators can filter sessions by status."""
        waiting = self._s.status == S.WAITING_USER
        since = self._wait_began()
        # A new wait within one task (a plan step answered, the next one asks) moves
        # WaitingSince, which is what wakes the exporter's parked follower.
        rewait = (waiting and self._published == self._s.status and since is not None
                  and since != self._published_since
                  and self._input.does(Behaviour.EACH_WAIT_PUBLISHED))
        if self._input.search_attributes and (self._published != self._s.status or rewait):
            self._published, self._published_since = self._s.status, since
            workflow.upsert_search_attributes([
                status_update(self._s.status.value),
                WAITING_SINCE.value_set(self._s.status_history[-1].at)
                if waiting and self._s.status_history else WAITING_SINCE_UNSET,
            ])

    def _wait_began(self) -> Any:
        """When the current wait for the person began (None: not waiting, or not known
        here: a restart check keeps the wait it finds)."""
        for change in reversed(self._s.status_history):
            if change.to_status != S.WAITING_USER:
                return None
            if change.from_status != S.WAITING_USER:
                return change.at
        return None

    def _close(self, event: SessionEvent, reason: str, actor: Actor,
               principal: PrincipalRef | None = None) -> None:
        now = workflow.now()
        if self._s.config.plan is not None and self._s.plan_events and event in (
                E.RUN_CANCELED, E.CONVERSATION_ENDED) and not self._plan_state().finished:
            self._record([TaskStopped(reason="canceled", feedback=reason)])
        self._book.cancel_open_contracts(now, reason, actor)
        self._s.pending = None
        self._s.queued_actions = []
        if event in (E.RUN_FAILED, E.RESTART_RECONCILE_FAILED):
            self._s.failure_reason = reason
        self._fire(event, {"reason": reason, **(
            {"principal": principal.model_dump(mode="json")} if principal else {})})

    async def _maybe_continue_as_new(self) -> None:
        if self._s.status not in (S.WAITING_USER, S.QUEUED):
            return
        if self._reply or self._end or self._recover:
            return
        limit = self._input.continue_as_new_after_events
        info = workflow.info()
        if info.is_continue_as_new_suggested() or (
            limit is not None and info.get_current_history_length() > limit
        ):
            await self._wait(workflow.all_handlers_finished)
            self._s.continued_runs += 1
            workflow.continue_as_new(self._input.carried(self._s))

    # -- running: the driver's turn ----------------------------------------------------

    async def _run_turn(self) -> None:
        if self._s.config.plan is not None:
            await self._run_plan()
        else:
            await self._run_agent()

    # -- waiting_user: the person ---------------------------------------------------

    def _ask(self, pending: PendingRequest) -> None:
        self._book.request(pending)
        # `output` only when there is one: the events of every other request keep
        # their shape
        self._fire(E.INTERACTION_REQUESTED, pending.model_dump(
            mode="json", exclude=None if pending.output else {"output"}))

    def _next_step(self) -> wait_policy.WaitStep | None:
        """The wait's next step (remind, escalate, timeout: ``workflows.wait_policy``)."""
        return wait_policy.next_step(self._s.config, self._s.pending, workflow.now())

    async def _wait_for_person(self) -> None:
        s = self._s
        waits_message = s.pending is not None and s.pending.kind == "message"
        step = self._next_step()
        try:
            await self._wait(
                lambda: bool(self._reply or self._end or self._recover
                             or (waits_message and s.inbox)),
                timeout=step.due_in(workflow.now()) if step is not None else None,
            )
        except TimeoutError:
            assert step is not None
            self._take_step(step)
            return
        if self._recover:
            self._recover = False
            self._reconcile()
        elif self._end is not None:
            end, self._end = self._end, None
            who = (decisions.decider(end.principal, s.config) or TEMPORAL_ACCESS).ref()
            self._close(E.CONVERSATION_ENDED,
                        end.reason or f"ended by {decisions.name_of(who)}", Actor.USER, who)
        elif self._reply is not None:
            reply, self._reply = self._reply, None
            assert s.pending is not None
            self._take_reply(s.pending, reply)
        elif waits_message and s.inbox:
            s.pending = None
            s.turn_llm_calls = 0
            self._fire(E.MESSAGE_ACCEPTED, {"text": s.inbox[0]})

    def _take_step(self, step: wait_policy.WaitStep) -> None:
        """The wait's step came due: remind or escalate, and wait again (the run loop
        comes back here, or to a next run that carries the request); or time out."""
        s, now = self._s, workflow.now()
        assert s.pending is not None
        if step.name == "remind":
            self._book.remind(wait_policy.addressees(s.config, s.pending), now)
        elif step.name == "escalate":
            self._book.escalate(*wait_policy.escalated(s.config, s.pending), now)
        else:
            self._on_reply_timeout()
            return
        workflow.set_current_details(waiting_details(self._s))

    def _take_reply(self, pending: PendingRequest, reply: ReplyInput) -> None:
        """A reply the validator let through: from whom (never the body's ``by``), one
        approval of several (the request stays pending), or the decision, with what
        it decided on (the digest; edited arguments; a standing decision it sets)."""
        s, now = self._s, workflow.now()
        who = (decisions.decider(reply.principal, s.config) or TEMPORAL_ACCESS).ref()
        answer = agent.answer_of(pending, reply)
        approved = pending.kind == "approval" and answer.get("approved") is True
        if approved and len(pending.approvals) + 1 < pending.approvals_required:
            self._book.record_approval(who, now, reply.via)  # two-person rule: not yet
            return
        said: dict[str, Any] = {"principal": who.model_dump(mode="json")}
        if reply.via is not None:  # through a signed action link sent to `who`
            said["via"] = reply.via
        if pending.digest is not None:
            said["digest"] = pending.digest
        if approved and pending.approvals_required > 1:
            said["approvals"] = [a.model_dump(mode="json") for a in [*pending.approvals, who]]
        asked = pending.asked or {}
        ran = asked.get("arguments")
        if approved and reply.arguments is not None and pending.execution_id is not None:
            c = s.contract(pending.execution_id)
            ran = reply.arguments
            c.action_detail = {**c.action_detail, "arguments": ran,
                               "edited_by": decisions.name_of(who)}
            said.update(edited_digest=decisions.digest_of(
                decisions.asked_tool_call(asked.get("server"), asked["tool"], ran)),
                edited_by=who.model_dump(mode="json"), edited_arguments=ran)
        if approved and reply.remember is not None:
            standing = decisions.standing_for(pending, reply.remember, ran or {}, who, now)
            self._book.add_standing(standing, decisions.MAX_STANDING)
            said["standing_decision"] = standing.model_dump(mode="json")
        self._accept(answer, decisions.name_of(who), auto=False, principal=who,
                     attribution=said)

    def _accept(self, answer: dict[str, Any], by: str, *, auto: bool,
                principal: PrincipalRef | None = None,
                attribution: dict[str, Any] | None = None) -> None:
        """Record the reply once, leave waiting_user, and settle the waiting contract
        (its transitions say who decided and on what: ``principal``, ``digest``)."""
        s, now = self._s, workflow.now()
        pending = s.pending
        assert pending is not None
        self._book.accept_reply(answer, by, now, auto=auto, principal=principal,
                                attribution=attribution)
        decided = None if principal is None else {
            "principal": principal.model_dump(mode="json"),
            **({"digest": pending.digest} if pending.digest else {})}
        self._fire(E.AUTO_DECIDE_TIMEOUT if auto else E.REPLY_ACCEPTED,
                   {"request_id": pending.request_id, "answer": answer, "by": by})
        if pending.kind == "step":
            self._accept_step(pending, answer, by, decided)
            return
        if pending.execution_id is None:
            return
        c = s.contract(pending.execution_id)
        actor = Actor.TIMER if auto else Actor.USER
        if pending.reason_code == OUTCOME_UNKNOWN:  # "did it happen?" on a tool call
            self._settle_outcome(c, answer, by, actor, decided)
            return
        if pending.reason_code == NOT_SENT:  # "send again or drop?" on a tool call
            self._settle_unsent(c, answer, by, actor, decided)
            return
        self._book.transition(c, Trigger.RESUME, actor, now, decided=decided)
        if pending.kind == "approval":
            if answer.get("approved"):
                return  # RUNNING: the tool node executes it at the start of the turn
            self._book.transition(c, Trigger.REJECT, actor, now, decided=decided,
                                  error_message=f"rejected by {by}: {answer}")
        else:
            self._book.transition(c, Trigger.SUCCEED, Actor.ECS_NODE, now, result=answer,
                                  decided=decided)
        self._book.say(agent.consequence_message(c, c.action_detail.get("tool_call_id")))

    def _on_reply_timeout(self) -> None:
        s = self._s
        assert s.pending is not None
        pending, now = s.pending, workflow.now()
        if not s.config.interactive_require_user_reply:
            answer = decisions.auto_answer_within(pending,
                                                  agent.auto_answer(pending, s.config))
            self._book.record_unanswered(pending, "auto_decided", now, answer)
            self._accept(answer, "auto_decide", auto=True)
            return
        self._book.record_unanswered(pending, "expired", now)
        s.pending = None
        self._fire(E.REPLY_EXPIRED, {"request_id": pending.request_id})
        if pending.execution_id:
            c = s.contract(pending.execution_id)
            self._book.transition(c, Trigger.TIMEOUT, Actor.TIMER, now,
                                  error_message="nobody answered in time")
            self._book.say(
                agent.consequence_message(c, c.action_detail.get("tool_call_id"))
            )

    def _reconcile(self) -> None:
        decision = agent.recovery_check(self._s)
        for warning in decision.warnings:
            workflow.logger.warning("session %s: %s", self._s.session_id, warning)
        if decision.event is E.RESTART_PRESERVE_WAITING:
            self._fire(decision.event, {"reason": decision.reason})
        else:
            self._close(decision.event, decision.reason, Actor.SYSTEM)
