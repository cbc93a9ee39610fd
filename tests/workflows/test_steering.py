"""Steering while the agent works (issue 27, part 1): a message's ``if_busy``.

The pure rules (``workflows/steering.py``), then real sessions on the dev server: a
real OpenAI-compatible server that holds its answer (``tests/fakes/openai_server.py``)
and a real MCP server that records every call and can hold one
(``tests/fakes/recording_mcp_server.py``)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)

from api.http.errors import retry_not_ready
from observation.exporter import export_session
from observation.schemas import load
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.mcp_servers import received, recording_server
from tests.support.sessions import (
    QUICK,
    forget_worker,
    running_worker,
    start_session,
    until,
    worker_process,
)
from workflows.config import SessionConfig
from workflows.messages import MessageInput, ReplyInput
from workflows.people import TEMPORAL_ACCESS
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus
from workflows.steering import (
    PARTIAL_LIMIT,
    CutText,
    InFlight,
    cut_text_message,
    steer,
    with_partial,
)

S = SessionStatus
KEY_ENV = "TEST_STEER_LLM_KEY"
LLM = InFlight(kind="llm_call", id="s-llm-0")
TEMPORAL = TEMPORAL_ACCESS.name


def tool(safety: str) -> InFlight:
    return InFlight(kind="tool_call", id="s.e1", tool="t", server="srv", safety=safety)


# -- the rules ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [S.QUEUED, S.WAITING_USER])
@pytest.mark.parametrize("if_busy", ["enqueue", "interrupt", "reject"])
def test_while_the_agent_does_not_work_every_message_is_a_plain_one(status, if_busy):
    assert steer(if_busy, status, plan=False, in_flight=None).action == "enqueue"
    assert steer(if_busy, status, plan=True, in_flight=None).action == "enqueue"


@pytest.mark.parametrize("in_flight", [None, LLM, tool("read_only"), tool("reversible")])
def test_while_it_works_reject_is_a_409_session_busy_and_interrupt_cuts(in_flight):
    refused = steer("reject", S.RUNNING, plan=False, in_flight=in_flight)
    assert refused.action == "refuse"
    assert refused.problem is not None and refused.problem.details == {"code": "session_busy"}
    assert steer("interrupt", S.RUNNING, plan=False, in_flight=in_flight).action == "cut"
    assert steer("enqueue", S.RUNNING, plan=False, in_flight=in_flight).action == "enqueue"


@pytest.mark.parametrize("safety", ["irreversible", "at_most_once"])
def test_a_once_only_call_in_flight_is_never_cut_the_interrupt_waits_for_it(safety):
    assert not tool(safety).cuttable()
    assert steer("interrupt", S.RUNNING, plan=False, in_flight=tool(safety)).action == \
        "after_call"


def test_a_plan_that_runs_is_interruptible_unless_started_before_plan_interrupts():
    d = steer("interrupt", S.RUNNING, plan=True, in_flight=None)
    assert d.action == "refuse" and d.problem is not None
    assert d.problem.details == {"code": "not_interruptible"}
    # sessions of Behaviour.PLAN_INTERRUPT: as the agent's (tests/workflows/test_plan_interrupt.py)
    assert steer("interrupt", S.RUNNING, plan=True, in_flight=None,
                 plan_interrupt=True).action == "cut"
    assert steer("reject", S.RUNNING, plan=True, in_flight=None).problem.details == {
        "code": "session_busy"}


def test_if_busy_is_left_out_of_the_json_while_default_and_validated():
    assert MessageInput(text="hi").model_dump(mode="json") == {
        "text": "hi", "by": "user", "principal": None}
    assert MessageInput(text="hi", if_busy="interrupt").model_dump()["if_busy"] == "interrupt"
    with pytest.raises(ValidationError):
        MessageInput(text="hi", if_busy="now")  # type: ignore[arg-type]


# -- real sessions ----------------------------------------------------------------------


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAIServer) -> str:
    monkeypatch.setenv(KEY_ENV, "sk-fake-steer")
    fake_openai.expected_key = "sk-fake-steer"
    return "sk-fake-steer"


def openai_config(server: FakeOpenAIServer, mode: str = "auto") -> SessionConfig:
    return SessionConfig.model_validate({
        "mode": mode, "initial_message": "write a long essay",
        "agent": {"llm": {"provider": "openai", "base_url": server.base_url,
                          "model": "fake-model", "api_key_env": KEY_ENV}}})


async def until_requests(server: FakeOpenAIServer, n: int, limit_s: float = 30) -> None:
    """Wait (bounded) until the model server received ``n`` requests."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while len(server.requests) < n:
        assert loop.time() < deadline, f"{len(server.requests)} requests, not {n}"
        await asyncio.sleep(0.02)


