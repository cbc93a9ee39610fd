"""The LLM activity: one model call, scripted or OpenAI-compatible, with seed 003 payloads.

``llm_call`` returns the model's answer in our terms (text, tool calls, a request
to the person, end of conversation) together with the binding LLM_CALL_STARTED and
LLM_CALL_FINISHED payloads. A failure is raised as an ``ApplicationError`` whose
single detail is the LLM_CALL_FAILED payload (``LLMCallFailed``), whose
``non_retryable`` flag follows the one classification table below and whose
``next_retry_delay`` is the provider's own delay (``retry-after-ms`` /
``Retry-After``) when it gave one: the workflow, not the SDK, decides when to try
again (``workflows/provider_wait.py``).

A tool call whose arguments are not a JSON object or do not fit the tool's input
schema (an invalid ``ask_user`` too) is a model mistake, not a failure: it comes
back with ``arguments_error`` set, and the workflow tells the model.

Providers:

- ``scripted``: plays ``llm.responses[call_index]``; no network, deterministic.
- ``openai``: any OpenAI-compatible chat-completions endpoint through the ``openai``
  SDK (``max_retries=0``), streamed (``stream=True``, usage asked for with
  ``stream_options.include_usage``). The key is read from the environment variable
  *named* by ``api_key_env`` at call time; it is never logged, returned or put in
  an error.

Both stream their text, as it comes, to the worker's ``DeltaBus``
(``activities/deltas.py``; the scripted provider in a few pieces) and heartbeat
while they do (details: the call id and the characters received so far). The
deltas never reach the history: the result carries the whole text, as before.

The model sees our MCP tools as function tools named ``<server>__<tool>`` (made
safe for the function-name rules, see ``ToolNames``) plus two pseudo tools:
``ask_user`` (its call becomes ``ecs_request``) and ``end_conversation`` (its call
sets ``end``). That mapping, both ways, lives in this module only.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
import time
import traceback
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import jsonschema
import openai
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deltas import DeltaBus, NullDeltaBus, split_text
from workflows.canonical import canonical_json
from workflows.config import EcsRequest, FormField, LLMConfig, ToolCallRequest
from workflows.io import (
    ChatMessage,
    LLMCallFailed,
    LLMCallFinished,
    LLMCallInput,
    LLMCallResult,
    LLMCallStarted,
    TokenUsage,
    ToolSpec,
)

__all__ = [
    "ASK_USER",
    "END_CONVERSATION",
    "PRICES_USD_PER_MTOK",
    "SCRIPTED_BASE_URL",
    "LLMConfigError",
    "LLMError",
    "LLMResponseError",
    "LlmActivities",
    "ScriptedProviderError",
    "ToolNames",
    "api_cost_usd",
    "check_arguments",
    "classify_error",
    "llm_call_started",
    "openai_messages",
    "openai_tools",
    "retry_after_s",
    "retryable_status",
    "sha256_json",
]

SCRIPTED_BASE_URL = "scripted://"
ASK_USER = "ask_user"
END_CONVERSATION = "end_conversation"
ERROR_DETAILS_MAX_CHARS = 4000
ERROR_SUMMARY_MAX_CHARS = 500

# List prices in USD per million tokens: (input, output). A model not listed here
# (after stripping a date suffix such as ``-2024-08-06``) gets ``api_cost_usd=None``.
PRICES_USD_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4-turbo": (10.00, 30.00),
    "gpt-3.5-turbo": (0.50, 1.50),
}
_DATE_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def api_cost_usd(model: str, usage: TokenUsage) -> float | None:
    price = PRICES_USD_PER_MTOK.get(model) or PRICES_USD_PER_MTOK.get(_DATE_SUFFIX.sub("", model))
    if price is None:
        return None
    cost = (usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000
    return round(cost, 8)


# -- hashing --------------------------------------------------------------------------


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


# -- failures -------------------------------------------------------------------------


class LLMError(Exception):
    """A failure this module detects itself (not the SDK's)."""

    def __init__(self, message: str, *, http_status: int | None = None, retryable: bool = False,
                 retry_after_s: float | None = None):
        super().__init__(message)
        self.http_status = http_status
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class LLMConfigError(LLMError):
    """The call cannot be made as configured (e.g. the key's variable is not set)."""


class LLMResponseError(LLMError):
    """The model answered something we cannot use at all (no choice, a non-function
    tool call). Unusable tool-call arguments are not this: they are model mistakes,
    returned as calls with ``arguments_error`` set, which go back to the model."""


class ScriptedProviderError(LLMError):
    """A provider failure simulated by a scripted response with ``error`` set."""


_RETRYABLE_HTTP_STATUSES = frozenset({408, 409, 429})


def retryable_status(http_status: int | None) -> bool:
    """No status (network, timeout), 408/409/429 and 5xx: a retry may help; other 4xx not."""
    return http_status is None or http_status in _RETRYABLE_HTTP_STATUSES or http_status >= 500


def classify_error(exc: BaseException) -> tuple[int | None, bool]:
    """The one classification table: ``(http_status, retryable)`` for any failure."""
    if isinstance(exc, LLMError):
        return exc.http_status, exc.retryable
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code, retryable_status(exc.status_code)
    if isinstance(exc, openai.APIResponseValidationError):
        return exc.status_code, False
    if isinstance(exc, openai.APIConnectionError | TimeoutError | ConnectionError):
        return None, True  # includes openai.APITimeoutError
    return None, False


RETRY_AFTER_MAX_S = 7 * 24 * 3600  # a provider's delay is capped (a week is "give up")


def retry_after_s(headers: Any, now: float | None = None) -> float | None:
    """The provider's delay from a response's headers: ``retry-after-ms`` (OpenAI,
    Azure), else ``Retry-After`` in seconds or as an HTTP date; None without one
    (or with one that is not a delay: negative, not a number)."""
    seconds: float | None = None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None and float(ms) >= 0:
            seconds = float(ms) / 1000
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if seconds is None and value is not None:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            try:
                at = parsedate_to_datetime(value)
                seconds = max(0.0, at.timestamp() - (time.time() if now is None else now))
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
    if seconds is None or not seconds >= 0:  # also NaN
        return None
    return min(seconds, RETRY_AFTER_MAX_S)


def _retry_after(exc: BaseException) -> float | None:
    if isinstance(exc, LLMError):
        return exc.retry_after_s
    if isinstance(exc, openai.APIStatusError):
        return retry_after_s(exc.response.headers)
    return None


def _summary(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = exc.message
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and isinstance(inner.get("message"), str):
                message = inner["message"]
        text = f"HTTP {exc.status_code}: {message}"
    else:
        text = str(exc) or type(exc).__name__
    return text.strip()


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def _failure(
    exc: BaseException, call_id: str, latency_ms: int, secret: str | None
) -> ApplicationError:
    http_status, retryable = classify_error(exc)
    summary = _redact(_summary(exc), secret)[:ERROR_SUMMARY_MAX_CHARS]
    details = _redact("".join(traceback.format_exception(exc)), secret)
    if len(details) > ERROR_DETAILS_MAX_CHARS:
        details = "…(truncated)\n" + details[-ERROR_DETAILS_MAX_CHARS:]
    failed = LLMCallFailed(
        call_id=call_id,
        latency_ms=latency_ms,
        error_class=type(exc).__name__,
        error_summary=summary,
        retryable=retryable,
        error_details=details,
        http_status=http_status,
    )
    delay = _retry_after(exc) if retryable else None
    return ApplicationError(
        summary,
        failed.model_dump(mode="json"),
        type=failed.error_class,
        non_retryable=not retryable,
        # The provider's own delay (Retry-After): the workflow waits at least that long.
        next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
    )


# -- the mapping between our tools and the model's functions -----------------------------

_FUNCTION_NAME_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_FUNCTION_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def _function_names(server: str, tool: str) -> Iterator[str]:
    """The function names ``(server, tool)`` may have, best first (README: "What the
    model sees"): ``<server>__<tool>`` when the function-name rules allow it, then
    that name made safe (other characters as ``_``, cut to 55) with a digest of the
    original, then with digests of ``<server>__<tool>#2``, ``#3``, ... for a name
    another tool took already (server ``a__b`` with tool ``c`` and server ``a``
    with tool ``b__c`` are both ``a__b__c``)."""
    raw = f"{server}__{tool}"
    if _FUNCTION_NAME_OK.fullmatch(raw):
        yield raw
    safe = _FUNCTION_NAME_BAD_CHARS.sub("_", raw)[:55]
    for n in itertools.count(1):
        seed = raw if n == 1 else f"{raw}#{n}"
        yield f"{safe}_{hashlib.sha256(seed.encode('utf-8')).hexdigest()[:8]}"


def _function_name(server: str, tool: str) -> str:
    return next(_function_names(server, tool))


def _literal_values(model: type, field_name: str) -> list[str]:
    return list(typing.get_args(model.model_fields[field_name].annotation))  # type: ignore[attr-defined]


ASK_USER_FUNCTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": ASK_USER,
        "description": (
            "Ask the person and wait for the answer. kind=confirm: a yes/no question; "
            "kind=choose: pick one of `options` (at least two); kind=form: fill in `fields`. "
            "Use it before anything you cannot decide alone."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": _literal_values(EcsRequest, "kind")},
                "prompt": {"type": "string", "description": "The question, in plain words."},
                "options": {"type": "array", "items": {"type": "string"}},
                "fields": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "label": {"type": "string"},
                            "type": {"type": "string", "enum": _literal_values(FormField, "type")},
                            "required": {"type": "boolean"},
                        },
                        "required": ["name"],
                    },
                },
            },
            "required": ["kind", "prompt"],
        },
    },
}

