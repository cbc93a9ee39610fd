"""The LLM activity: the scripted provider, and the openai provider over real HTTP.

The openai provider talks to ``tests/fakes/openai_server.py`` through the real
``openai`` SDK; every activity runs in ``temporalio.testing.ActivityEnvironment``.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from datetime import timedelta
from email.utils import formatdate

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.llm import streaming
from activities.llm.activity import LlmActivities
from activities.llm.failures import retry_after_s
from activities.llm.payloads import SCRIPTED_BASE_URL, llm_call_started, sha256_json
from activities.llm.wire import ASK_USER, END_CONVERSATION, ToolNames, openai_tools
from tests.fakes.openai_server import FakeOpenAIServer, tool_call
from workflows.config import EcsRequest, LLMConfig, ScriptedResponse, ToolCallRequest
from workflows.io import ChatMessage, LLMCallFailed, LLMCallInput, LLMCallResult, ToolSpec
from workflows.safety import SafetyClass, ToolAnnotations

HANG_GUARD_S = 20

KEY_ENV = "TEST_LLM_LLM_KEY"
KEY = "sk-fake-4f1c0d2e9b7a6358"
FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

MESSAGES = [
    ChatMessage(role="system", content="You are a careful assistant."),
    ChatMessage(role="user", content="Read the notes and tell me what they say."),
]

TOOLS = [
    ToolSpec(
        server="fs",
        name="read_file",
        description="Read a file.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        annotations=ToolAnnotations(read_only_hint=True),
        safety=SafetyClass.READ_ONLY,
    ),
    ToolSpec(server="my.git", name="git_commit", description="Commit."),
]


# -- helpers --------------------------------------------------------------------------


def scripted_input(
    responses: list[ScriptedResponse],
    call_index: int = 0,
    messages: list[ChatMessage] | None = None,
    tools: list[ToolSpec] | None = None,
) -> LLMCallInput:
    return LLMCallInput(
        session_id="s1",
        call_id=f"s1-llm-{call_index}",
        call_index=call_index,
        llm=LLMConfig(provider="scripted", responses=responses),
        messages=MESSAGES if messages is None else messages,
        tools=tools or [],
    )


def openai_input(
    server: FakeOpenAIServer,
    *,
    model: str = "fake-model",
    api_key_env: str | None = KEY_ENV,
    base_url: str | None = None,
    messages: list[ChatMessage] | None = None,
    tools: list[ToolSpec] | None = None,
) -> LLMCallInput:
    return LLMCallInput(
        session_id="s1",
        call_id="s1-llm-0",
        call_index=0,
        llm=LLMConfig(
            provider="openai",
            model=model,
            base_url=base_url or server.base_url,
            api_key_env=api_key_env,
            temperature=0.0,
            max_tokens=256,
            timeout_s=30,
        ),
        messages=MESSAGES if messages is None else messages,
        tools=TOOLS if tools is None else tools,
    )


async def run(input: LLMCallInput) -> LLMCallResult:
    return await ActivityEnvironment().run(LlmActivities().llm_call, input)


async def run_failing(input: LLMCallInput) -> tuple[ApplicationError, LLMCallFailed]:
    with pytest.raises(ApplicationError) as info:
        await run(input)
    error = info.value
    assert len(error.details) == 1
    failed = LLMCallFailed.model_validate(error.details[0])
    assert failed.call_id == input.call_id
    assert error.type == failed.error_class
    assert error.non_retryable is (not failed.retryable)
    # The SDK's exception is not chained into the Temporal failure.
    assert error.__cause__ is None
    return error, failed


def everything_in(error: ApplicationError) -> str:
    return f"{error}\n{error.message}\n{json.dumps(list(error.details))}"


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAIServer) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    fake_openai.expected_key = KEY
    return KEY


# -- scripted -------------------------------------------------------------------------

SCRIPT = [
    ScriptedResponse(
        tool_calls=[ToolCallRequest(id="c1", tool="read_file", server="fs", arguments={"p": 1})]
    ),
    ScriptedResponse(ecs_request=EcsRequest(kind="confirm", prompt="Delete the notes?")),
    ScriptedResponse(text="All done, the notes are gone.", end=True),
]


async def test_scripted_plays_responses_in_order_by_call_index() -> None:
    first = await run(scripted_input(SCRIPT, 0))
    assert first.text is None
    assert first.tool_calls == SCRIPT[0].tool_calls
    assert first.ecs_request is None and not first.end
    assert first.finished.finish_reason == "tool_calls"
    assert first.finished.tool_calls_count == 1

    second = await run(scripted_input(SCRIPT, 1))
    assert second.ecs_request == EcsRequest(kind="confirm", prompt="Delete the notes?")
    assert second.tool_calls == []
    assert second.finished.finish_reason == "tool_calls"

    third = await run(scripted_input(SCRIPT, 2))
    assert third.text == "All done, the notes are gone."
    assert third.end is True
    assert third.finished.finish_reason == "stop"
    assert third.finished.tool_calls_count == 0


async def test_scripted_plays_the_alternative_the_previous_outcome_calls_for() -> None:
    branching = ScriptedResponse.model_validate({
        "text": "The notes are gone.", "end": True,
        "alternatives": [{"when": {"previous": "rejected"}, "text": "I kept them."}]})
    rejected = scripted_input([branching]).model_copy(update={"outcomes": {"": ["rejected"]}})
    assert (await run(rejected)).text == "I kept them."
    assert (await run(rejected)).end is False  # the alternative's own fields, not merged
    completed = scripted_input([branching]).model_copy(update={"outcomes": {"": ["completed"]}})
    assert (await run(completed)).text == "The notes are gone."


async def test_scripted_tool_calls_without_id_get_stable_ids() -> None:
    script = [ScriptedResponse(tool_calls=[ToolCallRequest(tool="a"), ToolCallRequest(tool="b")])]
    one = await run(scripted_input(script))
    two = await run(scripted_input(script))
    ids = [c.id for c in one.tool_calls]
    assert ids == [c.id for c in two.tool_calls]
    assert len(set(ids)) == 2 and all(ids)


@pytest.mark.parametrize(
    ("http_status", "retryable"),
    [(None, True), (500, True), (503, True), (429, True), (400, False), (401, False), (404, False)],
)
async def test_scripted_error_simulates_a_provider_failure(
    http_status: int | None, retryable: bool
) -> None:
    script = [ScriptedResponse(error="provider exploded", http_status=http_status)]
    error, failed = await run_failing(scripted_input(script))
    assert failed.retryable is retryable
    assert error.non_retryable is (not retryable)
    assert failed.http_status == http_status
    assert failed.error_class == "ScriptedProviderError"
    assert "provider exploded" in failed.error_summary
    assert failed.error_details and "ScriptedProviderError" in failed.error_details


async def test_scripted_past_the_end_is_non_retryable() -> None:
    error, failed = await run_failing(scripted_input(SCRIPT, 3))
    assert error.non_retryable
    assert not failed.retryable
    assert "scripted provider has no response #3" in error.message
    assert failed.http_status is None


async def test_scripted_payloads_are_complete_and_deterministic() -> None:
    a = await run(scripted_input(SCRIPT, 2, tools=TOOLS))
    b = await run(scripted_input(SCRIPT, 2, tools=TOOLS))

    started = a.started
    assert started.call_id == "s1-llm-2" == a.finished.call_id
    assert started.model == "scripted"
    assert started.provider_base_url == SCRIPTED_BASE_URL
    assert started.temperature == 0.0
    assert started.max_tokens == 1024
    assert re.fullmatch(r"[0-9a-f]{64}", started.prompt_hash)
    assert started.tool_schema_hash and re.fullmatch(r"[0-9a-f]{64}", started.tool_schema_hash)
    assert started == b.started  # same input, same hashes

    finished = a.finished
    assert re.fullmatch(r"[0-9a-f]{64}", finished.output_hash)
    assert finished.output_hash == b.finished.output_hash
    assert finished.latency_ms >= 0
    usage = finished.token_usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage == b.finished.token_usage
    assert finished.api_cost_usd == 0.0

    # Different messages, tools or answers give different hashes.
    other_messages = [*MESSAGES, ChatMessage(role="user", content="And the other file?")]
    c = await run(scripted_input(SCRIPT, 2, messages=other_messages, tools=TOOLS))
    assert c.started.prompt_hash != started.prompt_hash
    d = await run(scripted_input(SCRIPT, 2, tools=TOOLS[:1]))
    assert d.started.tool_schema_hash != started.tool_schema_hash
    e = await run(scripted_input(SCRIPT, 1, tools=TOOLS))
    assert e.finished.output_hash != finished.output_hash


def test_prompt_hash_is_the_sha256_of_the_canonical_messages() -> None:
    input = scripted_input(SCRIPT)
    expected = sha256_json([m.model_dump(mode="json") for m in MESSAGES])
    assert llm_call_started(input).prompt_hash == expected


# -- the tool-name mapping ----------------------------------------------------------


def test_tool_names_are_valid_distinct_and_map_back() -> None:
    tools = [
        ToolSpec(server="fs", name="read_file"),
        ToolSpec(server="my.git", name="git_commit"),
        ToolSpec(server="my_git", name="git_commit"),
        ToolSpec(server="s" * 60, name="t" * 60),
        ToolSpec(server="s" * 60, name="t" * 59 + "u"),
    ]
    names = ToolNames.build(tools)
    functions = [names.function_name(t.server, t.name) for t in tools]
    assert functions[0] == "fs__read_file"
    assert all(FUNCTION_NAME.fullmatch(f) for f in functions)
    assert len(set(functions)) == len(functions)
    assert ASK_USER not in functions and END_CONVERSATION not in functions
    for tool, function in zip(tools, functions, strict=True):
        assert names.resolve(function) == (tool.server, tool.name)
    assert names.resolve("not_offered") == (None, "not_offered")


def test_tools_whose_names_clash_still_get_names_of_their_own() -> None:
    # Both are ``a__b__c``; the made-safe forms clash too when the names are not valid.
    tools = [ToolSpec(server="a__b", name="c"), ToolSpec(server="a", name="b__c"),
             ToolSpec(server="x__y", name="z.w"), ToolSpec(server="x", name="y__z.w"),
             ToolSpec(server="x", name="y__z.w")]  # listed twice: one function
    input = scripted_input(SCRIPT).model_copy(update={"tools": tools})
    llm_call_started(input)  # the exporter recomputes it: it must not fail

    names = ToolNames.build(tools)
    functions = [t["function"]["name"] for t in openai_tools(tools, names)]
    assert functions[:2] == ["a__b__c", "a__b__c_8a954b24"]
    assert len(functions) == 6 and len(set(functions)) == 6
    assert all(FUNCTION_NAME.fullmatch(f) for f in functions)
    for tool in tools:
        assert names.resolve(names.function_name(tool.server, tool.name)) == (
            tool.server, tool.name)


# -- openai-compatible over HTTP --------------------------------------------------------


async def test_openai_text_answer(fake_openai: FakeOpenAIServer, api_key: str) -> None:
    fake_openai.reply_text("The notes say hello.", usage=(31, 7))
    result = await run(openai_input(fake_openai))

    assert result.text == "The notes say hello."
    assert result.tool_calls == [] and result.ecs_request is None and result.end is False
    assert result.finished.finish_reason == "stop"
    usage = result.finished.token_usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (31, 7, 38)
    assert result.finished.api_cost_usd is None  # fake-model has no price
    assert result.finished.tool_calls_count == 0
    assert result.started.provider_base_url == fake_openai.base_url
    assert result.started.model == "fake-model"
    assert result.started.max_tokens == 256


async def test_openai_cost_from_the_price_table(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    fake_openai.reply_text("ok", usage=(1000, 500), model="gpt-4o-mini-2024-07-18")
    result = await run(openai_input(fake_openai, model="gpt-4o-mini"))
    assert result.finished.api_cost_usd == pytest.approx((1000 * 0.15 + 500 * 0.60) / 1e6)


async def test_openai_request_carries_key_messages_and_mapped_tools(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    history = [
        *MESSAGES,
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=[
                ToolCallRequest(id="call_1", tool="read_file", server="fs", arguments={"path": "n"})
            ],
        ),
        ChatMessage(role="tool", content="hello", tool_call_id="call_1"),
    ]
    fake_openai.reply_text("The notes say hello.")
    await run(openai_input(fake_openai, messages=history))

    assert len(fake_openai.requests) == 1
    request = fake_openai.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.body
    assert body["model"] == "fake-model"
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 256

    functions = {t["function"]["name"]: t["function"] for t in body["tools"]}
    names = ToolNames.build(TOOLS)
    git = names.function_name("my.git", "git_commit")
    assert set(functions) == {"fs__read_file", git, ASK_USER, END_CONVERSATION}
    assert all(FUNCTION_NAME.fullmatch(name) for name in functions)
    assert functions["fs__read_file"]["parameters"] == TOOLS[0].input_schema
    assert functions["fs__read_file"]["description"] == "Read a file."
    assert functions[ASK_USER]["parameters"]["properties"]["kind"]["enum"] == [
        "confirm",
        "choose",
        "form",
    ]

    sent = body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[1]["content"] == MESSAGES[1].content
    (call,) = sent[2]["tool_calls"]
    assert call["id"] == "call_1"
    assert call["function"]["name"] == "fs__read_file"
    assert json.loads(call["function"]["arguments"]) == {"path": "n"}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "hello"}


async def test_openai_tool_calls_map_back_to_server_and_tool(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    git = ToolNames.build(TOOLS).function_name("my.git", "git_commit")
    fake_openai.reply_tool_calls(
        [
            tool_call("call_a", "fs__read_file", {"path": "notes.txt"}),
            tool_call("call_b", git, {"message": "save"}),
        ],
        usage=(40, 12),
    )
    result = await run(openai_input(fake_openai))

    assert result.tool_calls == [
        ToolCallRequest(
            id="call_a", tool="read_file", server="fs", arguments={"path": "notes.txt"}
        ),
        ToolCallRequest(
            id="call_b", tool="git_commit", server="my.git", arguments={"message": "save"}
        ),
    ]
    assert result.ecs_request is None and result.end is False
    assert result.finished.finish_reason == "tool_calls"
    assert result.finished.tool_calls_count == 2
    assert result.finished.token_usage.total_tokens == 52


async def test_openai_ask_user_becomes_an_ecs_request(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    ask = {"kind": "choose", "prompt": "Which branch?", "options": ["main", "dev"]}
    fake_openai.reply_tool_calls([tool_call("call_q", ASK_USER, ask)], text="I need to know.")
    result = await run(openai_input(fake_openai))

    assert result.ecs_request == EcsRequest(
        kind="choose", prompt="Which branch?", options=["main", "dev"]
    )
    assert result.tool_calls == []
    assert result.text == "I need to know."
    assert result.finished.tool_calls_count == 0


async def test_openai_invalid_ask_user_is_a_mistake_for_the_model(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    ask = {"kind": "choose", "prompt": "Which branch?", "options": ["main"]}
    fake_openai.reply_tool_calls([tool_call("call_q", ASK_USER, ask)])
    result = await run(openai_input(fake_openai))
    assert result.ecs_request is None
    (call,) = result.tool_calls
    assert (call.id, call.tool, call.server, call.arguments) == ("call_q", ASK_USER, None, ask)
    assert call.arguments_error and "ask_user request is invalid" in call.arguments_error
    assert "at least two options" in call.arguments_error


async def test_openai_end_conversation_ends(fake_openai: FakeOpenAIServer, api_key: str) -> None:
    fake_openai.reply_tool_calls(
        [tool_call("call_e", END_CONVERSATION, {"final_message": "Goodbye."})]
    )
    result = await run(openai_input(fake_openai))
    assert result.end is True
    assert result.text == "Goodbye."
    assert result.tool_calls == [] and result.ecs_request is None


@pytest.mark.parametrize(("raw", "problem"), [
    ('{"path": ', "are not valid JSON (Expecting value: line 1 column 10 (char 9)): "
                  '{"path": '),
    ('["notes.txt"]', "are not a JSON object"),
    ('{"path": 7}', "do not fit its input schema at path: 7 is not of type 'string'"),
    ('{"path": "n", "extra": 1}', "do not fit its input schema: Additional properties are "
                                  "not allowed ('extra' was unexpected)"),
])
async def test_openai_unusable_arguments_come_back_as_a_mistake(
    fake_openai: FakeOpenAIServer, api_key: str, raw: str, problem: str
) -> None:
    """Not JSON, not an object, not what the schema asks: the call is returned with
    ``arguments_error`` (the workflow tells the model), never a failed LLM call."""
    strict = [TOOLS[0].model_copy(update={"input_schema": {
        "type": "object", "properties": {"path": {"type": "string"}},
        "required": ["path"], "additionalProperties": False}})]
    fake_openai.reply_tool_calls([tool_call("call_a", "fs__read_file", raw),
                                  tool_call("call_b", "fs__read_file", {"path": "ok"})])
    result = await run(openai_input(fake_openai, tools=strict))
    bad, good = result.tool_calls
    assert (bad.id, bad.server, bad.tool) == ("call_a", "fs", "read_file")
    assert bad.arguments_error == f"the arguments of fs__read_file {problem}"
    parsed = raw.startswith("{") and raw.endswith("}")
    assert bad.raw_arguments == (None if parsed else raw)
    assert good.arguments_error is None and good.arguments == {"path": "ok"}
    # Unset, the two fields stay out of the JSON (the output hash of older answers).
    assert set(good.model_dump()) == {"id", "tool", "server", "arguments"}


def _nested(levels: int) -> str:
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


@pytest.mark.parametrize(("raw", "problem"), [
    (_nested(250), "nesting deeper than 64 levels at $" + ".a" * 64),
    (_nested(10_000), "nesting deeper than 64 levels at $" + ".a" * 64),
    ("[" * 10_000, "nesting deeper than 64 levels at $" + "[0]" * 64),
    ('{"path": 1e400}', "a number JSON cannot carry at $.path: 1e400 is beyond the range "
                        "of a double (it would be read as infinity); send it as a string "
                        "if it is meant"),
    ('{"path": NaN}', "a number JSON cannot carry at $.path: NaN is not a JSON number; send "
                      "it as a string if it is meant"),
])
async def test_openai_arguments_past_the_limits_come_back_as_a_mistake(
    fake_openai: FakeOpenAIServer, api_key: str, raw: str, problem: str
) -> None:
    """Arguments nested past the limit (250 levels once stuck the session: its worker
    could not decode the answer; 10,000 broke Python's parser) or holding a number JSON
    cannot carry: a mistake the model is told of, with its text kept, never parsed."""
    fake_openai.reply_tool_calls([tool_call("call_d", "fs__read_file", raw),
                                  tool_call("call_e", ASK_USER, raw)])
    result = await run(openai_input(fake_openai))
    deep, ask = result.tool_calls
    assert (deep.id, deep.server, deep.tool, deep.arguments) == (
        "call_d", "fs", "read_file", {})
    assert deep.arguments_error == f"the arguments of fs__read_file are refused: {problem}"
    assert deep.raw_arguments == raw
    assert (ask.tool, ask.arguments_error) == (
        ASK_USER, f"the arguments of ask_user are refused: {problem}")
    assert result.ecs_request is None


async def test_scripted_raw_arguments_past_the_limits_are_a_mistake_too() -> None:
    script = [ScriptedResponse(tool_calls=[
        ToolCallRequest(tool="read_file", server="fs", raw_arguments=_nested(250))])]
    result = await run(scripted_input(script, tools=TOOLS))
    (call,) = result.tool_calls
    assert call.arguments_error == ("the arguments of fs__read_file are refused: nesting "
                                    "deeper than 64 levels at $" + ".a" * 64)
    assert (call.arguments, call.raw_arguments) == ({}, _nested(250))


async def test_scripted_arguments_are_checked_like_the_models() -> None:
    script = [ScriptedResponse(tool_calls=[
        ToolCallRequest(tool="read_file", server="fs", raw_arguments='{"path": "a"'),
        ToolCallRequest(tool="read_file", arguments={"path": 3}),
        ToolCallRequest(tool="read_file", raw_arguments='{"path": "a"}'),
        ToolCallRequest(tool="not_offered", arguments={"x": 1}),
    ])]
    result = await run(scripted_input(script, tools=TOOLS))
    bad_json, bad_type, good, unknown = result.tool_calls
    assert bad_json.arguments_error.startswith("the arguments of fs__read_file are not valid")
    assert bad_type.arguments_error.startswith("the arguments of fs__read_file do not fit")
    assert bad_json.raw_arguments == '{"path": "a"'
    assert "3 is not of type 'string'" in bad_type.arguments_error
    assert (good.arguments, good.arguments_error, good.raw_arguments) == ({"path": "a"}, None,
                                                                          None)
    assert unknown.arguments_error is None  # the workflow judges a tool that is not there


async def test_openai_arguments_that_are_not_unicode_are_non_retryable(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    """A lone surrogate (``\\ud800`` without its pair) in a tool call's JSON arguments:
    not Unicode text, so it cannot be hashed or recorded; refused at once (before: a
    UnicodeEncodeError, retried)."""
    fake_openai.reply_tool_calls([tool_call("call_s", "fs__read_file", '{"path": "a\\ud800"}')])
    error, failed = await run_failing(openai_input(fake_openai))
    assert error.non_retryable and not failed.retryable
    assert failed.error_class == "LLMResponseError"
    assert "lone surrogate" in failed.error_summary


async def test_openai_401_is_non_retryable_and_never_shows_the_key(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    # A careless server that echoes the key back: the activity must not pass it on.
    fake_openai.reply_error(
        401, f"Incorrect API key provided: {KEY}", type_="invalid_request_error"
    )
    error, failed = await run_failing(openai_input(fake_openai))
    assert failed.http_status == 401
    assert failed.retryable is False
    assert error.non_retryable
    assert failed.error_class == "AuthenticationError"
    assert "Incorrect API key provided" in failed.error_summary
    assert KEY not in everything_in(error)


async def test_openai_wrong_key_is_rejected_by_the_server(
    fake_openai: FakeOpenAIServer, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-fake-wrong")
    fake_openai.reply_text("never sent")
    _error, failed = await run_failing(openai_input(fake_openai))
    assert failed.http_status == 401 and not failed.retryable
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-fake-wrong"


@pytest.mark.parametrize(
    ("status", "retryable", "error_class"),
    [
        (429, True, "RateLimitError"),
        (500, True, "InternalServerError"),
        (503, True, "InternalServerError"),
        (400, False, "BadRequestError"),
        (404, False, "NotFoundError"),
    ],
)
async def test_openai_http_errors_are_classified(
    fake_openai: FakeOpenAIServer, api_key: str, status: int, retryable: bool, error_class: str
) -> None:
    fake_openai.reply_error(status, "something went wrong")
    error, failed = await run_failing(openai_input(fake_openai))
    assert failed.http_status == status
    assert failed.retryable is retryable
    assert error.non_retryable is (not retryable)
    assert failed.error_class == error_class
    assert "something went wrong" in failed.error_summary
    # max_retries=0: one request, Temporal retries.
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize(("headers", "delay_s"), [
    ({"retry-after": "20"}, 20.0),
    ({"retry-after-ms": "1500", "retry-after": "20"}, 1.5),
    ({"retry-after": "2"}, 2.0),
    ({}, None),
    ({"retry-after": "soon"}, None),
])
async def test_openai_429_names_the_providers_delay_as_the_next_retry_delay(
    fake_openai: FakeOpenAIServer, api_key: str, headers: dict, delay_s: float | None
) -> None:
    """The provider's Retry-After / retry-after-ms becomes the activity failure's
    ``next_retry_delay``: the workflow waits at least that long before the next try."""
    fake_openai.reply_error(429, "Rate limit reached; try again in 20s",
                            type_="rate_limit_error", headers=headers)
    error, failed = await run_failing(openai_input(fake_openai))
    assert failed.http_status == 429 and failed.retryable and not error.non_retryable
    expected = None if delay_s is None else timedelta(seconds=delay_s)
    assert error.next_retry_delay == expected


async def test_openai_503_with_retry_after_and_400_without_retry(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    fake_openai.reply_error(503, "overloaded", headers={"retry-after": "7"})
    error, _ = await run_failing(openai_input(fake_openai))
    assert not error.non_retryable and error.next_retry_delay == timedelta(seconds=7)
    # A 400 is never retried, whatever delay it names.
    fake_openai.reply_error(400, "bad request", headers={"retry-after": "1"})
    error, failed = await run_failing(openai_input(fake_openai))
    assert error.non_retryable and not failed.retryable and error.next_retry_delay is None


def test_retry_after_as_an_http_date() -> None:
    now = 1_700_000_000.0
    date = formatdate(now + 30, usegmt=True)
    assert retry_after_s({"retry-after": date}, now=now) == pytest.approx(30)
    assert retry_after_s({"retry-after": formatdate(now - 5, usegmt=True)}, now=now) == 0.0
    assert retry_after_s({"retry-after": "-3"}) is None
    assert retry_after_s({"retry-after": "nan"}) is None
    assert retry_after_s({"retry-after": "1e40"}) == 7 * 24 * 3600  # capped, never a crash
    assert retry_after_s({"retry-after-ms": "x", "retry-after": "4"}) == 4.0
    assert retry_after_s({"retry-after-ms": "-1", "retry-after": "4"}) == 4.0


async def test_openai_connection_refused_is_retryable(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The port is closed again: the connection is refused.
    _error, failed = await run_failing(
        openai_input(fake_openai, base_url=f"http://127.0.0.1:{port}/v1")
    )
    assert failed.retryable is True
    assert failed.http_status is None
    assert failed.error_class == "APIConnectionError"


async def test_openai_missing_key_variable_is_non_retryable_and_names_it(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ambient = "sk-ambient-must-not-be-used"
    monkeypatch.delenv("ABSENT_LLM_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", ambient)
    fake_openai.reply_text("never sent")
    error, failed = await run_failing(openai_input(fake_openai, api_key_env="ABSENT_LLM_KEY"))
    assert error.non_retryable and not failed.retryable
    assert failed.error_class == "LLMConfigError"
    assert "ABSENT_LLM_KEY" in error.message
    text = everything_in(error)
    assert ambient not in text and KEY not in text
    assert fake_openai.requests == []


async def test_openai_without_api_key_env_is_non_retryable(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient-must-not-be-used")
    error, _failed = await run_failing(openai_input(fake_openai, api_key_env=None))
    assert error.non_retryable
    assert "api_key_env" in error.message
    assert fake_openai.requests == []


async def test_openai_and_scripted_hash_the_same_prompt_alike(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    fake_openai.reply_text("hello")
    via_http = await run(openai_input(fake_openai, tools=[]))
    scripted = await run(scripted_input([ScriptedResponse(text="hello")]))
    assert via_http.started.prompt_hash == scripted.started.prompt_hash
    assert via_http.started.tool_schema_hash == scripted.started.tool_schema_hash
    assert via_http.finished.output_hash == scripted.finished.output_hash


# -- streaming: the text as it is written -----------------------------------------------


class Recorder:
    """A DeltaBus that keeps what the activity published."""

    def __init__(self) -> None:
        self.pieces: list[tuple[str, str, str, bool]] = []
        self.finished: list[tuple[str, str]] = []

    def publish(self, session_id: str, call_id: str, delta: str, *, first: bool = False
                ) -> None:
        self.pieces.append((session_id, call_id, delta, first))

    def finish(self, session_id: str, call_id: str) -> None:
        self.finished.append((session_id, call_id))

    def subscribe(self, session_id: str):  # pragma: no cover - the activity never reads
        raise AssertionError("the activity subscribed")


async def run_streaming(input: LLMCallInput) -> tuple[LLMCallResult | Exception, Recorder,
                                                       list]:
    bus, beats = Recorder(), []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    try:
        result: LLMCallResult | Exception = await env.run(LlmActivities(bus).llm_call, input)
    except ApplicationError as err:
        result = err
    return result, bus, beats


async def test_scripted_text_streams_in_pieces_with_heartbeats() -> None:
    input = scripted_input(SCRIPT, call_index=2)
    result, bus, beats = await run_streaming(input)
    assert isinstance(result, LLMCallResult)
    text = "All done, the notes are gone."
    assert len(bus.pieces) > 1
    assert "".join(p[2] for p in bus.pieces) == result.text == text
    assert {(p[0], p[1]) for p in bus.pieces} == {("s1", input.call_id)}
    assert [p[3] for p in bus.pieces] == [True] + [False] * (len(bus.pieces) - 1)
    assert bus.finished == [("s1", input.call_id)]
    assert beats and beats[0][0]["call_id"] == input.call_id


async def test_scripted_without_text_streams_nothing_and_finishes() -> None:
    result, bus, _ = await run_streaming(scripted_input(SCRIPT, call_index=1))
    assert isinstance(result, LLMCallResult) and result.ecs_request is not None
    assert bus.pieces == [] and bus.finished == [("s1", "s1-llm-1")]


async def test_openai_streams_each_piece_as_it_comes(
    fake_openai: FakeOpenAIServer, api_key: str
) -> None:
    fake_openai.reply_text("Hello, world.", pieces=["Hel", "lo, ", "world."], usage=(9, 3))
    result, bus, beats = await run_streaming(openai_input(fake_openai))
    assert isinstance(result, LLMCallResult)
    assert [(p[2], p[3]) for p in bus.pieces] == [("Hel", True), ("lo, ", False),
                                                  ("world.", False)]
    assert result.text == "Hello, world."
    usage = result.finished.token_usage  # from the stream's last chunk
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (9, 3, 12)
    body = fake_openai.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert bus.finished == [("s1", "s1-llm-0")]
    assert beats and beats[-1][0]["call_id"] == "s1-llm-0"


async def test_a_failed_call_ends_its_stream(fake_openai: FakeOpenAIServer, api_key: str) -> None:
    fake_openai.reply_error(503, "overloaded")
    result, bus, _ = await run_streaming(openai_input(fake_openai))
    assert isinstance(result, ApplicationError)
    assert bus.pieces == [] and bus.finished == [("s1", "s1-llm-0")]


async def test_a_model_slow_to_start_still_heartbeats(
    fake_openai: FakeOpenAIServer, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the first token nothing streams; the activity heartbeats all the same
    (the workflow's heartbeat timeout would otherwise take a thinking model for a
    lost worker)."""
    monkeypatch.setattr(streaming, "TICK_EVERY_S", 0.01)
    held = threading.Event()
    guard = threading.Timer(HANG_GUARD_S, held.set)  # only if no heartbeat comes
    guard.start()
    fake_openai.reply_text("Late.", pieces=["Late."], hold=held, hold_after=-1)
    beats: list = []  # (details, whether the model had started)
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: (beats.append((details, held.is_set())), held.set())
    try:
        result = await env.run(LlmActivities(Recorder()).llm_call, openai_input(fake_openai))
    finally:
        guard.cancel()
    assert result.text == "Late."
    assert beats[0] == (({"call_id": "s1-llm-0", "chars": 0},), False)  # before any chunk


@pytest.mark.parametrize("name", ["HITLFLOW_API_TOKEN", "TEMPORAL_API_KEY", "temporal_api_key"])
async def test_a_config_cannot_send_hitlflow_s_or_temporal_s_own_variables(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Tried: `api_key_env` naming the worker's API token or Temporal API key, with a
    base_url the config chose: refused before any request (the value never leaves)."""
    monkeypatch.setenv(name, "s3cret-of-the-worker")
    error, failed = await run_failing(openai_input(fake_openai, api_key_env=name))
    assert error.non_retryable and failed.error_class == "LLMConfigError"
    assert f"api_key_env may not name {name}" in error.message
    assert "s3cret-of-the-worker" not in everything_in(error)
    assert fake_openai.requests == []
