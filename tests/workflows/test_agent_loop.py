"""The agent loop as a real model provider needs it, end to end on the time-skipping
server: rate limits and provider errors (the OpenAI-compatible fake server on
127.0.0.1), model mistakes that go back to the model, tool results as data.

Waits are durable timers: the time-skipping server fires them as soon as the test
waits for the result, so nothing here sleeps and nothing measures time; the
delays are read from history (the activity failure's ``next_retry_delay``, the
timer's ``start_to_fire_timeout``) and from the log.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle

from observation.exporter import export_session, is_sse
from tests.fakes.openai_server import FakeOpenAIServer, tool_call
from tests.support.sessions import start_session
from workflows.config import SessionConfig
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

KEY_ENV = "TEST_LOOP_LLM_KEY"


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAIServer) -> str:
    monkeypatch.setenv(KEY_ENV, "sk-fake-loop")
    fake_openai.expected_key = "sk-fake-loop"
    return "sk-fake-loop"


def openai_config(server: FakeOpenAIServer, tools: list[dict] | None = None,
                  llm: dict | None = None, **agent) -> SessionConfig:
    return SessionConfig.model_validate({
        "mode": "auto", "initial_message": "go",
        "agent": {"llm": {"provider": "openai", "base_url": server.base_url,
                          "model": "fake-model", "api_key_env": KEY_ENV, **(llm or {})},
                  "tools": tools or [], **agent}})


async def start(client, config: SessionConfig, task_queue: str) -> WorkflowHandle:
    return await start_session(client, config, task_queue, search_attributes=False)


async def history_of(h: WorkflowHandle) -> list:
    return (await h.fetch_history()).events


async def log_of(client, h: WorkflowHandle, tmp_path: Path) -> list[dict]:
    await export_session(client, h.id, tmp_path / "runs")
    text = (tmp_path / "runs" / h.id / "events.ndjson").read_text()
    return [json.loads(line) for line in text.splitlines()]


async def current_details(h: WorkflowHandle) -> str:
    meta = await h.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def until_details(h: WorkflowHandle, prefix: str, limit_s: float = 30) -> str:
    """Query the workflow's current details until they start with ``prefix`` (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not (details := await current_details(h)).startswith(prefix):
        assert loop.time() < deadline, f"details never said {prefix!r}; last: {details!r}"
        await asyncio.sleep(0.02)
    return details


# -- rate limits and provider errors -------------------------------------------------


async def test_a_429_waits_the_providers_delay_says_so_then_succeeds(
        ts_worker, task_queue, fake_openai, api_key, tmp_path):
    fake_openai.reply_error(429, "Rate limit reached, retry after 20 s",
                            type_="rate_limit_error", headers={"retry-after": "20"})
    fake_openai.reply_text("done at last")
    client = ts_worker.client
    h = await start(client, openai_config(fake_openai), task_queue)
    # Time stands still until the test waits for the result: the wait is visible.
    details = await until_details(h, "Waiting for the model provider")
    assert details.startswith("Waiting for the model provider (rate limited, retry at ")
    assert "in 20 s): HTTP 429: Rate limit reached" in details
    result = await h.result()
    assert result.status is SessionStatus.SUCCEEDED
    assert len(fake_openai.requests) == 2
    assert await current_details(h) == "Session succeeded"

    events = await history_of(h)
    failed = [e.activity_task_failed_event_attributes.failure for e in events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert len(failed) == 1
    info = failed[0].application_failure_info
    assert info.next_retry_delay.ToTimedelta() == timedelta(seconds=20)
    assert not info.non_retryable
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
              for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert timers == [timedelta(seconds=20)]

    log = await log_of(client, h, tmp_path)
    (wait,) = [e["payload"] for e in log if e["type"] == "provider.waiting"]
    assert (wait["reason"], wait["http_status"], wait["delay_s"]) == ("rate_limited", 429, 20)
    assert wait["retry_at"].endswith("Z") and wait["message"] == details
    assert is_sse("provider.waiting")  # the SSE stream sends it as the log has it
    calls = [e["payload"]["call_id"] for e in log if e["type"].startswith("LLM_CALL_")]
    assert calls == [f"{h.id}-llm-0", f"{h.id}-llm-0", f"{h.id}-llm-0-retry1",
                     f"{h.id}-llm-0-retry1"]


async def test_a_400_is_not_retried_and_says_why(ts_worker, task_queue, fake_openai, api_key):
    fake_openai.reply_error(400, "messages: unknown role 'robot'",
                            type_="invalid_request_error", headers={"retry-after": "1"})
    h = await start(ts_worker.client, openai_config(fake_openai), task_queue)
    result = await h.result()
    assert result.status is SessionStatus.FAILED
    assert result.failure_reason == ("LLM call failed: HTTP 400: messages: unknown role "
                                     "'robot' (not retried: a retry cannot help)")
    assert len(fake_openai.requests) == 1
    events = await history_of(h)
    assert not any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events)


async def test_rate_limits_past_the_budget_fail_the_session(
        ts_worker, task_queue, fake_openai, api_key):
    for _ in range(4):  # no Retry-After: a backoff of 1, 2, 4 s against a 3 s budget
        fake_openai.reply_error(429, "slow down", type_="rate_limit_error")
    cfg = openai_config(fake_openai, llm={"rate_limit_budget_minutes": 0.05})
    h = await start(ts_worker.client, cfg, task_queue)
    result = await h.result()
    assert result.status is SessionStatus.FAILED
    assert result.failure_reason.startswith(
        "LLM call failed: rate limited by the model provider for longer than the budget "
        "of 0.05 min (waited 0.05 min, it asks for 4 s more): HTTP 429: slow down")
    assert len(fake_openai.requests) == 3
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
              for e in await history_of(h)
              if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert timers == [timedelta(seconds=1), timedelta(seconds=2)]


