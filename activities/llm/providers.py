"""The two providers of an LLM call; each returns the answer, the token usage, the
finish reason and the cost.

- ``scripted``: plays ``llm.responses[call_index]``; no network, deterministic.
- ``openai``: any OpenAI-compatible chat-completions endpoint through the ``openai``
  SDK (``max_retries=0``), streamed (``stream=True``, usage asked for with
  ``stream_options.include_usage``). The key is read from the environment variable
  *named* by ``api_key_env`` at call time; it is never logged, returned or put in
  an error.

Both stream their text, as it comes, to the call's :class:`StreamWriter` (the
scripted provider in a few pieces).
"""

from __future__ import annotations

import os

import openai

from activities.command_env import remember_secret
from activities.deltas import split_text
from activities.llm.answer import Answer, answer_from_function_calls, check_arguments
from activities.llm.failures import (
    LLMConfigError,
    LLMResponseError,
    ScriptedProviderError,
    retryable_status,
)
from activities.llm.payloads import api_cost_usd
from activities.llm.streaming import StreamedCompletion, StreamWriter
from activities.llm.wire import ToolNames, openai_messages, openai_tools
from workflows.config import LLMConfig
from workflows.io import LLMCallInput, TokenUsage

#: What a provider returns: the answer, token usage, finish reason and cost in USD.
Provided = tuple[Answer, TokenUsage, str, float | None]


#: Prefixes of the worker's variables a config may not have sent as an LLM key.
OWN_VARIABLES = ("HITLFLOW_", "TEMPORAL_")


def read_api_key(llm: LLMConfig) -> str:
    if not llm.api_key_env:
        raise LLMConfigError(
            "the openai provider needs api_key_env: the name of the environment variable "
            "that holds the API key"
        )
    if llm.api_key_env.upper().startswith(OWN_VARIABLES):
        # A config could name any variable of the worker and send its value to a
        # base_url of its choosing: never hitlflow's own (the API token, the read
        # model's URL) nor Temporal's (an API key that opens Temporal itself).
        raise LLMConfigError(
            f"api_key_env may not name {llm.api_key_env}: variables starting with "
            f"{' or '.join(OWN_VARIABLES)} are hitlflow's and Temporal's own, never an "
            "LLM key")
    key = os.environ.get(llm.api_key_env)
    if not key:
        raise LLMConfigError(
            f"environment variable {llm.api_key_env} is not set or empty; "
            f"it should hold the API key for {llm.base_url}"
        )
    remember_secret(key)  # redacted from commands' output, whatever its variable's name
    return key


def scripted(input: LLMCallInput, writer: StreamWriter) -> Provided:
    responses, offset = input.llm.responses, input.llm.responses_offset
    if not 0 <= input.call_index - offset < len(responses):
        raise LLMConfigError(
            f"scripted provider has no response #{input.call_index} "
            f"(the script has {offset + len(responses)})"
        )
    r = responses[input.call_index - offset].played(input.outcomes)
    if r.error is not None:
        raise ScriptedProviderError(
            r.error, http_status=r.http_status, retryable=retryable_status(r.http_status),
            retry_after_s=r.retry_after_s,
        )
    # Scripted calls get stable ids where the script left them out.
    tool_calls = [
        c if c.id else c.model_copy(update={"id": f"{input.call_id}-{i}"})
        for i, c in enumerate(r.tool_calls)
    ]
    tool_calls = check_arguments(tool_calls, input.tools, ToolNames.build(input.tools))
    answer = Answer(text=r.text, tool_calls=tool_calls, ecs_request=r.ecs_request, end=r.end)
    for piece in split_text(r.text or ""):  # streamed, as a model would
        writer.text(piece)
    # A deterministic estimate: words in, words out.
    words_in = sum(len(m.content.split()) for m in input.messages)
    words_out = len((r.text or "").split())
    usage = TokenUsage(
        input_tokens=words_in, output_tokens=words_out, total_tokens=words_in + words_out
    )
    finish_reason = "tool_calls" if (tool_calls or r.ecs_request) else "stop"
    return answer, usage, finish_reason, 0.0


async def openai_compatible(input: LLMCallInput, api_key: str, writer: StreamWriter
                            ) -> Provided:
    llm = input.llm
    names = ToolNames.build(input.tools)
    got = StreamedCompletion()
    async with openai.AsyncOpenAI(
        api_key=api_key, base_url=llm.base_url, max_retries=0, timeout=llm.timeout_s
    ) as client:
        stream = await client.chat.completions.create(
            model=llm.model,
            messages=openai_messages(input.messages, names),  # type: ignore[arg-type]
            tools=openai_tools(input.tools, names),  # type: ignore[arg-type]
            temperature=llm.temperature,
            max_tokens=llm.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        async with stream:
            async for chunk in stream:
                writer.text(got.add(chunk))
    if not got.choices:
        raise LLMResponseError("the model returned no choices")
    calls: list[tuple[str, str, str | None]] = []
    for index in sorted(got.calls):
        call_id, kind, name, arguments = got.calls[index]
        if (kind or "function") != "function":
            raise LLMResponseError(f"the model made a {kind!r} tool call; not supported")
        calls.append((call_id or f"{input.call_id}-{index}", name or "", arguments))
    text = got.text if got.text is not None else got.refusal
    answer = answer_from_function_calls(text, calls, names)
    answer.tool_calls = check_arguments(answer.tool_calls, input.tools, names)
    if got.usage is not None:
        usage = TokenUsage(
            input_tokens=got.usage.prompt_tokens,
            output_tokens=got.usage.completion_tokens,
            total_tokens=got.usage.total_tokens,
        )
        cost = api_cost_usd(got.model or llm.model, usage)
    else:
        usage, cost = TokenUsage(), None
    finish_reason = got.finish_reason or ("tool_calls" if calls else "stop")
    return answer, usage, finish_reason, cost