END_CONVERSATION_FUNCTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": END_CONVERSATION,
        "description": "Call when the task is done and the conversation can end.",
        "parameters": {
            "type": "object",
            "properties": {
                "final_message": {"type": "string", "description": "Last words to the person."}
            },
        },
    },
}


@dataclass(frozen=True)
class ToolNames:
    """Function name <-> (server, tool), for the tools of one call.

    A ``(None, name)`` key is a tool without a server (the pseudo tools, or a
    call the model made to a function we did not offer): its function name is
    the tool name itself.
    """

    by_function: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    by_tool: dict[tuple[str | None, str], str] = field(default_factory=dict)

    @classmethod
    def build(cls, tools: list[ToolSpec]) -> ToolNames:
        names = cls()
        for reserved in (ASK_USER, END_CONVERSATION):
            names.by_function[reserved] = (None, reserved)
            names.by_tool[(None, reserved)] = reserved
        for spec in tools:
            key = (spec.server, spec.name)
            if key in names.by_tool:
                continue
            # The first name no earlier tool (nor a pseudo tool) has: never a clash.
            fname = next(f for f in _function_names(spec.server, spec.name)
                         if f not in names.by_function)
            names.by_function[fname] = key
            names.by_tool[key] = fname
        return names

    def function_name(self, server: str | None, tool: str) -> str:
        if (server, tool) in self.by_tool:
            return self.by_tool[(server, tool)]
        return tool if server is None else _function_name(server, tool)

    def resolve(self, function_name: str) -> tuple[str | None, str]:
        return self.by_function.get(function_name, (None, function_name))