EVENT_SCHEMA = jsonschema.Draft202012Validator(load("event"),
                                               format_checker=jsonschema.FormatChecker())


async def log_of(client, h: WorkflowHandle, tmp_path: Path) -> list[dict]:
    """The session's exported log; every line validates against the event schema."""
    await export_session(client, h.id, tmp_path / "runs")
    text = (tmp_path / "runs" / h.id / "events.ndjson").read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    for line in lines:
        EVENT_SCHEMA.validate(line)
    return lines


def said_by_user(request) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


async def test_interrupt_cuts_a_slow_llm_call_and_starts_a_new_turn_reject_changes_nothing(
        dev_worker, task_queue, fake_openai, api_key, tmp_path):
    held = threading.Event()
    fake_openai.reply_text("Once upon a time, long ago", pieces=["Once upon", " a time, long ago"],
                           hold=held, hold_after=1)  # streams a piece, then waits
    fake_openai.reply_text("A haiku instead.")
    client = dev_worker.client
    try:
        h = await start_session(client, openai_config(fake_openai), task_queue,
                                search_attributes=False)
        await until_requests(fake_openai, 1)  # the slow call is under way
        before = await h.query("state", result_type=SessionState)
        assert before.status is S.RUNNING
        # reject while it works: a 409 (session_busy) and nothing changes
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await h.execute_update("send_message", MessageInput(text="no", if_busy="reject"))
        assert refused.value.cause.details[0]["code"] == "session_busy"
        after = await h.query("state", result_type=SessionState)
        assert after.model_dump() == before.model_dump()  # log and state unchanged
        # interrupt: the call is cut, the new turn starts with the message
        await h.execute_update("send_message", MessageInput(
            text="stop: write a haiku", if_busy="interrupt"))
        result = await h.result()
    finally:
        held.set()
    assert result.status is S.SUCCEEDED
    assert len(fake_openai.requests) == 2
    assert said_by_user(fake_openai.requests[1]) == ["write a long essay", "stop: write a haiku"]
    log = await log_of(client, h, tmp_path)
    order = [(e["type"], e["payload"].get("call_id") or e["payload"].get("text"))
             for e in log if e["type"] in ("message", "LLM_CALL_STARTED", "LLM_CALL_FINISHED",
                                           "TURN_INTERRUPTED", "text")]
    cut_id = f"{h.id}-llm-0"
    assert order == [
        ("message", "write a long essay"), ("TURN_INTERRUPTED", None),
        ("message", "stop: write a haiku"), ("LLM_CALL_STARTED", f"{cut_id}-after-cut1"),
        ("LLM_CALL_FINISHED", f"{cut_id}-after-cut1"), ("text", f"{cut_id}-after-cut1")]
    (cut,) = [e["payload"] for e in log if e["type"] == "TURN_INTERRUPTED"]
    # the text the call had streamed, kept and marked as cut: in the log and for the model
    assert cut["cut"] == {"kind": "llm_call", "id": cut_id, "partial_text": "Once upon",
                          "partial_chars": 9}
    assert [(m["role"], m["content"]) for m in fake_openai.requests[1].body["messages"]
            if m["role"] == "assistant"] == [
        ("assistant", f"Once upon\n\n[cut: interrupted by {TEMPORAL} before the answer was "
                      "finished]")]
    assert (cut["reason"], cut["by"], cut["turn"]) == ("interrupt", TEMPORAL, 2)
    assert cut["principal"] == TEMPORAL_ACCESS.ref().model_dump(mode="json")  # who
    # the cut call is in the log by its id, once: it never started nor finished there
    assert not any(e["payload"].get("call_id") == cut_id for e in log)


def delete_and_put(folder: Path) -> SessionConfig:
    return SessionConfig.model_validate({"mode": "auto", "initial_message": "clean up", "agent": {
        "llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "delete", "arguments": {"name": "a"}},
                            {"tool": "put", "arguments": {"name": "b"}}]},
            {"text": "understood", "end": True}]},
        "tools": [recording_server(folder).model_dump()]}})


