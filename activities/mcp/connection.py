"""One live MCP client session and the transport errors it raises.

The SDK's transports are anyio context managers that must be entered and
exited by the same task, so each session is owned by one long-lived task
(``_Connection``) that enters ``mcp.Client`` and waits to be told to stop;
calls from other tasks only exchange messages over its streams. For a stdio
server the owner task is also what starts and reaps the child process.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import ClientRequestContext
from mcp.client.session import ListRootsFnT
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from activities.command_env import command_env
from workflows.config import McpServerConfig

log = logging.getLogger("hitlflow.mcp")


class McpTransportError(Exception):
    """The connection to an MCP server failed; a call under way has an unknown outcome."""


def is_transport_failure(exc: MCPError) -> bool:
    # The SDK reports a closed connection (EOF, broken pipe, a lost HTTP stream)
    # as CONNECTION_CLOSED. A server that uses -32000 for its own errors is then
    # treated as "outcome unknown" too: conservative, never double-runs a call.
    return exc.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT)


def roots_callback(server: McpServerConfig) -> ListRootsFnT | None:
    """The ``list_roots`` answer for ``server``, or None to not declare the capability.

    Declaring roots matters: the filesystem server replaces its command-line
    folders with the client's roots, so only a configured list is announced.
    """
    if server.roots is None:
        return None
    base = Path(server.cwd) if server.cwd else Path.cwd()
    roots = [types.Root(uri=(base / r).resolve().as_uri(), name=r) for r in server.roots]

    async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=roots)

    return list_roots


def describe(exc: BaseException) -> str:
    """A one-line cause; a group of one (anyio task groups wrap everything) is unwrapped."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def program(server: McpServerConfig) -> str:
    """What to name in logs: the URL or the program, never its arguments or env (secrets)."""
    if server.url is not None:
        return server.url.split("?", 1)[0]
    assert server.command is not None
    return Path(server.command[0]).name


def _target(server: McpServerConfig) -> StdioServerParameters | str:
    if server.url is not None:
        return server.url  # the SDK's streamable-HTTP client
    assert server.command is not None
    # Never the worker's environment: the few every command gets, the variables the
    # config passes by name, then its literal ``env`` (activities.command_env; the SDK
    # adds its own default set, a part of those few).
    return StdioServerParameters(
        command=server.command[0], args=server.command[1:],
        env=command_env(server.pass_env, server.env), cwd=server.cwd,
    )


class SendWatch:
    """Whether this call's ``tools/call`` request was handed to the transport's write.

    ``pool.call_tool`` sets one (``WATCH``) around its request; the watched write
    stream of the connection flips ``written`` as the request goes in (a write
    that starts counts: one interrupted by cancellation may still deliver) and
    back only when the stream refused it without taking it (closed, or nobody
    left to read it). Then it awaits ``on_written``, the activity's "sent" mark.
    """

    def __init__(self, on_written: Callable[[], Awaitable[None]] | None = None) -> None:
        self.written = False
        self._on_written = on_written

    async def wrote(self) -> None:
        if self._on_written is None:
            return
        try:
            await self._on_written()
        except Exception:  # the request left: a lost mark only costs a question
            log.warning("recording that a tool call was sent failed", exc_info=True)


# The watch of the call under way in this task (the SDK writes in the caller's task).
WATCH: contextvars.ContextVar[SendWatch | None] = contextvars.ContextVar(
    "hitlflow_mcp_send_watch", default=None)


def _is_tool_call(item: Any) -> bool:
    message = getattr(item, "message", None)
    return isinstance(message, types.JSONRPCRequest) and message.method == "tools/call"


class _WatchedWrite:
    """The transport's write stream, telling the task's ``SendWatch`` when a
    ``tools/call`` request goes in."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: Any, /) -> None:
        watch = WATCH.get()
        if watch is None or watch.written or not _is_tool_call(item):
            await self._inner.send(item)
            return
        watch.written = True
        try:
            await self._inner.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            watch.written = False  # refused before it was taken: it never left
            raise
        await watch.wrote()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedWrite:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._inner.__aexit__(*exc_info)


class _WatchedTransport:
    """The SDK's transport for ``target``, with its write stream watched."""

    def __init__(self, target: StdioServerParameters | str) -> None:
        self._inner: AbstractAsyncContextManager[Any] = (
            streamable_http_client(target) if isinstance(target, str) else stdio_client(target))

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return read, _WatchedWrite(write)

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._inner.__aexit__(*exc_info)


class Connection:
    """One client session, owned by a dedicated task that enters and exits its contexts.

    ``in_flight`` and ``last_used`` are kept by the pool (calls under way, and the
    pool clock's reading at the last acquire or release) to find idle sessions.
    """

    def __init__(self, server: McpServerConfig, now: float) -> None:
        self.server = server
        self.dead = False
        self.in_flight = 0
        self.last_used = now
        self._started: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        # Mark a start failure as seen even when every waiter was cancelled meanwhile.
        self._started.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(self._own(), name=f"mcp-session:{server.name}")

    async def _own(self) -> None:
        name = self.server.name
        try:
            client = Client(
                _WatchedTransport(_target(self.server)),  # type: ignore[arg-type]
                list_roots_callback=roots_callback(self.server), cache=None,
            )
            async with client:
                self._started.set_result(client)
                await self._stop.wait()
        except Exception as exc:
            if not self._started.done():
                why = f"MCP server {name!r} could not be started: {describe(exc)}"
                self._started.set_exception(McpTransportError(why))
            else:
                log.debug("MCP session %r ended with an error", name, exc_info=True)
        finally:
            self.dead = True
            if not self._started.done():
                why = f"MCP server {name!r} was closed before it started"
                self._started.set_exception(McpTransportError(why))

    async def client(self) -> Client:
        """The connected client; shielded so one cancelled caller does not abort the start."""
        return await asyncio.shield(self._started)

    def stop(self) -> None:
        self.dead = True
        self._stop.set()

    async def close(self) -> None:
        """Stop and wait; shielded: cancelling the waiter must not interrupt the teardown."""
        self.stop()
        await asyncio.shield(asyncio.gather(self.task, return_exceptions=True))