def openai_tools(tools: list[ToolSpec], names: ToolNames) -> list[dict[str, Any]]:
    """The ``tools`` payload: our MCP tools, then ``ask_user`` and ``end_conversation``."""
    payload: list[dict[str, Any]] = []
    seen: set[str] = set()
    for spec in tools:
        fname = names.function_name(spec.server, spec.name)
        if fname in seen:
            continue
        seen.add(fname)
        payload.append(
            {
                "type": "function",
                "function": {
                    "name": fname,
                    "description": spec.description or f"{spec.name} (MCP server {spec.server})",
                    "parameters": spec.input_schema,
                },
            }
        )
    return [*payload, ASK_USER_FUNCTION, END_CONVERSATION_FUNCTION]


def openai_messages(messages: list[ChatMessage], names: ToolNames) -> list[dict[str, Any]]:
    """Our messages in chat-completions form (assistant tool_calls, tool results)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": names.function_name(call.server, call.tool),
                                "arguments": canonical_json(call.arguments),
                            },
                        }
                        for call in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _parse_arguments(function_name: str, raw: str | None) -> tuple[dict[str, Any], str | None]:
    """The arguments as an object, or ``({}, why not)``: a model mistake that goes
    back to the model, not a failure of the call."""
    if raw is None or not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        sent = raw if len(raw) <= 200 else raw[:200] + "…"
        return {}, f"the arguments of {function_name} are not valid JSON ({exc}): {sent}"
    if not isinstance(value, dict):
        return {}, f"the arguments of {function_name} are not a JSON object"
    return value, None


def _schema_problem(function_name: str, schema: dict[str, Any],
                    arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the tool's input schema, or None (also when the
    server's schema is itself invalid: then the server judges the call)."""
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(cls(schema).iter_errors(arguments))
    except jsonschema.exceptions.SchemaError:
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return (f"the arguments of {function_name} do not fit its input schema"
            f"{f' at {where}' if where else ''}: {error.message}")


