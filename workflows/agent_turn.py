"""The agent driver of SessionWorkflow: one turn of LLM calls, tool calls and
requests to the person. A mixin: the workflow class wires it in.

Decisions come from ``workflows.agent`` (pure); this code runs the activities
and records the outcomes through the session book.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import workflows.agent as agent  # `from workflows import agent` is not passed through
    import workflows.decisions as decisions
    import workflows.retry_window as retry_window
    from workflows.activity_calls import (
        AT_MOST_ONCE,
        LIST_TOOLS_HEARTBEAT,
        LLM_HEARTBEAT,
        ONE_ATTEMPT,
        TOOL_HEARTBEAT,
        TOOL_TIMEOUT,
        call_outcome,
        failure_text,
        heartbeat,
        not_sent,
        provider_failure,
        retry_freely,
        unreached,
    )
    from workflows.config import EcsRequest, ToolCallRequest
    from workflows.contract import (
        ActionType,
        Actor,
        ExecutionContract,
        Trigger,
        summarize_action,
    )
    from workflows.io import (
        ChatMessage,
        ListToolsInput,
        LLMCallInput,
        LLMCallResult,
        ToolCallInput,
        ToolCallResult,
        ToolCatalog,
    )
    from workflows.lineage import RAN_IN_PARENT
    from workflows.messages import Behaviour, SessionInput
    from workflows.operators import waiting_details
    from workflows.outcome import (
        CONFIRMED_DONE,
        CONFIRMED_NOT_DONE,
        MAX_UNSENT_ATTEMPTS,
        NOT_SENT,
        OUTCOME_OPTIONS,
        OUTCOME_UNKNOWN,
        RETRIED,
        attempt_id_for,
        not_sent_message,
        outcome_answer,
        outcome_question,
        outcome_request_id,
        unknown_message,
    )
    from workflows.provider_wait import (
        ProviderFailure,
        ProviderWaits,
        decide_provider_retry,
        waiting_text,
    )
    from workflows.safety import SafetyClass, at_most_once
    from workflows.session_state import PendingRequest, QueuedAction
    from workflows.statechart import SessionEvent, SessionStatus
    from workflows.steering import (
        INTERRUPTED,
        InFlight,
        Interrupted,
        cancelled_message,
        cut_text_message,
        dropped_tool_text,
        interrupted_entry,
    )

E, S = SessionEvent, SessionStatus

class AgentTurn:
    """Mixin for SessionWorkflow; relies on its ``_s``, ``_book``, ``_fire``,
    ``_close``, ``_ask``, ``_activity``, ``_sleep`` and ``_new_execution_id``."""

    _s: Any
    _input: SessionInput
    _book: Any
    _interrupt: Any
    _waited_for: InFlight | None
    _cut_calls: tuple[int, int] | None  # (LLM call index, cuts at it) of the last cut

    async def _run_agent(self) -> None:
        if not await self._ensure_catalog():
            return
        try:
            while self._s.status == S.RUNNING:
                try:
                    if await self._turn_step():
                        return
                except Interrupted as ended:
                    self._end_interrupted_turn(ended.cut)
        finally:
            # the turn left RUNNING (it asks the person, or ended): an interrupt not
            # taken yet is a plain message now (it is in the inbox)
            self._interrupt, self._waited_for = None, None

    async def _turn_step(self) -> bool:
        """One LLM answer and its actions; True once the turn is over."""
        self._check_interrupt()
        if await self._drain_actions():
            return True
        answer = await self._think()
        if answer is None:
            return True
        if self._judge_mistakes(answer.tool_calls):
            return True
        self._s.queued_actions = [QueuedAction(tool_call=c) for c in answer.tool_calls]
        if answer.ecs_request is not None:
            self._s.queued_actions.append(QueuedAction(ecs_request=answer.ecs_request))
        if self._s.queued_actions:
            return False
        if answer.end or self._s.config.mode == "auto":
            self._fire(E.RUN_SUCCEEDED, {"text": answer.text or ""})
            return True
        self._ask(PendingRequest(
            request_id=f"message-{self._s.llm_calls}", kind="message",
            prompt=answer.text or "", created_at=workflow.now(),
        ))
        return True

    # -- steering (issue 27: workflows.steering) ---------------------------------------

    def _check_interrupt(self) -> None:
        """A cut point between two steps of the turn: an interrupt asked for ends it."""
        if self._interrupt is not None:
            raise Interrupted(None)

    def _end_interrupted_turn(self, cut: InFlight | None) -> None:
        """The old turn ends: its approved calls that have not run are cancelled and its
        queued actions dropped (the model is told of each), the log says what was cut,
        why and by whom (``turn.interrupted``); the next LLM call starts the new turn
        with the message (it is in the inbox)."""
        s, now = self._s, workflow.now()
        who = self._interrupter()
        by = decisions.name_of(who)
        waited = self._waited_for
        self._interrupt, self._waited_for = None, None
        if cut is not None and cut.kind == "llm_call":
            self._cut_calls = (s.llm_calls, self._cut_calls[1] + 1 if self._cut_calls
                               and self._cut_calls[0] == s.llm_calls else 1)
            if cut.partial_text:  # the model sees what it had written, marked as cut
                self._book.say(ChatMessage(role="assistant",
                                           content=cut_text_message(cut.partial_text, by)))
        elif cut is not None:  # the read-only or reversible call cut (CANCELLED)
            c = s.contract(cut.id)
            self._book.say(agent.consequence_message(c, c.action_detail.get("tool_call_id")))
        cancelled = []
        for c in [c for c in s.contracts if c.status.value == "running"
                  and c.action_type is ActionType.TOOL_CALL]:
            self._book.transition(c, Trigger.CANCEL, Actor.USER, now,
                                  error_message=cancelled_message(by),
                                  reason_code=INTERRUPTED)
            self._book.say(agent.consequence_message(c, c.action_detail.get("tool_call_id")))
            cancelled.append(c.execution_id)
        dropped: list[dict[str, Any]] = []
        for action in s.queued_actions:
            if action.tool_call is not None:
                self._book.say(ChatMessage(role="tool", content=dropped_tool_text(by),
                                           tool_call_id=action.tool_call.id))
                dropped.append({"tool_call_id": action.tool_call.id,
                                "tool": action.tool_call.tool})
            elif action.ecs_request is not None:
                dropped.append({"ecs_request": action.ecs_request.kind})
        s.queued_actions = []
        s.turns += 1
        s.turn_llm_calls = 0
        self._book.journal("turn.interrupted", now, interrupted_entry(
            by=by, principal=who.model_dump(mode="json"), cut=cut, waited_for=waited,
            cancelled=cancelled, dropped=dropped, turn=s.turns))

    def _loop_v2(self) -> bool:
        """Sessions started before the agent loop learned provider waits, model
        mistakes and unknown tools as mistakes keep the behaviour they had."""
        return self._input.does(Behaviour.AGENT_LOOP_V2)

    def _judge_mistakes(self, calls: list[ToolCallRequest]) -> bool:
        """Count the answer's mistakes; past the bound, record them and fail (True)."""
        s, v2 = self._s, self._loop_v2()
        problems = [(c, p) for c in calls if (p := agent.call_mistake(
            s.config, c, s.tool_catalog or [], unknown_tools=v2)) is not None]
        verdict = agent.judge_mistakes(s.consecutive_mistakes, [p for _, p in problems],
                                       s.config.agent.max_consecutive_mistakes)  # type: ignore[union-attr]
        s.consecutive_mistakes = verdict.consecutive
        if verdict.fail_reason is None:
            return False
        for call, _ in problems:
            self._start_tool_call(call)  # each one a failed contract, as the model is told
        self._close(E.RUN_FAILED, verdict.fail_reason, Actor.REASONING)
        return True

    async def _ensure_catalog(self) -> bool:
        servers = self._s.config.agent.tools if self._s.config.agent else []
        if self._s.tool_catalog is not None or not servers:
            self._s.tool_catalog = self._s.tool_catalog or []
            return True
        try:
            catalog = await self._activity(
                "list_tools", ListToolsInput(servers=servers), result_type=ToolCatalog,
                start_to_close_timeout=timedelta(minutes=2),
                retry_policy=retry_freely(self._input.timing),
                heartbeat_timeout=heartbeat(LIST_TOOLS_HEARTBEAT, self._input.timing),
            )
        except ActivityError as err:
            self._close(E.RUN_FAILED, f"could not list the MCP tools: {failure_text(err)}",
                        Actor.SYSTEM)
            return False
        self._s.tool_catalog = catalog.tools
        return True

    async def _think(self) -> LLMCallResult | None:
        """The reasoning step: an LLM call that sees consequence views, never contracts."""
        s = self._s
        llm = s.config.agent.llm  # type: ignore[union-attr]
        if s.turn_llm_calls >= s.config.agent.max_turns:  # type: ignore[union-attr]
            self._close(E.RUN_FAILED, f"max_turns reached: {s.turn_llm_calls} LLM calls "
                        "in this turn without a final answer", Actor.SYSTEM)
            return None
        for text, who in self._book.take_inbox():
            self._book.say(ChatMessage(role="user", content=text))
            self._book.journal("message.accepted", workflow.now(), {"text": text, **(
                {"by": decisions.name_of(who), "principal": who.model_dump(mode="json")}
                if who is not None else {})})
        v2, waits, attempt = self._loop_v2(), ProviderWaits(), 0
        while True:
            call_id = f"{s.session_id}-llm-{s.llm_calls}" + (f"-retry{attempt}" if attempt else "")
            if self._cut_calls and self._cut_calls[0] == s.llm_calls:  # after a cut call
                call_id += f"-after-cut{self._cut_calls[1]}"
            try:
                answer = await self._activity(
                    "llm_call",
                    LLMCallInput(
                        session_id=s.session_id, call_id=call_id,
                        call_index=s.llm_calls, llm=llm.script_from(s.llm_calls, 1),
                        messages=agent.build_messages(s),
                        tools=s.tool_catalog or [], outcomes=agent.script_outcomes(s),
                    ),
                    result_type=LLMCallResult,
                    start_to_close_timeout=timedelta(seconds=llm.timeout_s + 30),
                    heartbeat_timeout=heartbeat(LLM_HEARTBEAT, self._input.timing),
                    retry_policy=ONE_ATTEMPT if v2 else retry_freely(self._input.timing),
                    steering=InFlight(kind="llm_call", id=call_id),
                )
                break
            except ActivityError as err:
                if not v2:
                    self._close(E.RUN_FAILED, f"LLM call failed: {failure_text(err)}",
                                Actor.REASONING)
                    return None
                failure = provider_failure(err)
                retry = decide_provider_retry(failure, waits, llm)
                if retry.fail_reason is not None:
                    self._close(E.RUN_FAILED, retry.fail_reason, Actor.REASONING)
                    return None
                await self._wait_for_provider(call_id, failure, retry)
                self._check_interrupt()  # asked for during the wait: no retry
                waits, attempt = retry.waits, attempt + 1
        if attempt:
            workflow.set_current_details(waiting_details(s))
        s.llm_calls += 1
        s.turn_llm_calls += 1
        calls = [
            c if c.id else c.model_copy(update={"id": f"call-{s.llm_calls}-{i}"})
            for i, c in enumerate(answer.tool_calls)
        ]
        answer = answer.model_copy(update={"tool_calls": calls})
        self._book.say(
            ChatMessage(role="assistant", content=answer.text or "", tool_calls=calls)
        )
        self._book.journal("assistant.text", workflow.now(), {
            "call_id": answer.started.call_id, "text": answer.text or "",
            "tool_calls": len(calls), "ecs_request": answer.ecs_request is not None,
            "end": answer.end})
        return answer

    async def _wait_for_provider(self, call_id: str, failure: ProviderFailure,
                                 retry: Any) -> None:
        """Say what the session waits for (current details, the log, SSE), then wait."""
        now = workflow.now()
        retry_at = now + timedelta(seconds=retry.delay_s)
        text = waiting_text(retry, retry_at, failure)
        workflow.logger.warning("session %s: %s", self._s.session_id, text)
        self._book.journal("llm.waiting", now, {
            "call_id": call_id, "reason": retry.reason, "http_status": failure.http_status,
            "error_summary": failure.summary, "delay_s": retry.delay_s,
            "retry_after_s": failure.retry_after_s,
            "retry_at": retry_at.isoformat().replace("+00:00", "Z"),
            "rate_limited_s": retry.waits.rate_limited_s, "errors": retry.waits.errors,
            "message": text})
        workflow.set_current_details(text)
        await self._sleep(timedelta(seconds=retry.delay_s))

    async def _drain_actions(self) -> bool:
        """Run approved and queued actions in order; True once the session stopped."""
        s = self._s
        for c in [c for c in s.contracts if c.status.value == "running"
                  and c.action_type is ActionType.TOOL_CALL]:
            if s.status != S.RUNNING:  # it asked the person what became of a call
                break
            self._check_interrupt()
            await self._execute(c)
        while s.queued_actions and s.status == S.RUNNING:
            self._check_interrupt()
            action = s.queued_actions.pop(0)
            if action.ecs_request is not None:
                self._ask_person(action.ecs_request)
                return True
            assert action.tool_call is not None
            c = self._start_tool_call(action.tool_call)
            if c is None:
                continue
            if c.status.value == "waiting":
                return True
            await self._execute(c)
        return s.status != S.RUNNING

    def _start_tool_call(self, call: ToolCallRequest) -> ExecutionContract | None:
        """Create the contract for a tool call: RUNNING to execute now, WAITING for
        approval, or None when it ends here (already done, no such server)."""
        s, now = self._s, workflow.now()
        d = agent.decide_tool_call(s, call, s.tool_catalog or [], unknown_tools=self._loop_v2())
        if d.kind == "already_done":
            self._book.say(ChatMessage(role="tool", content=d.message,
                                              tool_call_id=call.id))
            return None
        c = self._book.new_contract(
            self._new_execution_id(), ActionType.TOOL_CALL,
            {**d.detail, "safety": d.safety.value, "tool_call_id": call.id}, now,
            irreversible=d.kind == "approve_first", idempotency_key=d.idempotency_key,
        )
        self._book.transition(c, Trigger.START, Actor.REASONING, now)
        if d.kind in ("unknown_server", "mistake"):
            self._book.transition(c, Trigger.FAIL, Actor.TOOL_NODE, now,
                                  error_message=d.message)
            self._book.say(agent.consequence_message(c, call.id))
            return None
        asked = decisions.asked_tool_call(d.detail["server"], call.tool, call.arguments)
        # a fork's call that its parent already sent after the fork point (issue 27)
        repeat = decisions.repeat_of(self._input.parent_actions, asked) \
            if self._input.parent_actions else None
        verdict = decisions.tool_verdict(s.config.rules, s.standing_decisions,
                                         d.detail["server"], call.tool, call.arguments,
                                         safety_asks=d.kind == "approve_first",
                                         safety=d.safety.value, repeat=repeat is not None)
        if verdict.kind in ("allow", "deny", "standing"):
            return self._decided_without_asking(c, asked, verdict)
        if d.kind == "approve_first" or verdict.kind == "ask":
            self._book.transition(c, Trigger.SUSPEND, Actor.TOOL_NODE, now)
            what = "irreversible action" if d.kind == "approve_first" else "action"
            prompt = f"Approve {what}: " + summarize_action(c.action_type, c.action_detail)
            repeated: dict[str, Any] = {}
            if repeat is not None:
                parent = self._input.forked_from.session_id \
                    if self._input.forked_from else "the parent"
                prompt = decisions.repeat_note(repeat, parent) + " " + prompt
                repeated = {"reason_code": RAN_IN_PARENT}
            self._ask(PendingRequest(
                request_id=c.execution_id, kind="approval", execution_id=c.execution_id,
                prompt=prompt, created_at=now,
                **decisions.request_terms(s.config, asked, s.tool_catalog, d.safety.value),
                **repeated,
            ))
        return c

    def _decided_without_asking(self, c: ExecutionContract, asked: dict[str, Any],
                                verdict: decisions.ToolVerdict) -> ExecutionContract | None:
        """A rule (``allow``, ``deny``) or a standing decision decided the call: the log
        says so and by what (one ``request.decided`` entry); ``deny`` refuses it and the
        model is told; otherwise it runs now (RUNNING)."""
        now, sd = workflow.now(), verdict.standing
        detail: dict[str, Any] = {
            "request_id": c.execution_id, "kind": "approval", "execution_id": c.execution_id,
            "prompt": summarize_action(c.action_type, c.action_detail),
            "asked": asked, "digest": decisions.digest_of(asked),
            "decision": "deny" if verdict.kind == "deny" else "allow",
            "created_at": now.isoformat().replace("+00:00", "Z")}
        if verdict.rule is not None:
            detail["rule"] = verdict.rule
        if sd is not None:
            detail.update(standing_id=sd.standing_id,
                          standing_set_by=sd.set_by.model_dump(mode="json"))
        self._book.decided_without_asking(detail, now)
        if verdict.kind != "deny":
            return c
        self._book.transition(c, Trigger.REJECT, Actor.TOOL_NODE, now,
                              error_message=f"denied by rule {verdict.rule}: the session's "
                              "rules do not allow this call")
        self._book.say(agent.consequence_message(c, c.action_detail.get("tool_call_id")))
        return None

    async def _execute(self, c: ExecutionContract) -> None:
        """The tool node: call the MCP tool once (or retried, if it is safe to).

        A once-only call that provably never left is tried again under the same
        idempotency key; one that may have run is, when the person approved it,
        handed to the person ("did it happen?"), else it fails as outcome unknown.
        """
        s, d = self._s, c.action_detail
        server = next(t for t in s.config.agent.tools if t.name == d["server"])  # type: ignore[union-attr]
        once = at_most_once(SafetyClass(d["safety"]))
        marks = once and self._input.does(Behaviour.SENT_MARKS)
        windowed = self._input.does(Behaviour.SEND_WINDOW)  # (then once-only has marks)
        attempt, first_unsent = 0, None
        while True:
            attempt += 1
            attempt_id = attempt_id_for(c.execution_id, len(c.transitions), attempt) \
                if marks else None
            output: ToolCallResult | None = None
            try:
                output = await self._activity(
                    "call_tool",
                    ToolCallInput(
                        session_id=s.session_id, execution_id=c.execution_id, server=server,
                        tool=d["tool"], arguments=d["arguments"],
                        idempotency_key=c.idempotency_key, attempt_id=attempt_id,
                    ),
                    result_type=ToolCallResult,
                    start_to_close_timeout=TOOL_TIMEOUT,
                    heartbeat_timeout=heartbeat(TOOL_HEARTBEAT, self._input.timing),
                    retry_policy=AT_MOST_ONCE if once else retry_freely(self._input.timing),
                    contract=c, steering=InFlight(kind="tool_call", id=c.execution_id,
                                                  tool=d["tool"], server=d["server"],
                                                  safety=d["safety"]),
                )
            except ActivityError as err:
                msg, code = failure_text(err), None
                if marks:
                    outcome = call_outcome(err, attempt_id)
                    if outcome == "not_sent" and windowed:
                        first_unsent = first_unsent or workflow.now()
                        if await self._wait_to_resend(first_unsent, attempt):
                            continue  # it never left: again after a while, same key
                        if c.irreversible:  # approved: the person says send again or drop
                            self._ask_unsent(c, msg, attempt)
                            return
                    elif outcome == "not_sent" and attempt < MAX_UNSENT_ATTEMPTS:
                        continue  # it never left: the same call again, same key
                    if outcome == "not_sent":
                        msg, code = not_sent_message(msg, attempt), NOT_SENT
                    elif c.irreversible:
                        self._ask_outcome(c, msg)
                        return
                    else:
                        msg, code = unknown_message(msg), OUTCOME_UNKNOWN
                elif once and not not_sent(err):
                    msg = unknown_message(msg)
                elif windowed and unreached(err):  # safe to retry: again after a while
                    first_unsent = first_unsent or workflow.now()
                    if await self._wait_to_resend(first_unsent, attempt):
                        continue
                self._book.transition(c, Trigger.FAIL, Actor.TOOL_NODE, workflow.now(),
                                      error_message=msg, reason_code=code)
            else:
                if output.is_error:
                    self._book.transition(c, Trigger.FAIL, Actor.TOOL_NODE, workflow.now(),
                                          error_message=output.error_message or output.text)
                else:
                    self._book.transition(
                        c, Trigger.SUCCEED, Actor.TOOL_NODE, workflow.now(),
                        result=output.structured if output.structured is not None
                        else output.text,
                    )
            break
        said = agent.consequence_message(
            c, d.get("tool_call_id"), output,
            max_chars=s.config.agent.context.max_tool_result_chars)  # type: ignore[union-attr]
        if d.get("edited_by"):  # the model learns the person changed its call
            said = said.model_copy(update={
                "content": decisions.edited_note(d["arguments"]) + "\n\n" + said.content})
        self._book.say(said)

    def _ask_outcome(self, c: ExecutionContract, cause: str) -> None:
        """An approved call that may have run: the person says whether it happened
        (an ECS ``choose`` request); the contract waits with ``outcome_unknown``."""
        now = workflow.now()
        asked = sum(1 for t in c.transitions if t.to_status.value == "waiting")
        self._book.transition(c, Trigger.SUSPEND, Actor.TOOL_NODE, now,
                              reason_code=OUTCOME_UNKNOWN)
        self._ask(PendingRequest(
            request_id=outcome_request_id(c.execution_id, asked), kind="choose",
            execution_id=c.execution_id, options=list(OUTCOME_OPTIONS), created_at=now,
            prompt=outcome_question(summarize_action(c.action_type, c.action_detail), cause),
            reason_code=OUTCOME_UNKNOWN, **self._question_terms(
                "choose", outcome_question(summarize_action(c.action_type, c.action_detail),
                                           cause), list(OUTCOME_OPTIONS), []),
        ))

    async def _wait_to_resend(self, first_failed_at: Any, attempt: int) -> bool:
        """Wait (a durable timer) before trying a call that did not reach its tool
        again; False when the session's send window is over."""
        delay = retry_window.next_try(
            first_failed_at=first_failed_at, now=workflow.now(), attempt=attempt,
            window=retry_window.window_s(self._s.config))
        if delay is None:
            return False
        await self._sleep(delay)
        return True

    def _ask_unsent(self, c: ExecutionContract, cause: str, attempts: int) -> None:
        """An approved call that could not be sent within its window: the person says
        whether to send it again or drop it (an ECS ``choose`` request); the contract
        waits with ``not_sent``."""
        now = workflow.now()
        asked = sum(1 for t in c.transitions if t.to_status.value == "waiting")
        self._book.transition(c, Trigger.SUSPEND, Actor.TOOL_NODE, now, reason_code=NOT_SENT)
        prompt = retry_window.unsent_question(
            summarize_action(c.action_type, c.action_detail), cause, attempts,
            retry_window.window_s(self._s.config))
        options = list(retry_window.UNSENT_OPTIONS)
        self._ask(PendingRequest(
            request_id=retry_window.unsent_request_id(c.execution_id, asked), kind="choose",
            execution_id=c.execution_id, options=options, created_at=now, prompt=prompt,
            reason_code=NOT_SENT, **self._question_terms("choose", prompt, options, []),
        ))

    def _settle_unsent(self, c: ExecutionContract, answer: dict[str, Any], by: str,
                       actor: Actor, decided: dict[str, Any] | None = None) -> None:
        """The person's answer on an approved call that could not be sent."""
        now = workflow.now()
        said = retry_window.unsent_answer(answer)
        if said == "send_again":  # RUNNING again: the tool node runs it at the turn start
            self._book.transition(c, Trigger.RESUME, actor, now, reason_code=RETRIED,
                                  decided=decided)
            return
        self._book.transition(c, Trigger.RESUME, actor, now, decided=decided)
        if said == "drop":
            self._book.transition(c, Trigger.FAIL, actor, now, reason_code=retry_window.DROPPED,
                                  error_message=f"dropped: {by} gave it up; it was never sent",
                                  decided=decided)
        else:
            self._book.transition(
                c, Trigger.FAIL, actor, now, reason_code=NOT_SENT, decided=decided,
                error_message=f"not sent: the tool server was never reached and nobody "
                f"said to send it again ({answer}); it did not run")
        self._book.say(agent.consequence_message(c, c.action_detail.get("tool_call_id")))

    def _question_terms(self, kind: str, prompt: str, options: list[str],
                        fields: list[dict[str, Any]]) -> dict[str, Any]:
        return decisions.request_terms(
            self._s.config, decisions.asked_question(kind, prompt, options, fields))

    def _settle_outcome(self, c: ExecutionContract, answer: dict[str, Any], by: str,
                        actor: Actor, decided: dict[str, Any] | None = None) -> None:
        """The person's answer on a call that may have run (the contract waits)."""
        now = workflow.now()
        said = outcome_answer(answer)
        if said == "try_again":  # RUNNING again: the tool node runs it at the turn start
            self._book.transition(c, Trigger.RESUME, actor, now, reason_code=RETRIED,
                                  decided=decided)
            return
        self._book.transition(c, Trigger.RESUME, actor, now, decided=decided)
        if said == "done":
            self._book.transition(
                c, Trigger.SUCCEED, actor, now, reason_code=CONFIRMED_DONE, decided=decided,
                result=f"done: {by} says it happened (the tool's own answer never came back)")
        elif said == "not_done":
            self._book.transition(c, Trigger.FAIL, actor, now, reason_code=CONFIRMED_NOT_DONE,
                                  error_message=f"not done: {by} says it did not happen",
                                  decided=decided)
        else:
            self._book.transition(
                c, Trigger.FAIL, actor, now, reason_code=OUTCOME_UNKNOWN, decided=decided,
                error_message=f"outcome unknown: the call did not report back and nobody "
                f"said whether it happened ({answer}); not retried")
        self._book.say(agent.consequence_message(c, c.action_detail.get("tool_call_id")))

    def _ask_person(self, req: EcsRequest) -> None:
        now = workflow.now()
        c = self._book.new_contract(self._new_execution_id(), ActionType.ECS_REQUEST,
                                    req.model_dump(mode="json"), now)
        self._book.transition(c, Trigger.START, Actor.ECS_NODE, now)
        self._book.transition(c, Trigger.SUSPEND, Actor.ECS_NODE, now)
        self._ask(PendingRequest(
            request_id=c.execution_id, kind=req.kind, execution_id=c.execution_id,
            prompt=req.prompt, options=req.options, fields=req.fields, created_at=now,
            **self._question_terms(req.kind, req.prompt, req.options,
                                   [f.model_dump(mode="json") for f in req.fields]),
        ))
