"""The LLM activity: one model call, scripted or OpenAI-compatible, with seed 003 payloads.

``llm_call`` returns the model's answer in our terms (text, tool calls, a request
to the person, end of conversation) together with the binding LLM_CALL_STARTED and
LLM_CALL_FINISHED payloads; a failure is raised as ``failures.call_failed`` makes it.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from temporalio import activity

from activities.deltas import DeltaBus, NullDeltaBus
from activities.llm import providers
from activities.llm.failures import call_failed
from activities.llm.payloads import llm_call_started
from activities.llm.streaming import StreamWriter
from workflows.io import LLMCallFinished, LLMCallInput, LLMCallResult
from workflows.steering import CutText, CutTextInput

#: Cut calls whose text a worker keeps for ``llm_cut_text`` once they ended.
KEEP_CUT_CALLS = 64


def _elapsed_ms(t0: float) -> int:
    return max(0, int((time.monotonic() - t0) * 1000))


class LlmActivities:
    """The LLM activity. Stateless: one instance serves every session of a worker;
    ``deltas`` is where the text goes while it is written (default: nowhere)."""

    def __init__(self, deltas: DeltaBus | None = None) -> None:
        self.deltas: DeltaBus = deltas or NullDeltaBus()
        # The calls being written now, and the text of the last calls that were cut
        # (cancelled): what ``llm_cut_text`` answers (issue 27).
        self._writing: dict[tuple[str, str], StreamWriter] = {}
        self._cut: OrderedDict[tuple[str, str], CutText] = OrderedDict()

    @activity.defn(name="llm_call")
    async def llm_call(self, input: LLMCallInput) -> LLMCallResult:
        writer = StreamWriter(self.deltas, input)
        key = (input.session_id, input.call_id)
        self._writing[key] = writer
        ticker = asyncio.create_task(writer.tick())
        try:
            return await self._call(input, writer)
        except asyncio.CancelledError:
            self._cut[key] = CutText(text=writer.so_far(), chars=writer.chars)
            while len(self._cut) > KEEP_CUT_CALLS:
                self._cut.popitem(last=False)
            raise
        finally:
            ticker.cancel()
            if self._writing.get(key) is writer:
                del self._writing[key]
            self.deltas.finish(input.session_id, input.call_id)

    @activity.defn(name="llm_cut_text")
    async def llm_cut_text(self, input: CutTextInput) -> CutText:
        """What a call the session cut (an interrupt, issue 27) had streamed, as this
        worker knows it: the call still being written here, or one cut here lately.
        A local activity of the session's worker: a call another worker ran is not
        known (no text)."""
        key = (input.session_id, input.call_id)
        writer = self._writing.get(key)
        if writer is not None:
            return CutText(text=writer.so_far(), chars=writer.chars)
        return self._cut.pop(key, None) or CutText()

    async def _call(self, input: LLMCallInput, writer: StreamWriter) -> LLMCallResult:
        started = llm_call_started(input)
        log = activity.logger
        log.info(
            "LLM call %s: provider=%s model=%s base_url=%s prompt_hash=%s",
            input.call_id,
            input.llm.provider,
            started.model,
            started.provider_base_url,
            started.prompt_hash[:12],
        )
        t0 = time.monotonic()
        secret: str | None = None
        try:
            if input.llm.provider == "scripted":
                answer, usage, finish_reason, cost = providers.scripted(input, writer)
            else:
                secret = providers.read_api_key(input.llm)
                answer, usage, finish_reason, cost = await providers.openai_compatible(
                    input, secret, writer)
            output_hash = answer.output_hash()
        except Exception as exc:
            error = call_failed(exc, input.call_id, _elapsed_ms(t0), secret)
            log.warning("LLM call %s failed: %s", input.call_id, error.message)
            # ``from None``: the SDK exception (which may quote a server's reply) stays out
            # of the Temporal failure; its redacted traceback is in the details.
            raise error from None
        finished = LLMCallFinished(
            call_id=input.call_id,
            latency_ms=_elapsed_ms(t0),
            token_usage=usage,
            finish_reason=finish_reason,
            output_hash=output_hash,
            api_cost_usd=cost,
            tool_calls_count=len(answer.tool_calls),
        )
        log.info(
            "LLM call %s finished: finish_reason=%s tokens=%d latency_ms=%d",
            input.call_id,
            finish_reason,
            usage.total_tokens,
            finished.latency_ms,
        )
        return LLMCallResult(
            text=answer.text,
            tool_calls=answer.tool_calls,
            ecs_request=answer.ecs_request,
            end=answer.end,
            started=started,
            finished=finished,
        )
