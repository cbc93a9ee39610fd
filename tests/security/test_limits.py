"""Limits before history (issue 25, item 5): JSON nested too deep, and numbers JSON
cannot carry, never reach a session's history, never stick a session, never answer
5xx (docs/security.md, "Limits").

Each test says what it tried: a config, a reply or a message nested 200, 900 and
10,000 levels deep, ``1e400`` and its kin in a config, sent to the real API (uvicorn,
a worker and the exporter on the real Temporal dev server), or straight to Temporal;
a model (the OpenAI-compatible fake server) answering with tool-call arguments 250
levels deep. Each asserts the refusal names the limit, and that nothing changed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from api.cli.main import app as cli
from api.http.limits import DEPTH_SETTING, SIZE_SETTING
from tests.api.http_support import (
    TOKEN,
    HttpStack,
    chat_body,
    confirm_body,
    error_of,
    eventually,
    running_stack,
    session_until,
    stack_settings,
    waiting,
)
from tests.fakes.openai_server import FakeOpenAIServer, tool_call
from workflows.limits import DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING, scan_json_text

pytestmark = pytest.mark.slow

DEPTHS = [200, 900, 10_000]
KEY_ENV = "TEST_LIMITS_LLM_KEY"
JSON = {"content-type": "application/json"}
TOO_DEEP = f"nesting deeper than {DEFAULT_MAX_DEPTH} levels at "


def nested(levels: int) -> str:
    """A JSON object ``levels`` levels deep, as text (``json.dumps`` itself recurses)."""
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


def config_text(arguments: str, **llm: str) -> str:
    """A scripted session whose first answer calls a tool with ``arguments`` (JSON text)."""
    return ('{"mode":"auto","initial_message":"go","agent":{"llm":{"provider":"scripted",'
            '"responses":[{"tool_calls":[{"tool":"write_note","arguments":' + arguments
            + '}]},{"text":"done","end":true}]}}}')


@pytest.fixture(scope="module")
async def stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpStack]:
    settings = stack_settings(dev_env.client, tmp_path_factory.mktemp("limits-data"), "limits")
    async with running_stack(dev_env.client, settings, free_port()) as running:
        yield running


async def session_ids(http: httpx.AsyncClient) -> set[str]:
    r = await http.get("/api/sessions", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return {s["session_id"] for s in r.json()["sessions"]}


async def assert_never_started(stack: HttpStack, sid: str, before: set[str]) -> None:
    """No session ``sid``: not in Temporal, not in the API, not in the list."""
    with pytest.raises(RPCError) as err:
        await stack.client.get_workflow_handle(sid).describe()
    assert err.value.status == RPCStatusCode.NOT_FOUND
    assert (await stack.http.get(f"/api/sessions/{sid}")).status_code == 404
    assert sid not in await session_ids(stack.http)
    assert await session_ids(stack.http) >= before


async def live(http: httpx.AsyncClient, sid: str) -> dict:
    r = await http.get(f"/api/sessions/{sid}", params={"consistency": "live"})
    assert r.status_code == 200, r.text
    view = r.json()
    return {k: view[k] for k in ("status", "pending", "replies", "turns", "journal_seq")}


# -- the scan itself ------------------------------------------------------------------


def test_the_scan_does_not_recurse_at_any_depth() -> None:
    """Tried: 100,000 levels, past any recursion limit. The scan names the first level
    past the limit (a recursive scan would raise RecursionError instead)."""
    assert sys.getrecursionlimit() < 100_000
    problem = scan_json_text("[" * 100_000 + "]" * 100_000)
    assert problem is not None and problem.kind == "depth"
    assert problem.message == TOO_DEEP + "$" + "[0]" * DEFAULT_MAX_DEPTH
    assert scan_json_text(nested(DEFAULT_MAX_DEPTH)) is None
    assert scan_json_text('{"s": "' + "[" * 1000 + '"}') is None  # brackets in a string


@pytest.mark.parametrize("text", [
    '["' + '\\"' * 50_000 + "]",   # a string that never closes, full of escaped quotes
    '{"a":"' + '\\"' * 50_000,
    '{"a":"x\\"y", "b":[' + "[" * 70 + "]" * 70 + "]}",  # an escaped quote, then depth
])
def test_the_scan_reads_unclosed_strings_once(text: str) -> None:
    """Tried: strings that never close, full of escaped quotes (each used to restart
    the scan to the end of the text: a 30 KB body held the API's event loop for
    seconds; a model's answer froze its worker). They are read once: not JSON, left
    to the parser to name; past them, depth is still found."""
    problem = scan_json_text(text)
    if text.startswith('{"a":"x'):
        assert problem is not None and problem.kind == "depth"
    else:
        assert problem is None
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)


# -- configs --------------------------------------------------------------------------


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_config_nested_too_deep_is_refused_and_starts_nothing(
        stack: HttpStack, depth: int) -> None:
    """Tried: POST /api/sessions with a scripted tool call's arguments ``depth`` levels
    deep (200 once stuck the session, 900 answered 500, 10,000 a parser error)."""
    sid, before = f"s-deep-{depth}-{uuid.uuid4().hex[:6]}", await session_ids(stack.http)
    r = await stack.http.post("/api/sessions", params={"session_id": sid},
                              content=config_text(nested(depth)), headers=JSON)
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["code"] == "too_deep"
    assert error["message"].startswith(
        TOO_DEEP + "$.agent.llm.responses[0].tool_calls[0].arguments.a.a")
    assert error["message"].endswith(f"(the limit: {DEPTH_SETTING})")
    await assert_never_started(stack, sid, before)


@pytest.mark.parametrize(("number", "why"), [
    ("1e400", "1e400 is beyond the range of a double (it would be read as infinity)"),
    ("-1e400", "-1e400 is beyond the range of a double (it would be read as -infinity)"),
    ("1e-400", "1e-400 is too small for a double (it would be read as 0)"),
    ("NaN", "NaN is not a JSON number"),
    ("Infinity", "Infinity is not a JSON number"),
    ("-Infinity", "-Infinity is not a JSON number"),
])
async def test_a_number_json_cannot_carry_is_refused_with_its_field(
        stack: HttpStack, number: str, why: str) -> None:
    """Tried: a config whose tool arguments hold ``number`` (``1e400`` was accepted and
    reached the tool as null)."""
    sid, before = f"s-num-{uuid.uuid4().hex[:8]}", await session_ids(stack.http)
    r = await stack.http.post("/api/sessions", params={"session_id": sid},
                              content=config_text('{"n": ' + number + "}"), headers=JSON)
    assert r.status_code == 422, r.text
    assert error_of(r) == {"code": "invalid_number", "message": (
        "a number JSON cannot carry at $.agent.llm.responses[0].tool_calls[0].arguments.n: "
        f"{why}; send it as a string if it is meant")}
    await assert_never_started(stack, sid, before)


async def test_a_config_within_the_limits_still_starts(stack: HttpStack) -> None:
    """Tried: arguments exactly as deep as the limit allows, and numbers a double holds."""
    body = config_text('{"n": 1.5e300, "m": -2E-300, "i": ' + "9" * 400 + ', "d": '
                       + nested(DEFAULT_MAX_DEPTH - 8) + "}")
    r = await stack.http.post("/api/sessions", content=body, headers=JSON)
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    done = await session_until(stack.http, sid, lambda s: s["status"] == "succeeded",
                               consistency="live")
    assert done["llm_calls"] == 2


# -- replies and messages -------------------------------------------------------------


async def test_replies_nested_too_deep_are_refused_and_change_nothing(
        stack: HttpStack) -> None:
    """Tried: POST /reply with `values` 200, 900 and 10,000 levels deep to a session
    that waits for a confirm; then the right reply, which the session still takes."""
    r = await stack.http.post("/api/sessions", json=confirm_body())
    sid = r.json()["session_id"]
    waited = await session_until(stack.http, sid, waiting("confirm"), consistency="live")
    rid, before = waited["pending"]["request_id"], await live(stack.http, sid)
    for depth in DEPTHS:
        body = '{"request_id": "' + rid + '", "approve": true, "values": ' + nested(
            depth - 1) + "}"
        r = await stack.http.post(f"/api/sessions/{sid}/reply", content=body, headers=JSON)
        assert r.status_code == 422, (depth, r.text)
        assert error_of(r)["code"] == "too_deep"
        assert error_of(r)["message"].startswith(TOO_DEEP + "$.values.a.a")
        assert await live(stack.http, sid) == before
    r = await stack.http.post(f"/api/sessions/{sid}/reply",
                              json={"request_id": rid, "approve": True})
    assert r.status_code == 202, r.text
    await session_until(stack.http, sid, lambda s: s["status"] == "succeeded",
                        consistency="live")


async def test_messages_and_ends_nested_too_deep_are_refused_and_change_nothing(
        stack: HttpStack) -> None:
    """Tried: POST /messages and /end with a field 200, 900 and 10,000 levels deep to a
    session that waits for a message; then a message, which the session still takes."""
    r = await stack.http.post("/api/sessions", json=chat_body())
    sid = r.json()["session_id"]
    await session_until(stack.http, sid, waiting("message"), consistency="live")
    before = await live(stack.http, sid)
    for depth in DEPTHS:
        for path, body in (("messages", '{"text": "hi", "by": ' + nested(depth - 1) + "}"),
                           ("end", '{"reason": ' + nested(depth - 1) + "}")):
            r = await stack.http.post(f"/api/sessions/{sid}/{path}", content=body,
                                      headers=JSON)
            assert r.status_code == 422, (path, depth, r.text)
            assert error_of(r)["code"] == "too_deep", (path, depth)
            assert await live(stack.http, sid) == before
    r = await stack.http.post(f"/api/sessions/{sid}/messages", json={"text": "bye"})
    assert r.status_code == 202, r.text
    await session_until(stack.http, sid, lambda s: s["status"] == "succeeded",
                        consistency="live")


# -- straight through Temporal ---------------------------------------------------------


def raw_json(text: str) -> RawValue:
    """``text`` as the payload itself (no client-side encoding, which would recurse)."""
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=text.encode()))


async def test_a_deep_reply_sent_straight_to_temporal_is_refused_not_stuck(
        stack: HttpStack) -> None:
    """Tried: the `reply` update and the `submit_reply` signal sent to Temporal itself,
    past the API, with `values` 150 levels deep (a worker decodes it, history could not
    carry it further) and 900 (a worker cannot decode it). Each update is refused, each
    signal dropped; the session still takes the right reply after them."""
    r = await stack.http.post("/api/sessions", json=confirm_body())
    sid = r.json()["session_id"]
    waited = await session_until(stack.http, sid, waiting("confirm"), consistency="live")
    rid, before = waited["pending"]["request_id"], await live(stack.http, sid)
    handle = stack.client.get_workflow_handle(sid)
    assert MAX_DEPTH_CEILING < 150  # past what the workflow itself takes
    for depth in (150, 900):
        text = '{"request_id": "' + rid + '", "approve": true, "values": ' + nested(
            depth) + "}"
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("reply", raw_json(text))
        await handle.signal("submit_reply", raw_json(text))
    r = await stack.http.post(f"/api/sessions/{sid}/reply",
                              json={"request_id": rid, "approve": True})
    assert r.status_code == 202, r.text  # the signals took nothing: the request still waited
    after = await session_until(stack.http, sid, lambda s: s["status"] == "succeeded",
                                consistency="live")
    assert after["replies"] == before["replies"] + 1

    async def refusals() -> list[dict]:
        r = await stack.http.get(f"/api/sessions/{sid}/log")
        lines = [json.loads(x) for x in r.text.splitlines()] if r.status_code == 200 else []
        return [e["payload"] for e in lines if e["type"] == "interaction.reply.refused"]
    # The signal the workflow could decode is refused on the record; the other, which
    # no worker can decode, is dropped by the SDK before the workflow sees it.
    (refused,) = await eventually(refusals, bool, what="the refusal in the log")
    assert refused["signal"] == "submit_reply" and refused["request_id"] == rid
    assert refused["reason"].startswith(
        f"malformed signal: values: Value error, nesting deeper than {MAX_DEPTH_CEILING} "
        "levels at $.values.a.a")


# -- the model ------------------------------------------------------------------------


async def test_model_arguments_nested_too_deep_go_back_to_the_model(
        stack: HttpStack, fake_openai: FakeOpenAIServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tried: a model answering with tool-call arguments 250 levels deep (it stuck the
    session). The call is a mistake the model is told of, the model is asked again, and
    the session ends normally."""
    monkeypatch.setenv(KEY_ENV, "sk-limits")
    fake_openai.expected_key = "sk-limits"
    deep = nested(250)
    fake_openai.reply_tool_calls([tool_call("c1", "write_note", deep)])
    fake_openai.reply_text("Sorry; done.")
    r = await stack.http.post("/api/sessions", json={
        "mode": "auto", "initial_message": "go", "agent": {"llm": {
            "provider": "openai", "base_url": fake_openai.base_url, "model": "fake-model",
            "api_key_env": KEY_ENV}}})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    done = await session_until(stack.http, sid, lambda s: s["status"] in (
        "succeeded", "failed"), consistency="live")
    assert done["status"] == "succeeded", done["failure_reason"]
    assert done["llm_calls"] == 2  # asked again after the mistake
    told = {m["tool_call_id"]: m["content"] for m in fake_openai.requests[-1].body["messages"]
            if m["role"] == "tool"}
    assert (f"the arguments of write_note are refused: {TOO_DEEP}$.a.a") in told["c1"]
    (mistake,) = done["contracts"]
    assert mistake["current_status"] == "failed"
    assert mistake["error_message"].startswith(
        f"the arguments of write_note are refused: {TOO_DEEP}$.a.a")


# -- the command line ---------------------------------------------------------------


@pytest.mark.parametrize(("values", "said"), [
    (nested(10_000), f"--values: nesting deeper than {MAX_DEPTH_CEILING} levels at "
                     "$.values.a.a"),
    ('{"n": 1e400}', "--values: a number JSON cannot carry at $.values.n: 1e400 is beyond"),
])
async def test_the_cli_refuses_values_past_the_limits_before_sending(
        stack: HttpStack, values: str, said: str) -> None:
    """Tried: `hitlflow session reply --values` with 10,000 levels (Python's parser
    raised RecursionError) and with 1e400 (sent on as Infinity). The command says why
    and exits 2; the waiting session is unchanged."""
    r = await stack.http.post("/api/sessions", json=confirm_body())
    sid = r.json()["session_id"]
    await session_until(stack.http, sid, waiting("confirm"), consistency="live")
    before = await live(stack.http, sid)
    env = {"HITLFLOW_API_URL": stack.url, "COLUMNS": "400", "NO_COLOR": "1",
           "HITLFLOW_API_PORT": None, "HITLFLOW_DATA_DIR": None,
           "HITLFLOW_API_TOKEN": TOKEN}
    result = await asyncio.to_thread(CliRunner().invoke, cli, [
        "session", "reply", sid, "--approve", "--values", values], env=env)
    assert result.exit_code == 2, (result.output, result.exception)
    assert said in " ".join(result.output.split())
    assert await live(stack.http, sid) == before


async def test_the_cli_refuses_a_config_file_past_the_limits_before_sending(
        stack: HttpStack, tmp_path) -> None:
    """Tried: `hitlflow session start FILE` with a config 10,000 levels deep (Python's
    parser raised RecursionError, a traceback). The command says why and exits 2;
    no session starts."""
    path = tmp_path / "deep.json"
    path.write_text('{"agent": ' + nested(10_000) + "}")
    sid, before = f"s-deep-cli-{uuid.uuid4().hex[:6]}", await session_ids(stack.http)
    env = {"HITLFLOW_API_URL": stack.url, "COLUMNS": "400", "NO_COLOR": "1",
           "HITLFLOW_API_PORT": None, "HITLFLOW_DATA_DIR": None,
           "HITLFLOW_API_TOKEN": TOKEN}
    result = await asyncio.to_thread(CliRunner().invoke, cli, [
        "session", "start", str(path), "--id", sid], env=env)
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"nesting deeper than {MAX_DEPTH_CEILING} levels at $.agent.a" in " ".join(
        result.output.split())
    await assert_never_started(stack, sid, before)


# -- size -------------------------------------------------------------------------------


async def test_inputs_that_grow_past_the_size_limit_are_refused(stack: HttpStack) -> None:
    """Tried: a 1 MB config of 80,000 bare tool calls (4 MB once the defaults are filled
    in: Temporal refused it, a 503) and a 1 MB reply of 250,000 `1e5` (2.2 MB as
    `100000.0`: the update was taken and the session stuck). Both are 422 `too_large`
    naming the limit; nothing starts, the waiting session is unchanged."""
    calls = ",".join(['{"tool":"x"}'] * 80_000)
    sid, before = f"s-big-{uuid.uuid4().hex[:8]}", await session_ids(stack.http)
    body = config_text("{}").replace('{"tool_calls":[', '{"tool_calls":[' + calls + ",", 1)
    r = await stack.http.post("/api/sessions", params={"session_id": sid}, content=body,
                              headers=JSON)
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["code"] == "too_large"
    assert error["message"].startswith("the session config is ")
    assert error["message"].endswith(" bytes as the session's history holds it, over the "
                                      f"limit of {1024 * 1024} bytes (the limit: "
                                      f"{SIZE_SETTING})")
    await assert_never_started(stack, sid, before)

    r = await stack.http.post("/api/sessions", json=confirm_body())
    sid = r.json()["session_id"]
    waited = await session_until(stack.http, sid, waiting("confirm"), consistency="live")
    rid, before_reply = waited["pending"]["request_id"], await live(stack.http, sid)
    body = ('{"request_id": "' + rid + '", "approve": true, "values": {"v": ['
            + ",".join(["1e5"] * 250_000) + "]}}")
    r = await stack.http.post(f"/api/sessions/{sid}/reply", content=body, headers=JSON)
    assert r.status_code == 422, r.text
    assert error_of(r)["code"] == "too_large"
    assert error_of(r)["message"].startswith("the request is ")
    assert await live(stack.http, sid) == before_reply
    r = await stack.http.post(f"/api/sessions/{sid}/reply",
                              json={"request_id": rid, "approve": True})
    assert r.status_code == 202, r.text


async def test_inputs_just_within_the_size_limit_run_to_the_end(stack: HttpStack) -> None:
    """Tried: a config and a reply each just under the size limit. Both are taken and
    the session runs to its end (the limit leaves room for what history adds)."""
    big = "x" * (1000 * 1024)
    body = confirm_body()
    body["initial_message"] = big
    r = await stack.http.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    waited = await session_until(stack.http, sid, waiting("confirm"), consistency="live")
    r = await stack.http.post(f"/api/sessions/{sid}/reply", json={
        "request_id": waited["pending"]["request_id"], "approve": True, "values": {"v": big}})
    assert r.status_code == 202, r.text
    await session_until(stack.http, sid, lambda s: s["status"] == "succeeded",
                        consistency="live")