def check_arguments(calls: list[ToolCallRequest], tools: list[ToolSpec],
                    names: ToolNames) -> list[ToolCallRequest]:
    """Each call with ``arguments_error`` set where its arguments do not fit the
    input schema of the tool it names (calls already marked, and calls to tools
    not offered, are left as they are: the workflow judges those)."""
    out = []
    for call in calls:
        specs = [t for t in tools if t.name == call.tool
                 and (call.server is None or t.server == call.server)]
        server = specs[0].server if len(specs) == 1 else call.server
        fname = names.function_name(server, call.tool)  # the name the model knows
        if call.arguments_error is None and call.raw_arguments is not None:
            arguments, problem = _parse_arguments(fname, call.raw_arguments)
            call = call.model_copy(update={"arguments": arguments, "arguments_error": problem,
                                           "raw_arguments": call.raw_arguments if problem
                                           else None})
        if call.arguments_error is None and len(specs) == 1:
            problem = _schema_problem(fname, specs[0].input_schema, call.arguments)
            if problem is not None:
                call = call.model_copy(update={"arguments_error": problem})
        out.append(call)
    return out


@dataclass
class _Answer:
    """The model's answer in our terms, before the telemetry is attached."""

    text: str | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    ecs_request: EcsRequest | None = None
    end: bool = False

    def output_hash(self) -> str:
        """sha256 of the answer's canonical JSON. An answer that is not Unicode text (a
        lone surrogate, e.g. ``\\ud800`` in a tool call's JSON arguments) has no UTF-8
        bytes: it cannot be hashed, recorded or logged, so it is refused."""
        try:
            return sha256_json(
                {
                    "text": self.text,
                    "tool_calls": [c.model_dump(mode="json") for c in self.tool_calls],
                    "ecs_request": self.ecs_request.model_dump(mode="json")
                    if self.ecs_request
                    else None,
                    "end": self.end,
                }
            )
        except UnicodeEncodeError:
            raise LLMResponseError(
                "the model's answer is not Unicode text: it holds a lone surrogate "
                "(a \\ud800-\\udfff escape without its pair), which UTF-8 cannot carry"
            ) from None


def _answer_from_function_calls(
    text: str | None, calls: list[tuple[str, str, str | None]], names: ToolNames
) -> _Answer:
    """``calls`` are ``(id, function name, raw JSON arguments)`` as the model sent them."""
    answer = _Answer(text=text)
    for call_id, fname, raw in calls:
        arguments, problem = _parse_arguments(fname, raw)
        bad_raw = raw if problem is not None else None
        if fname == ASK_USER:
            if problem is None:
                try:
                    request = EcsRequest.model_validate(arguments)
                except ValidationError as exc:
                    reasons = "; ".join(
                        f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}"
                        for e in exc.errors())
                    problem = f"the ask_user request is invalid ({reasons})"
            if problem is not None:  # a mistake: it goes back to the model
                answer.tool_calls.append(ToolCallRequest(
                    id=call_id, tool=ASK_USER, arguments=arguments, arguments_error=problem,
                    raw_arguments=bad_raw))
                continue
            if answer.ecs_request is not None:
                activity.logger.warning("the model called ask_user twice; keeping the first")
                continue
            answer.ecs_request = request
        elif fname == END_CONVERSATION:
            answer.end = True
            final = arguments.get("final_message")
            if not answer.text and isinstance(final, str) and final:
                answer.text = final
        else:
            server, tool = names.resolve(fname)
            answer.tool_calls.append(ToolCallRequest(
                id=call_id, tool=tool or "(no name)", server=server, arguments=arguments,
                arguments_error=problem, raw_arguments=bad_raw))
    return answer


# -- the payloads ---------------------------------------------------------------------


def llm_call_started(input: LLMCallInput) -> LLMCallStarted:
    """LLM_CALL_STARTED for a call input: pure, so an exporter can recompute it."""
    llm = input.llm
    tools_payload = openai_tools(input.tools, ToolNames.build(input.tools))
    return LLMCallStarted(
        call_id=input.call_id,
        model=llm.model,
        provider_base_url=SCRIPTED_BASE_URL if llm.provider == "scripted" else str(llm.base_url),
        prompt_hash=sha256_json([m.model_dump(mode="json") for m in input.messages]),
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        tool_schema_hash=sha256_json(tools_payload) if tools_payload else None,
        response_format="text",
    )


def _elapsed_ms(t0: float) -> int:
    return max(0, int((time.monotonic() - t0) * 1000))


def _read_api_key(llm: LLMConfig) -> str:
    if not llm.api_key_env:
        raise LLMConfigError(
            "the openai provider needs api_key_env: the name of the environment variable "
            "that holds the API key"
        )
    key = os.environ.get(llm.api_key_env)
    if not key:
        raise LLMConfigError(
            f"environment variable {llm.api_key_env} is not set or empty; "
            f"it should hold the API key for {llm.base_url}"
        )
    return key


