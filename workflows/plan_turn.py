"""The plan driver of SessionWorkflow (seed 002): walks the steps at the cursor.

A mixin: the workflow class wires it in. Decisions come from ``resolve()`` and
``dispatch()`` (pure, ``workflows/plan*.py``); this code only runs the step's
activities and records what was decided. The cursor lives in the plan's event
log (``state = replay(log)``), which is part of the session state.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import workflows.decisions as decisions
    from workflows.activity_calls import call_outcome, failure_text, heartbeat
    from workflows.cancel import cancelled_in_flight
    from workflows.contract import ActionType, Actor, ExecutionContract, Trigger
    from workflows.io import CommandInput, CommandResult, ToolCallInput, ToolCallResult
    from workflows.messages import Behaviour
    from workflows.outcome import attempt_id_for, not_sent_message
    from workflows.people import TEMPORAL_ACCESS
    from workflows.plan import (
        PlanEvent,
        PlanState,
        PlanStep,
        StepCompleted,
        StepWaiting,
        TaskStarted,
        TaskStopped,
        ToolRun,
        VerifyCmd,
        VerifyOutcome,
        WindowLaunched,
        replay,
        resolve,
    )
    from workflows.plan_dispatch import (
        STEP_CHOICES,
        Dispatch,
        dispatch,
        output_text,
        person_command,
        step_output,
    )
    from workflows.session_state import PendingRequest
    from workflows.statechart import SessionEvent, SessionStatus
    from workflows.steering import (
        InFlight,
        Interrupted,
        interrupted_entry,
        plan_stop_text,
        step_safety,
    )

E, S = SessionEvent, SessionStatus
ONCE = RetryPolicy(maximum_attempts=1)
STEP_HEARTBEAT = timedelta(seconds=10)


class PlanTurn:
    """Mixin for SessionWorkflow; relies on its ``_s``, ``_book``, ``_fire``,
    ``_close``, ``_ask``, ``_activity``, ``_wait``, ``_reply`` and ``_new_execution_id``."""

    _s: Any
    _input: Any
    _book: Any
    _reply: Any
    _interrupt: Any
    _waited_for: Any

    # -- the log --------------------------------------------------------------

    def _plan_state(self) -> PlanState:
        return replay(len(self._s.config.plan.steps), self._s.plan_events)

    def _record(self, events: list[PlanEvent]) -> None:
        for event in events:
            self._s.plan_events.append(event)
            replay(len(self._s.config.plan.steps), self._s.plan_events)  # rules hold
            self._book.journal("plan.event", workflow.now(), event.model_dump(mode="json"))

    # -- a fork's first run (issue 27: workflows.fork) ------------------------------

    _fork_asked = False

    def _ask_again(self, at: PlanState) -> bool:
        """A fork of a plan waiting for a person to verify a step or to decide on a
        failed (or interrupted) one asks again, in its own log: the wait's
        ``StepWaiting`` (already in the plan's events: not recorded twice), the step's
        contract (suspended with what the step did, for a verify) and the request.
        False: the plan waits for nothing, it goes on at its cursor."""
        last = self._s.plan_events[-1] if self._s.plan_events else None
        if self._s.pending is not None or not isinstance(last, StepWaiting) \
                or last.reason not in ("verify_human", "on_fail_human") \
                or at.waiting != last.reason:
            return False
        self._book.journal("plan.event", workflow.now(), last.model_dump(mode="json"))
        i = at.current_step
        if last.reason == "on_fail_human":
            self._ask_step(at, "on_fail_human", None, f"step {i} failed: {last.feedback[:500]}")
            return True
        done = next(e for e in reversed(self._s.plan_events)
                    if isinstance(e, StepCompleted) and e.step == i)
        output = step_output([done])
        c = self._step_contract(i, self._s.config.plan.steps[i])
        self._book.transition(c, Trigger.SUSPEND, Actor.VERIFY, workflow.now(), result=output)
        self._ask_step(at, "verify_human", c, f"verify step {i} and approve it",
                       output=output_text(output))
        return True

    # -- running: the step at the cursor ----------------------------------------

    async def _run_plan(self) -> None:
        plan = self._s.config.plan
        if not self._s.plan_events:
            self._record([TaskStarted(task=plan.name, steps=len(plan.steps))])
        if self._input.forked_from is not None and not self._fork_asked:
            self._fork_asked = True  # once: a fork's first run, from its parent's wait
            if self._ask_again(self._plan_state()):
                return
        try:
            while self._s.status == S.RUNNING:
                at = self._plan_state()
                if at.current_step >= len(plan.steps):
                    self._record([TaskStopped(reason="completed")])
                    self._fire(E.RUN_SUCCEEDED, {"steps": len(plan.steps)})
                    return
                step = plan.steps[at.current_step]
                if step.gate:
                    c = self._step_contract(at.current_step, step)
                    self._book.transition(c, Trigger.SUSPEND, Actor.PLAN, workflow.now())
                    self._record([StepWaiting(step=at.current_step, reason="gate")])
                    self._ask_step(at, "gate", c, step.name or f"gate {at.current_step}")
                    return
                if self._interrupt is not None:  # asked for while the last step ran
                    self._stop_interrupted(None)
                    return
                try:
                    await self._run_step(at, step)
                except Interrupted as ended:
                    self._stop_interrupted(ended.cut)
                    return
        finally:
            # The plan left RUNNING by itself (the step it let finish asks the person,
            # or ends the plan): nothing is left to stop, but the interrupt is logged.
            # (Still RUNNING here: the session is being cancelled.)
            if self._interrupt is not None and self._s.status != S.RUNNING:
                self._log_interrupt(None)
            self._interrupt, self._waited_for = None, None

    # -- steering (issue 27: workflows.steering) ---------------------------------------

    def _step_in_flight(self, c: ExecutionContract, step: int) -> InFlight | None:
        """What an interrupt finds running: the step (None in sessions started before
        plan interrupts: nothing to cut, ``steer`` refuses them)."""
        if not self._input.does(Behaviour.PLAN_INTERRUPT):
            return None
        s = self._s.config.plan.steps[step]
        run = s.run
        return InFlight(kind="plan_step", id=c.execution_id, step=step,
                        tool=run.tool if isinstance(run, ToolRun) else None,
                        server=run.server if isinstance(run, ToolRun) else None,
                        safety=step_safety(s.safety, run, self._s.config.plan.tools))

    def _stop_interrupted(self, cut: InFlight | None) -> None:
        """An interrupt stops the plan at the step boundary: the log says what was cut,
        why and by whom (``turn.interrupted``), then the message (as the agent's new
        turn would take it), and the plan waits for the person at its cursor as after a
        failed step (a cut step's contract ended CANCELLED)."""
        text = self._log_interrupt(cut)
        self._record([StepWaiting(step=self._plan_state().current_step,
                                  reason="on_fail_human", feedback=text)])
        self._ask_step(self._plan_state(), "on_fail_human", None, text)

    def _log_interrupt(self, cut: InFlight | None) -> str:
        """The interrupt under way, in the log: ``turn.interrupted`` and the message(s)
        waiting in the inbox; taken (cleared). Its text for the person."""
        who = self._interrupter()
        by = decisions.name_of(who)
        order, waited = self._interrupt, self._waited_for
        self._interrupt, self._waited_for = None, None
        at = self._plan_state()
        text = plan_stop_text(by, at.current_step, cut, order.text if order else "")
        self._book.journal("turn.interrupted", workflow.now(), interrupted_entry(
            by=by, principal=who.model_dump(mode="json"), cut=cut, waited_for=waited,
            cancelled=[], dropped=[], turn=self._s.turns + 1))
        for said, sender in self._book.take_inbox():  # the message, in the log
            self._book.journal("message.accepted", workflow.now(), {"text": said, **(
                {"by": decisions.name_of(sender), "principal": sender.model_dump(mode="json")}
                if sender is not None else {})})
        return text

    def _step_contract(self, index: int, step: PlanStep) -> ExecutionContract:
        run = step.run.model_dump() if isinstance(step.run, ToolRun) else step.run
        c = self._book.new_contract(
            self._new_execution_id(), ActionType.PLAN_STEP,
            {"step": index, "name": step.name, "run": run, "gate": step.gate,
             "in_window": step.in_window}, workflow.now())
        self._book.transition(c, Trigger.START, Actor.PLAN, workflow.now())
        return c

    async def _run_step(self, at: PlanState, step: PlanStep) -> None:
        i = at.current_step
        c = self._step_contract(i, step)
        out, lost = await self._execute_step(i, step, c)
        if out is None and lost is None:
            return  # a person decided the in-window step while it ran
        code = out.exit_code if out is not None else -1
        verify, feedback = VerifyOutcome.NOT_CONFIGURED, ""
        if lost is not None:
            feedback = f"window lost: {lost}"
        elif code != 0:
            feedback = (out.stderr or out.stdout or "").strip() if out else ""
        elif step.verify == "human":
            verify = VerifyOutcome.HUMAN_REQUIRED
        elif isinstance(step.verify, VerifyCmd):
            v = await self._command(c, i, step.verify.cmd, "verify", step.timeout_s)
            verify = VerifyOutcome.PASSED if v.exit_code == 0 else VerifyOutcome.FAILED
            feedback = (v.stdout + v.stderr).strip()
            if verify is VerifyOutcome.FAILED:
                code = 1  # seed 002 §4: the verify's exit code, not the run's
        action = resolve(code, verify, step.on_fail, at.retry_count, step.max_retries,
                         feedback=feedback)
        self._settle(at, c, dispatch(i, action, out, code, lost,
                                     verify_failed=verify is VerifyOutcome.FAILED))

    def _settle(self, at: PlanState, c: ExecutionContract, d: Dispatch) -> None:
        """Carry out a dispatch: record its events, settle the contract, go on."""
        self._record(d.events)
        now = workflow.now()
        output = step_output(d.events)
        if d.then == "advance":
            self._book.transition(c, Trigger.SUCCEED, Actor.PLAN, now, result=output)
        elif d.then == "wait_verify_human":
            # The person who verifies sees what the step did (the contract's result,
            # and the request's `output`).
            self._book.transition(c, Trigger.SUSPEND, Actor.VERIFY, now, result=output)
            self._ask_step(self._plan_state(), "verify_human", c,
                           f"verify step {at.current_step} and approve it",
                           output=output_text(output))
        else:
            self._book.transition(c, Trigger.FAIL, Actor.PLAN, now, error_message=d.feedback)
            if d.then == "wait_on_fail_human":
                self._ask_step(self._plan_state(), "on_fail_human", None,
                               f"step {at.current_step} failed: {d.feedback[:500]}")
            elif d.then == "stop":
                self._close(E.RUN_FAILED, f"plan stopped at step {at.current_step}: "
                            f"{d.events[-1].reason}: {d.feedback[:500]}", Actor.PLAN)

    def _pass_env(self) -> list[str]:
        plan = self._s.config.plan
        return list(plan.pass_env) if plan is not None else []

    async def _command(self, c: ExecutionContract, step: int, command: str, purpose: str,
                       timeout_s: float) -> CommandResult:
        inp = CommandInput(session_id=self._s.session_id, execution_id=c.execution_id,
                           command=command, purpose=purpose, step=step, timeout_s=timeout_s,
                           pass_env=self._pass_env())
        try:
            return await self._activity(
                "run_command", inp, CommandResult, retry_policy=ONCE, contract=c,
                steering=self._step_in_flight(c, step),
                start_to_close_timeout=timedelta(seconds=timeout_s + 60),
                heartbeat_timeout=heartbeat(STEP_HEARTBEAT, self._input.timing))
        except ActivityError as err:
            return CommandResult(exit_code=-1, stderr=f"outcome unknown: {err.cause or err}")

    async def _execute_step(self, i: int, step: PlanStep, c: ExecutionContract
                            ) -> tuple[CommandResult | None, str | None]:
        """Run the step: (its output, None), or (None, why the window was lost), or
        (None, None) when a person decided an in-window step first."""
        if isinstance(step.run, ToolRun):
            return await self._tool_step(step, step.run, c), None
        assert isinstance(step.run, str)
        if not step.in_window:
            return await self._command(c, i, step.run, "run", step.timeout_s), None
        return await self._window(i, step, c)

    async def _tool_step(self, step: PlanStep, run: ToolRun, c: ExecutionContract
                         ) -> CommandResult:
        """A tool call step, run once. In sessions with the send window
        (``Behaviour.SEND_WINDOW``) it carries sent marks: a call that provably never
        left is tried again (same key) after a backoff timer for the window, and past
        it the step fails as not sent, so its ``on_fail`` route (a person) decides."""
        server = next(t for t in self._s.config.plan.tools if t.name == run.server)
        windowed = self._input.does(Behaviour.SEND_WINDOW)
        attempt, first_unsent = 0, None
        while True:
            attempt += 1
            attempt_id = attempt_id_for(c.execution_id, len(c.transitions), attempt) \
                if windowed else None
            try:
                r = await self._activity(
                    "call_tool", ToolCallInput(
                        session_id=self._s.session_id, execution_id=c.execution_id,
                        server=server, tool=run.tool, arguments=run.arguments,
                        idempotency_key=c.execution_id, attempt_id=attempt_id),
                    ToolCallResult, retry_policy=ONCE,
                    steering=self._step_in_flight(c, self._plan_state().current_step),
                    heartbeat_timeout=heartbeat(STEP_HEARTBEAT, self._input.timing),
                    start_to_close_timeout=timedelta(seconds=step.timeout_s), contract=c)
            except ActivityError as err:
                if windowed and call_outcome(err, attempt_id) == "not_sent":
                    first_unsent = first_unsent or workflow.now()
                    if await self._wait_to_resend(first_unsent, attempt):
                        continue  # it never left: again after a while, same key
                    return CommandResult(exit_code=-1, stderr=not_sent_message(
                        failure_text(err), attempt))
                return CommandResult(exit_code=-1, stderr=f"outcome unknown: {err.cause}")
            return CommandResult(exit_code=1 if r.is_error else 0, stdout=r.text,
                                 stderr=r.error_message or "")

    async def _window(self, i: int, step: PlanStep, c: ExecutionContract
                      ) -> tuple[CommandResult | None, str | None]:
        """An in-window step: the one arbiter between the window's exit, its loss and
        a person's decision is this workflow — whichever it sees first wins, once."""
        self._record([WindowLaunched(step=i, command=str(step.run))])
        inp = CommandInput(session_id=self._s.session_id, execution_id=c.execution_id,
                           command=str(step.run), purpose="window", step=i,
                           timeout_s=step.timeout_s, pass_env=self._pass_env())
        self._flush()
        run = workflow.start_activity(
            "run_command", inp, result_type=CommandResult, retry_policy=ONCE,
            start_to_close_timeout=timedelta(seconds=step.timeout_s + 60),
            heartbeat_timeout=heartbeat(STEP_HEARTBEAT, self._input.timing))
        self._s.pending = PendingRequest(
            request_id=c.execution_id, kind="window", execution_id=None,
            prompt=f"step {i} runs in a window; approve or skip to decide it now",
            options=["approve", "skip"], created_at=workflow.now(),
            **decisions.request_terms(self._s.config, decisions.asked_step(i, str(step.run))))
        try:
            await self._wait(lambda: run.done() or self._reply is not None)
        except asyncio.CancelledError:
            run.cancel()  # the session was cancelled: its window goes with it
            self._book.transition(c, Trigger.CANCEL, Actor.USER, workflow.now(),
                                  error_message=cancelled_in_flight(c))
            raise
        # An accepted reply is always applied (invariant 6): if the window ended in
        # the same instant, the person's decision still wins and the exit is moot.
        if self._reply is not None:
            reply, self._reply = self._reply, None
            who = (decisions.decider(reply.principal, self._s.config) or TEMPORAL_ACCESS).ref()
            by, digest = decisions.name_of(who), self._s.pending.digest
            decided = {"principal": who.model_dump(mode="json"),
                       **({"digest": digest} if digest else {})}
            self._book.accept_reply({"choice": reply.choice}, by, workflow.now(),
                                    principal=who, attribution=decided)
            run.cancel()
            with contextlib.suppress(ActivityError):  # its cancellation is expected
                await run
            self._record(person_command(self._plan_state(), reply.choice, None, by))
            trig = Trigger.SUCCEED if reply.choice == "approve" else Trigger.REJECT
            self._book.transition(c, trig, Actor.USER, workflow.now(), decided=decided)
            return None, None
        self._s.pending = None  # the window ended first: nothing left to decide
        try:
            out = run.result()
        except ActivityError as err:
            return None, f"the window's heartbeat was lost ({err.cause or err})"
        if out.killed_by_signal is not None:
            return out, f"the process was killed by signal {out.killed_by_signal}"
        return out, None

    # -- waiting_user: the person's commands --------------------------------------

    def _ask_step(self, at: PlanState, reason: str, c: ExecutionContract | None,
                  prompt: str, output: str | None = None) -> None:
        steps = self._s.config.plan.steps
        step = steps[min(at.current_step, len(steps) - 1)]
        run = step.run.model_dump(mode="json") if isinstance(step.run, ToolRun) else step.run
        self._ask(PendingRequest(
            **decisions.request_terms(self._s.config, decisions.asked_step(at.current_step,
                                                                           run)),
            output=output,
            request_id=c.execution_id if c else f"{self._s.session_id}.step{at.current_step}"
            f"-{len(self._s.plan_events)}", kind="step",
            execution_id=c.execution_id if c else None, prompt=f"{reason}: {prompt}",
            options=list(STEP_CHOICES), created_at=workflow.now()))

    def _accept_step(self, pending: PendingRequest, answer: dict[str, Any], by: str,
                     decided: dict[str, Any] | None = None) -> None:
        """After the reply is recorded: the person's command becomes plan events."""
        choice = answer.get("choice")
        now = workflow.now()
        if choice == "stop":  # the auto-decision of a 'reject' policy: fail closed
            self._record([TaskStopped(reason="canceled", step=self._plan_state().current_step,
                                      feedback="no decision in time")])
        else:
            self._record(person_command(self._plan_state(), choice, answer.get("values"), by))
        if pending.execution_id is not None:
            c = self._s.contract(pending.execution_id)
            self._book.transition(c, Trigger.RESUME, Actor.USER, now, decided=decided)
            trig = {"approve": Trigger.SUCCEED, "skip": Trigger.REJECT}.get(choice, Trigger.FAIL)
            self._book.transition(c, trig, Actor.USER, now, decided=decided,
                                  error_message=None if trig == Trigger.SUCCEED
                                  else f"{choice} by {by}")
        if choice == "stop":
            self._close(E.RUN_FAILED, "no decision in time: the plan stopped", Actor.TIMER)