async def test_server_errors_are_retried_error_retries_times(
        ts_worker, task_queue, fake_openai, api_key):
    for _ in range(3):
        fake_openai.reply_error(502, "bad gateway")
    cfg = openai_config(fake_openai, llm={"error_retries": 2})
    h = await start(ts_worker.client, cfg, task_queue)
    result = await h.result()
    assert result.status is SessionStatus.FAILED
    assert result.failure_reason == ("LLM call failed: HTTP 502: bad gateway (tried 3 times; "
                                     "error_retries is 2)")
    assert len(fake_openai.requests) == 3


# -- model mistakes go back to the model ----------------------------------------------


async def test_malformed_arguments_go_back_to_the_model_which_corrects_them(
        ts_worker, task_queue, fake_openai, api_key, notes, notes_dir, tmp_path):
    fake_openai.reply_tool_calls([tool_call("c1", "notes__write_note", '{"name": "a", ')])
    fake_openai.reply_tool_calls([tool_call("c2", "notes__write_note", {"name": "a"})])
    fake_openai.reply_tool_calls([tool_call("c3", "notes__write_note",
                                            {"name": "a", "content": "milk"})])
    fake_openai.reply_text("Saved.")
    client = ts_worker.client
    h = await start(client, openai_config(fake_openai, tools=[notes]), task_queue)
    result = await h.result()
    assert result.status is SessionStatus.SUCCEEDED
    assert (notes_dir / "a.note").read_text() == "milk"

    # What the model was told, as the answers to its calls.
    told = {m["tool_call_id"]: m["content"] for m in fake_openai.requests[-1].body["messages"]
            if m["role"] == "tool"}
    assert told["c1"].startswith("[FAILED] Call tool write_note() on notes")
    assert "the arguments of notes__write_note are not valid JSON" in told["c1"]
    assert "do not fit its input schema: 'content' is a required property" in told["c2"]
    assert json.loads(told["c3"])["name"] == "a"  # the server's own answer, as data
    # The model's malformed call is echoed as an object (some providers refuse other).
    sent = fake_openai.requests[1].body["messages"]
    assert sent[2]["tool_calls"][0]["function"]["arguments"] == "{}"

    log = await log_of(client, h, tmp_path)
    finished = [e["payload"] for e in log if e["type"] == "WORK_ITEM_FINISHED"]
    assert [p["outcome"] for p in finished] == ["failed", "failed", "completed"]
    assert "not valid JSON" in finished[0]["error_message"]
    queued = [e["payload"] for e in log if e["type"] == "WORK_ITEM_QUEUED"]
    assert queued[0]["action_detail"]["mistake"] is True
    assert queued[0]["action_detail"]["raw_arguments"] == '{"name": "a", '
    state = await h.query("state", result_type=SessionState)
    assert state.consecutive_mistakes == 0  # the good answer reset the count


async def test_one_mistake_past_the_bound_fails_the_session(ts_worker, task_queue):
    cfg = SessionConfig.model_validate({
        "mode": "auto", "initial_message": "go",
        "agent": {"max_consecutive_mistakes": 1, "llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "write_note", "raw_arguments": "{"}]},
            {"tool_calls": [{"tool": "launch", "server": "rockets"}]},
            {"text": "never reached", "end": True}]}}})
    h = await start(ts_worker.client, cfg, task_queue)
    result = await h.result()
    assert result.status is SessionStatus.FAILED
    assert result.failure_reason == (
        "the model made mistakes in 2 answers in a row (max_consecutive_mistakes is 1); the "
        "last: there is no tool 'launch' (there is no tool server 'rockets'). Call one of the "
        "tools you were given.")
    state = await h.query("state", result_type=SessionState)
    assert [(c.status.value, c.action_detail["tool"]) for c in state.contracts] == [
        ("failed", "write_note"), ("failed", "launch")]
    assert state.llm_calls == 2


# -- tool results as data ---------------------------------------------------------------


async def test_a_large_tool_result_is_cut_for_the_model_and_kept_whole_in_the_log(
        ts_worker, task_queue, notes, notes_dir, tmp_path):
    (notes_dir / "big.note").write_text("x" * 5000)
    cfg = SessionConfig.model_validate({
        "mode": "auto", "initial_message": "go",
        "agent": {"context": {"max_tool_result_chars": 1000}, "tools": [notes],
                  "llm": {"provider": "scripted", "responses": [
                      {"tool_calls": [{"tool": "read_note", "arguments": {"name": "big"}}]},
                      {"text": "read it", "end": True}]}}})
    client = ts_worker.client
    h = await start(client, cfg, task_queue)
    assert (await h.result()).status is SessionStatus.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    (told,) = [m.content for m in state.conversation if m.role == "tool"]
    assert told == "x" * 1000 + ("\n[truncated: the first 1000 of 5000 characters are shown; "
                                 "the whole result is kept in the session's log]")
    await export_session(client, h.id, tmp_path / "runs")
    (artifact,) = (tmp_path / "runs" / h.id / "artifacts" / "tool").iterdir()
    kept = json.loads(artifact.read_text())
    assert kept["content"] == [{"type": "text", "text": "x" * 5000}]
