"""The sent marks of a once-only call: "sending" stored before its request is written,
"sent" (``written``) once the request was handed to the transport's write, and a
connection lost between the two is "not sent", never "maybe".

A real MCP server that records every call it receives (tests/fakes/recording_mcp_server.py),
the real pool and the real SDK streams; the activity runs in Temporal's ActivityEnvironment,
whose heartbeats are the marks."""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.mcp.connection import WATCH, SendWatch, _WatchedWrite
from activities.mcp.pool import McpClientPool, McpNotSentError, McpTransportError
from activities.mcp.tools import McpToolActivities
from tests.support.mcp_servers import received, recording_server
from workflows.io import ToolCallInput
from workflows.outcome import failed_call_outcome


def request(method: str) -> SessionMessage:
    return SessionMessage(message=types.JSONRPCRequest(
        jsonrpc="2.0", id=1, method=method, params={"name": "delete"}))


# -- the watched write stream ---------------------------------------------------------


async def test_only_a_tool_call_written_under_a_watch_counts_as_sent():
    send, receive = anyio.create_memory_object_stream[SessionMessage](10)
    said: list[str] = []

    async def wrote() -> None:
        said.append(f"written after {receive.statistics().current_buffer_used} queued")

    watch = SendWatch(wrote)
    stream = _WatchedWrite(send)
    await stream.send(request("tools/call"))  # no watch in this task: not this call's
    token = WATCH.set(watch)
    try:
        await stream.send(request("tools/list"))
        assert not watch.written and said == []
        await stream.send(request("tools/call"))
        await stream.send(request("tools/call"))  # a resend (the SDK's): marked once
    finally:
        WATCH.reset(token)
    assert watch.written
    assert said == ["written after 3 queued"]  # the mark comes after the hand-over
    assert [receive.receive_nowait().message.method for _ in range(4)] == [
        "tools/call", "tools/list", "tools/call", "tools/call"]


@pytest.mark.parametrize("close", ["receiver", "sender"])
async def test_a_write_the_transport_refused_is_not_sent(close):
    send, receive = anyio.create_memory_object_stream[SessionMessage](10)
    await (receive if close == "receiver" else send).aclose()
    said: list[str] = []

    async def wrote() -> None:
        said.append("written")

    watch = SendWatch(wrote)
    token = WATCH.set(watch)
    try:
        with pytest.raises((anyio.BrokenResourceError, anyio.ClosedResourceError)):
            await _WatchedWrite(send).send(request("tools/call"))
    finally:
        WATCH.reset(token)
    assert not watch.written and said == []


# -- the pool ---------------------------------------------------------------------------


async def test_a_call_is_marked_sending_then_written_and_arrives_once(tmp_path):
    marks: list[str] = []

    async def sending() -> None:
        marks.append("sending")
        assert received(tmp_path) == []  # stored before the request left

    async def written() -> None:
        marks.append("written")

    async with McpClientPool() as pool:
        server = recording_server(tmp_path)
        await pool.list_tools(server)  # not a tools/call: no mark
        result = await pool.call_tool(server, "delete", {"name": "x"}, "k1",
                                      on_send=sending, on_written=written)
    assert not result.is_error
    assert marks == ["sending", "written"]
    assert received(tmp_path) == [{"name": "x", "key": "k1"}]


async def test_a_connection_closed_after_the_sending_mark_is_not_sent(tmp_path):
    async with McpClientPool() as pool:
        server = recording_server(tmp_path)
        await pool.list_tools(server)

        async def sending() -> None:
            await pool.aclose()  # the server goes while the mark is being stored

        with pytest.raises(McpNotSentError, match="it was not sent"):
            await pool.call_tool(server, "delete", {"name": "x"}, "k1", on_send=sending)
    assert received(tmp_path) == []


async def test_a_connection_lost_after_the_request_arrived_may_have_run(tmp_path):
    (tmp_path / "crash-call").touch()
    async with McpClientPool() as pool:
        with pytest.raises(McpTransportError, match="unknown") as caught:
            await pool.call_tool(recording_server(tmp_path), "delete", {"name": "x"}, "k1",
                                 on_send=_nothing, on_written=_nothing)
    assert not isinstance(caught.value, McpNotSentError)
    assert received(tmp_path) == [{"name": "x", "key": "k1"}]


async def _nothing() -> None:
    return None


# -- the activity: its heartbeats are the marks ------------------------------------------


def call(tmp_path) -> ToolCallInput:
    return ToolCallInput(session_id="s", execution_id="s.e", server=recording_server(tmp_path),
                         tool="delete", arguments={"name": "x"}, idempotency_key="s/e",
                         attempt_id="s.e/2.1")


async def test_the_activity_stores_sending_then_written(tmp_path):
    env = ActivityEnvironment()
    beats: list[dict] = []
    env.on_heartbeat = lambda *details: beats.append(details[0])
    async with McpClientPool() as pool:
        result = await env.run(McpToolActivities(pool).call_tool, call(tmp_path))
    assert not result.is_error
    marks = [(b["sent"], b.get("written")) for b in beats]
    assert marks[:2] == [(None, None), ("s.e/2.1", None)]
    assert ("s.e/2.1", True) in marks[2:]
    assert received(tmp_path) == [{"name": "x", "key": "s/e"}]


async def test_the_activity_says_not_sent_when_the_server_went_after_the_sending_mark(
        tmp_path):
    """Before the "sent" mark moved after the write, this call counted as maybe sent
    (the person was asked about a call the tool never saw)."""
    env = ActivityEnvironment()
    beats: list[dict] = []
    async with McpClientPool() as pool:
        await pool.list_tools(recording_server(tmp_path))  # the server is up

        def on_heartbeat(*details) -> None:
            beats.append(details[0])
            if details[0]["sent"]:  # the sending mark: the server stops right now
                for conn in list(pool._connections.values()):
                    conn.stop()

        env.on_heartbeat = on_heartbeat
        with pytest.raises(ApplicationError) as caught:
            await env.run(McpToolActivities(pool).call_tool, call(tmp_path))
    assert caught.value.type == "ToolCallNotSent"
    assert "was not sent" in str(caught.value)
    assert beats[-1] == {"execution_id": "s.e", "attempt_id": "s.e/2.1", "sent": "s.e/2.1"}
    assert received(tmp_path) == []
    # What the workflow makes of it: the same call again, under the same key.
    assert failed_call_outcome(error_type=caught.value.type, heartbeat_details=None,
                               attempt_id="s.e/2.1") == "not_sent"


async def test_the_activity_lets_a_call_that_left_fail_as_maybe_sent(tmp_path):
    (tmp_path / "crash-call").touch()
    env = ActivityEnvironment()
    beats: list[dict] = []
    env.on_heartbeat = lambda *details: beats.append(details[0])
    async with McpClientPool() as pool:
        with pytest.raises(McpTransportError) as caught:
            await env.run(McpToolActivities(pool).call_tool, call(tmp_path))
    assert not isinstance(caught.value, McpNotSentError)
    assert beats[-1]["written"] is True
    assert received(tmp_path) == [{"name": "x", "key": "s/e"}]
    assert failed_call_outcome(error_type=type(caught.value).__name__,
                               heartbeat_details=None, attempt_id="s.e/2.1") == "maybe_sent"
    assert failed_call_outcome(error_type=None, heartbeat_details=beats[-1:],
                               attempt_id="s.e/2.1") == "maybe_sent"  # had the worker gone
