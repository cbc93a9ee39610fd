"""The MCP tool activities against the real demo notes server over stdio.

One shared pool and server serve the tests that only read or add notes; the
tests about session lifetime (reuse, restart, concurrent start, close) each
start their own pool so their counts are exact.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from temporalio.activity import _Definition
from temporalio.testing import ActivityEnvironment

from activities.command_env import BASE_PREFIXES, BASE_VARS
from activities.mcp.pool import McpClientPool, McpTransportError, roots_callback
from activities.mcp.tools import McpToolActivities
from tests.support.mcp_servers import REPO, executions, gone, notes_server, server_pid
from workflows.config import McpServerConfig
from workflows.io import ListToolsInput, ToolCallInput
from workflows.safety import SafetyClass, ToolAnnotations

# A low-level server that answers an unknown tool with a JSON-RPC error (as
# Python servers may) instead of an isError result.
RAISING_SERVER = """
import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[])

async def call_tool(ctx, params):
    raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")

async def main():
    server = Server("raising", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""

# A server whose one tool says what environment and working directory it was given.
ENV_SERVER = """
import json, os
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("env", log_level="WARNING")

@mcp.tool()
def environment() -> str:
    return json.dumps({"env": dict(os.environ), "cwd": os.getcwd()})

mcp.run("stdio")
"""

# What the shell and Python put in a process's environment by themselves.
RUNTIME_VARS = {"PWD", "SHLVL", "_", "OLDPWD", "LC_CTYPE"}


@pytest.fixture(scope="module")
def notes_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("notes")


@pytest.fixture(scope="module")
async def pool():
    async with McpClientPool() as shared:
        yield shared


@pytest.fixture
async def own_pool():
    async with McpClientPool() as fresh:
        yield fresh


async def test_listing_classifies_from_annotations(pool, notes_dir):
    specs = {t.name: t for t in await pool.list_tools(notes_server(notes_dir))}

    assert {name: t.safety for name, t in specs.items()} == {
        "list_notes": SafetyClass.READ_ONLY,
        "read_note": SafetyClass.READ_ONLY,
        "write_note": SafetyClass.REVERSIBLE,
        "append_note": SafetyClass.AT_MOST_ONCE,
        "delete_note": SafetyClass.IRREVERSIBLE,
    }
    # Absent hints stay None: the spec's defaults are applied by classify(), not here.
    assert specs["list_notes"].annotations == ToolAnnotations(read_only_hint=True)
    assert specs["delete_note"].annotations == ToolAnnotations(
        read_only_hint=False, destructive_hint=True
    )
    assert all(t.server == "notes" for t in specs.values())
    assert specs["write_note"].input_schema["required"] == ["name", "content"]


async def test_override_in_config_wins(pool, notes_dir):
    server = notes_server(notes_dir, tool_overrides={"delete_note": "at_most_once"})
    specs = {t.name: t for t in await pool.list_tools(server)}

    assert specs["delete_note"].safety is SafetyClass.AT_MOST_ONCE
    assert specs["append_note"].safety is SafetyClass.AT_MOST_ONCE
    assert specs["list_notes"].safety is SafetyClass.READ_ONLY


async def test_call_writes_a_file(pool, notes_dir):
    result = await pool.call_tool(
        notes_server(notes_dir), "write_note", {"name": "hello", "content": "hi there"}
    )

    assert not result.is_error
    assert result.structured == {"name": "hello", "size": 8}
    assert (notes_dir / "hello.note").read_text() == "hi there"
    read = await pool.call_tool(notes_server(notes_dir), "read_note", {"name": "hello"})
    assert read.text == "hi there"


async def test_unknown_tool_is_an_error_result_with_the_servers_message(pool, notes_dir):
    result = await pool.call_tool(notes_server(notes_dir), "no_such_tool", {})

    assert result.is_error
    assert result.error_message == "Unknown tool: no_such_tool"


async def test_unknown_tool_raised_by_the_server_is_an_error_result(own_pool):
    server = McpServerConfig(name="raising", command=[sys.executable, "-c", RAISING_SERVER])

    result = await own_pool.call_tool(server, "no_such_tool", {})

    assert result.is_error
    assert result.error_message == "Unknown tool: no_such_tool"
    # An error answer is not a transport failure: the session stays.
    await own_pool.call_tool(server, "again", {})
    assert own_pool.sessions_started == 1


async def test_bad_note_name_is_refused_and_changes_nothing(pool, notes_dir):
    before = sorted(p.name for p in notes_dir.iterdir())
    calls_before = executions(notes_dir)

    result = await pool.call_tool(
        notes_server(notes_dir), "write_note", {"name": "../escape", "content": "x"}, "k-bad"
    )

    assert result.is_error
    assert "invalid note name '../escape'" in result.error_message
    assert "A-Z, a-z, 0-9, '_' and '-'" in result.error_message
    assert sorted(p.name for p in notes_dir.iterdir()) == before
    assert executions(notes_dir) == calls_before
    assert not (notes_dir.parent / "escape").exists()


async def test_same_idempotency_key_executes_once(pool, notes_dir):
    server = notes_server(notes_dir)
    args = {"name": "journal", "text": "one line\n"}

    first = await pool.call_tool(server, "append_note", args, "key-append-1")
    second = await pool.call_tool(server, "append_note", args, "key-append-1")

    assert not first.is_error
    assert second == first
    assert [c["key"] for c in executions(notes_dir)].count("key-append-1") == 1
    assert (notes_dir / "journal.note").read_text() == "one line\n"
    # A new key is a new execution.
    await pool.call_tool(server, "append_note", args, "key-append-2")
    assert (notes_dir / "journal.note").read_text() == "one line\none line\n"


async def test_one_session_serves_every_call_until_aclose(tmp_path):
    """Ten concurrent first calls start one server; twenty more reuse it;
    aclose stops it (no child process left)."""
    pool = McpClientPool()
    server = notes_server(tmp_path)

    results = await asyncio.gather(
        *(
            pool.call_tool(server, "write_note", {"name": f"c{i}", "content": str(i)})
            for i in range(10)
        )
    )
    assert [r.is_error for r in results] == [False] * 10
    pid = server_pid(tmp_path)
    for i in range(20):
        result = await pool.call_tool(server, "read_note", {"name": f"c{i % 10}"})
        assert result.text == str(i % 10)

    assert pool.sessions_started == 1
    assert server_pid(tmp_path) == pid
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted(
        f"c{i}.note" for i in range(10)
    )

    await pool.aclose()
    assert gone(pid)


async def test_dead_server_raises_once_then_restarts(own_pool, tmp_path):
    """The call that finds the server dead raises McpTransportError (its outcome
    is unknown in general); the pool has dropped the session, so the next call
    starts a new server."""
    server = notes_server(tmp_path)
    await own_pool.call_tool(server, "write_note", {"name": "before", "content": "x"})
    old_pid = server_pid(tmp_path)

    os.kill(old_pid, signal.SIGKILL)
    with pytest.raises(McpTransportError, match="connection lost during 'list_notes'"):
        await own_pool.call_tool(server, "list_notes", {})
    assert gone(old_pid)

    result = await own_pool.call_tool(server, "list_notes", {})
    assert result.structured == {"result": ["before"]}
    assert own_pool.sessions_started == 2
    assert server_pid(tmp_path) != old_pid


async def test_server_that_cannot_start_raises_a_clear_error(own_pool, tmp_path):
    server = McpServerConfig(name="broken", command=[str(tmp_path / "no-such-binary")])

    with pytest.raises(McpTransportError, match="'broken' could not be started"):
        await own_pool.list_tools(server)


async def test_a_server_gets_env_over_the_few_variables_and_runs_in_cwd(
        own_pool, tmp_path, monkeypatch):
    """docs/session-config.md "Resolved in the worker's environment": a relative
    command is found against ``cwd``; the server sees the few variables every command
    gets from the worker (activities.command_env), those ``pass_env`` names, and
    ``env`` over them, literally, and nothing else of the worker's environment."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "env_server.py").write_text(ENV_SERVER)
    script = tmp_path / "bin" / "serve"
    script.write_text(f"#!/bin/sh\nexec '{sys.executable}' env_server.py\n")
    script.chmod(0o755)
    monkeypatch.setenv("HITLFLOW_WORKER_ONLY", "secret")
    monkeypatch.setenv("HOME", "/home/from-worker")
    monkeypatch.setenv("PASSED_ON", "by name")
    monkeypatch.setenv("NOT_PASSED", "kept")
    server = McpServerConfig(name="env", command=["bin/serve"], cwd=str(tmp_path),
                             env={"TOOL_TOKEN": "${HITLFLOW_WORKER_ONLY}", "HOME": "/h"},
                             pass_env=["PASSED_ON", "UNSET_ON_THE_WORKER"])

    result = await own_pool.call_tool(server, "environment", {})

    seen = json.loads(result.text)
    assert Path(seen["cwd"]) == tmp_path.resolve()
    env = {k: v for k, v in seen["env"].items() if k not in RUNTIME_VARS}
    assert env == {"PATH": os.environ["PATH"], "HOME": "/h",
                   "TOOL_TOKEN": "${HITLFLOW_WORKER_ONLY}", "PASSED_ON": "by name",
                   **{k: v for k, v in os.environ.items()
                      if (k in BASE_VARS or k.startswith(BASE_PREFIXES))
                      and k not in ("PATH", "HOME", *RUNTIME_VARS)}}


async def test_roots_are_declared_only_when_configured(tmp_path):
    assert roots_callback(notes_server(tmp_path)) is None

    callback = roots_callback(notes_server(tmp_path, roots=[str(tmp_path), "docs"]))
    assert callback is not None
    listed = await callback(None)  # type: ignore[arg-type]
    assert [str(r.uri) for r in listed.roots] == [tmp_path.as_uri(), (REPO / "docs").as_uri()]


async def test_activities_through_the_activity_environment(pool, notes_dir):
    acts = McpToolActivities(pool)
    # The names the workflows call them by (the worker reads the same definition).
    assert _Definition.must_from_callable(acts.list_tools).name == "list_tools"
    assert _Definition.must_from_callable(acts.call_tool).name == "call_tool"
    env = ActivityEnvironment()
    server = notes_server(notes_dir)

    catalog = await env.run(acts.list_tools, ListToolsInput(servers=[server]))
    assert {t.name for t in catalog.tools} >= {"list_notes", "delete_note"}

    result = await env.run(
        acts.call_tool,
        ToolCallInput(
            session_id="s1",
            execution_id="e1",
            server=server,
            tool="write_note",
            arguments={"name": "via_activity", "content": "ok"},
            idempotency_key="s1/e1",
        ),
    )
    assert not result.is_error
    assert (notes_dir / "via_activity.note").read_text() == "ok"
    assert {"tool": "write_note", "key": "s1/e1"}.items() <= executions(notes_dir)[-1].items()