# -- streaming ------------------------------------------------------------------------

#: Seconds between two heartbeats of a call being streamed (the SDK throttles too).
HEARTBEAT_EVERY_S = 1.0
#: Seconds between two heartbeats while nothing streams (the workflow's heartbeat
#: timeout, ``workflows.agent_turn.LLM_HEARTBEAT``, is 30 s).
TICK_EVERY_S = 5.0


class _Writer:
    """One call's text as it is written: to the bus, with heartbeats."""

    def __init__(self, bus: DeltaBus, input: LLMCallInput) -> None:
        self.bus, self.session_id, self.call_id = bus, input.session_id, input.call_id
        self.chars, self._first, self._beat_at = 0, True, -HEARTBEAT_EVERY_S

    def text(self, piece: str | None) -> None:
        if piece:
            self.bus.publish(self.session_id, self.call_id, piece, first=self._first)
            self._first = False
            self.chars += len(piece)
        self.beat()

    async def tick(self) -> None:
        """Heartbeats while no piece comes (the wait for the first token)."""
        while True:
            await asyncio.sleep(TICK_EVERY_S)
            self.beat()

    def beat(self) -> None:
        now = time.monotonic()
        if now - self._beat_at >= HEARTBEAT_EVERY_S:
            self._beat_at = now
            activity.heartbeat({"call_id": self.call_id, "chars": self.chars})


@dataclass
class _Streamed:
    """A streamed completion put back together from its chunks."""

    text: str | None = None
    refusal: str | None = None
    calls: dict[int, list[Any]] = field(default_factory=dict)  # index -> [id, type, name, args]
    finish_reason: str | None = None
    usage: Any = None
    model: str | None = None
    choices: int = 0

    def add(self, chunk: Any) -> str | None:
        """Takes one chunk in; returns its new text (what streams to the bus)."""
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        if not chunk.choices:
            return None
        self.choices += 1
        choice = chunk.choices[0]
        self.finish_reason = choice.finish_reason or self.finish_reason
        delta = choice.delta
        if delta.refusal:
            self.refusal = (self.refusal or "") + delta.refusal
        for call in delta.tool_calls or []:
            slot = self.calls.setdefault(call.index, [None, None, None, None])
            slot[0] = call.id or slot[0]
            slot[1] = call.type or slot[1]
            if call.function is not None:
                slot[2] = call.function.name or slot[2]
                if call.function.arguments is not None:
                    slot[3] = (slot[3] or "") + call.function.arguments
        if delta.content is not None:
            self.text = (self.text or "") + delta.content
        return delta.content


# -- the activity ---------------------------------------------------------------------


class LlmActivities:
    """The LLM activity. Stateless: one instance serves every session of a worker;
    ``deltas`` is where the text goes while it is written (default: nowhere)."""

    def __init__(self, deltas: DeltaBus | None = None) -> None:
        self.deltas: DeltaBus = deltas or NullDeltaBus()

    @activity.defn(name="llm_call")
    async def llm_call(self, input: LLMCallInput) -> LLMCallResult:
        writer = _Writer(self.deltas, input)
        ticker = asyncio.create_task(writer.tick())
        try:
            return await self._call(input, writer)
        finally:
            ticker.cancel()
            self.deltas.finish(input.session_id, input.call_id)

    async def _call(self, input: LLMCallInput, writer: _Writer) -> LLMCallResult:
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
                answer, usage, finish_reason, cost = self._scripted(input, writer)
            else:
                secret = _read_api_key(input.llm)
                answer, usage, finish_reason, cost = await self._openai(input, secret, writer)
            output_hash = answer.output_hash()
        except Exception as exc:
            error = _failure(exc, input.call_id, _elapsed_ms(t0), secret)
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

    # -- scripted ---------------------------------------------------------------------

    @staticmethod
    def _scripted(input: LLMCallInput, writer: _Writer
                  ) -> tuple[_Answer, TokenUsage, str, float | None]:
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
        answer = _Answer(text=r.text, tool_calls=tool_calls, ecs_request=r.ecs_request, end=r.end)
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

    # -- openai-compatible ------------------------------------------------------------

    @staticmethod
    async def _openai(
        input: LLMCallInput, api_key: str, writer: _Writer
    ) -> tuple[_Answer, TokenUsage, str, float | None]:
        llm = input.llm
        names = ToolNames.build(input.tools)
        got = _Streamed()
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
        answer = _answer_from_function_calls(text, calls, names)
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
