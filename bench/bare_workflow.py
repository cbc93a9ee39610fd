"""Bare workflows for the benchmarks' baselines, in a module of their own so the
sandboxed runner can import them, as it imports ``SessionWorkflow``."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.io import LLMCallInput, LLMCallResult
    from workflows.messages import ReplyInput, SessionInput
    from workflows.session_state import PendingRequest


@workflow.defn(name="BareSession")
class BareSession:
    """A session's shape with no hitlflow logic (no statechart, journal, search
    attributes, contracts): the same ``llm_call`` activity, then wait for a ``reply``
    update, until the scripted responses are played."""

    def __init__(self) -> None:
        self.replies = 0
        self.waiting: int | None = None

    @workflow.run
    async def run(self, input: SessionInput) -> int:
        llm = input.config.agent.llm  # type: ignore[union-attr]
        for i in range(len(llm.responses)):
            await workflow.execute_activity(
                "llm_call", LLMCallInput(session_id=input.session_id, call_id=str(i),
                                         call_index=i, llm=llm, messages=[]),
                result_type=LLMCallResult, start_to_close_timeout=timedelta(seconds=60))
            if i < len(llm.responses) - 1:
                self.waiting = i
                await workflow.wait_condition(lambda i=i: self.replies > i)
                self.waiting = None
        return self.replies

    @workflow.update(name="reply")
    def reply(self, reply: ReplyInput) -> int:
        self.replies += 1
        return self.replies

    @workflow.query(name="pending_request")
    def pending_request(self) -> PendingRequest | None:
        """The same query as a session's, so both variants carry the same query load."""
        if self.waiting is None:
            return None
        return PendingRequest(request_id="bare", kind="confirm", prompt=f"step {self.waiting}?",
                              created_at=workflow.now())


@workflow.defn(name="UpdateLoop")
class UpdateLoop:
    """The bare Temporal update round trip: take ``n`` updates, answer each at once."""

    def __init__(self) -> None:
        self.count = 0

    @workflow.run
    async def run(self, n: int) -> int:
        await workflow.wait_condition(lambda: self.count >= n)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.count

    @workflow.update(name="reply")
    def reply(self, value: int) -> int:
        self.count += 1
        return self.count