async def test_interrupt_waits_for_an_irreversible_call_then_ends_the_turn(
        dev_worker, task_queue, tmp_path):
    (tmp_path / "hold-call").touch()
    client = dev_worker.client
    h = await start_session(client, delete_and_put(tmp_path), task_queue,
                            search_attributes=False)
    snap = await until(h, lambda s: s.status == S.WAITING_USER)
    await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                               approve=True))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not received(tmp_path):  # the server holds the irreversible call
        assert loop.time() < deadline
        await asyncio.sleep(0.02)
    await h.execute_update("send_message", MessageInput(text="stop there", if_busy="interrupt"))
    state = await h.query("state", result_type=SessionState)
    (deleting,) = [c for c in state.contracts if c.action_detail.get("tool") == "delete"]
    assert deleting.status.value == "running"  # never cut: still under way
    (tmp_path / "release").touch()
    result = await h.result()
    assert result.status is S.SUCCEEDED
    assert [c.get("tool", "delete") for c in received(tmp_path)] == ["delete"]  # put never ran
    log = await log_of(client, h, tmp_path)
    kinds = [e["type"] for e in log]
    finished = next(i for i, e in enumerate(log) if e["type"] == "WORK_ITEM_FINISHED"
                    and e["payload"]["work_item_id"] == deleting.execution_id)
    assert log[finished]["payload"]["outcome"] == "completed"  # its result is recorded...
    cut_at = kinds.index("TURN_INTERRUPTED")
    assert finished < cut_at < kinds.index("message", cut_at)  # ...then the new turn
    cut = log[cut_at]["payload"]
    assert cut["cut"] is None
    assert cut["waited_for"] == {"kind": "tool_call", "id": deleting.execution_id,
                                 "tool": "delete", "server": "recorder",
                                 "safety": "irreversible"}
    assert [d["tool"] for d in cut["dropped"]] == ["put"]
    final = await h.query("state", result_type=SessionState)
    told = [m.content for m in final.conversation if m.role == "tool"]
    assert told[-1] == f"Not run: {TEMPORAL} interrupted the turn before this call ran."


async def test_interrupt_while_waiting_is_a_plain_message_even_after_continue_as_new(
        dev_worker, task_queue, fake_openai, api_key, tmp_path):
    client = dev_worker.client
    fake_openai.reply_text("Hello.")
    h = await start_session(client, openai_config(fake_openai, mode="interactive"),
                            task_queue, search_attributes=False,
                            continue_as_new_after_events=10)
    for n in range(1, 6):  # plain messages until the session has continued as new
        await until(h, lambda s, n=n: s.status == S.WAITING_USER and s.llm_calls == n)
        if (await h.query("state", result_type=SessionState)).continued_runs:
            break
        fake_openai.reply_text("Hello.")
        said = MessageInput(text=f"hi {n}")  # (sent again if it raced continue-as-new)
        await retry_not_ready(lambda m=said: h.execute_update("send_message", m))
    state = await h.query("state", result_type=SessionState)
    assert state.continued_runs >= 1  # the wait for a message is in a continued run
    calls = state.llm_calls
    held = threading.Event()
    fake_openai.reply_text("A story", pieces=["A st", "ory"], hold=held, hold_after=1)
    fake_openai.reply_text("Short one.")
    try:
        # idle: interrupt behaves as a plain message (it starts the next turn)
        await retry_not_ready(lambda: h.execute_update("send_message", MessageInput(
            text="tell a story", if_busy="interrupt")))
        await until_requests(fake_openai, calls + 1)
        await h.execute_update("send_message", MessageInput(text="shorter",
                                                            if_busy="interrupt"))
        await until(h, lambda s: s.status == S.WAITING_USER and s.llm_calls == calls + 1)
    finally:
        held.set()
    assert said_by_user(fake_openai.requests[-1])[-2:] == ["tell a story", "shorter"]
    log = await log_of(client, h, tmp_path)
    cuts = [e["payload"] for e in log if e["type"] == "TURN_INTERRUPTED"]
    assert [c["cut"]["kind"] for c in cuts] == ["llm_call"]  # only the busy one cut


async def test_interrupt_cuts_a_reversible_tool_call(dev_worker, task_queue, tmp_path):
    (tmp_path / "hold-call").touch()
    config = SessionConfig.model_validate({"mode": "auto", "initial_message": "put", "agent": {
        "llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "put", "arguments": {"name": "b"}}]},
            {"text": "as you wish", "end": True}]},
        "tools": [recording_server(tmp_path).model_dump()]}})
    client = dev_worker.client
    h = await start_session(client, config, task_queue, search_attributes=False)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not received(tmp_path):  # the server holds the reversible call
            assert loop.time() < deadline
            await asyncio.sleep(0.02)
        await h.execute_update("send_message", MessageInput(text="never mind",
                                                            if_busy="interrupt"))
        result = await h.result()
    finally:
        (tmp_path / "release").touch()
    assert result.status is S.SUCCEEDED
    state = await h.query("state", result_type=SessionState)
    (put,) = [c for c in state.contracts if c.action_detail.get("tool") == "put"]
    assert (put.status.value, put.reason_code) == ("cancelled", "interrupted")
    assert len(received(tmp_path)) == 1  # cut, and not sent again
    assert put.error_message == (
        f"interrupted by {TEMPORAL} while the call was under way; cut")
    log = await log_of(client, h, tmp_path)
    (cut,) = [e["payload"] for e in log if e["type"] == "TURN_INTERRUPTED"]
    assert cut["cut"] == {"kind": "tool_call", "id": put.execution_id, "tool": "put",
                          "server": "recorder", "safety": "reversible"}
    kinds = [e["type"] for e in log]
    assert kinds.index("TURN_INTERRUPTED") < kinds.index("message", kinds.index(
        "TURN_INTERRUPTED"))  # then the new turn, with the message
    told = [m for m in state.conversation if m.role == "tool"]
    assert len(told) == 1 and told[0].tool_call_id == put.action_detail["tool_call_id"]


def test_a_cut_calls_text_is_kept_clipped_and_marked():
    long = CutText(text="x" * (PARTIAL_LIMIT + 10), chars=PARTIAL_LIMIT + 10)
    kept = with_partial(LLM, long)
    assert kept.partial_text == "x" * PARTIAL_LIMIT and kept.partial_chars == PARTIAL_LIMIT + 10
    assert with_partial(LLM, None) == LLM == with_partial(LLM, CutText())
    assert cut_text_message("Once", "ann") == (
        "Once\n\n[cut: interrupted by ann before the answer was finished]")


async def test_an_interrupt_after_a_worker_kill_loses_nothing_and_runs_nothing_twice(
        dev_env, fake_openai, api_key, tmp_path):
    """The worker that runs the slow call is killed; the interrupt is taken by the next
    worker: the lost call is cut (its text is not known there), the new turn runs once."""
    held = threading.Event()
    fake_openai.reply_text("Once upon a time", pieces=["Once upon", " a time"], hold=held,
                           hold_after=1)
    fake_openai.reply_text("Short, then.")
    client = dev_env.client
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    try:
        with worker_process(client, task_queue):
            h = await start_session(client, openai_config(fake_openai), task_queue,
                                    search_attributes=False, timing=QUICK)
            await until_requests(fake_openai, 1)
        await forget_worker(client, h)  # killed (SIGKILL) with the call under way
        update = asyncio.create_task(h.execute_update(
            "send_message", MessageInput(text="make it short", if_busy="interrupt")))
        async with running_worker(client, task_queue):
            await update
            result = await h.result()
    finally:
        held.set()
    assert result.status is S.SUCCEEDED
    assert len(fake_openai.requests) == 2  # the held call, then the new turn's: once each
    assert said_by_user(fake_openai.requests[1]) == ["write a long essay", "make it short"]
    log = await log_of(client, h, tmp_path)
    (cut,) = [e["payload"] for e in log if e["type"] == "TURN_INTERRUPTED"]
    assert cut["cut"] == {"kind": "llm_call", "id": f"{h.id}-llm-0"}  # no text known here
    assert [e["payload"]["text"] for e in log if e["type"] == "text"] == ["Short, then."]


async def test_a_cancel_right_after_an_interrupt_still_cancels_the_session(
        dev_worker, task_queue, fake_openai, api_key):
    held = threading.Event()
    for text in ("Once upon a time", "A haiku"):
        fake_openai.reply_text(text, pieces=[text[:4], text[4:]], hold=held, hold_after=1)
    client = dev_worker.client
    try:
        h = await start_session(client, openai_config(fake_openai), task_queue,
                                search_attributes=False)
        await until_requests(fake_openai, 1)
        await h.execute_update("send_message", MessageInput(text="a haiku",
                                                            if_busy="interrupt"))
        await h.cancel()  # the session's cancel wins over the turn's cut, in any order
        with pytest.raises(WorkflowFailureError):
            await h.result()
    finally:
        held.set()
    desc = await h.describe()
    assert desc.status == WorkflowExecutionStatus.CANCELED
    assert len(fake_openai.requests) <= 2
