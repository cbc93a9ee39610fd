"""One live MCP client session per configured server, shared by every tool activity.

Starting an MCP server and listing its tools takes 1.5-2.5 s, so the worker
never spawns a server per call: the first call for a server starts it, later
calls (from any number of concurrent activities) reuse the same session.

The SDK's transports are anyio context managers that must be entered and
exited by the same task, so each session is owned by one long-lived task
(``_Connection``) that enters ``mcp.Client`` and waits to be told to stop;
calls from other tasks only exchange messages over its streams.

Failures, and what the caller sees:
- the server answers with an error (an ``isError`` result, or a JSON-RPC
  error such as an unknown tool on servers that raise): a ``ToolCallResult``
  with ``is_error=True`` and the server's message;
- the connection is lost (the server process died, the HTTP endpoint went
  away, the server could not be started): the session is dropped and
  ``McpTransportError`` is raised. Whether a call that was under way took
  effect is unknown, so the workflow decides by safety class whether to retry.
  The call that discovers a dead server raises; the next call starts the
  server again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import ClientRequestContext
from mcp.client.session import ListRootsFnT

from workflows.config import McpServerConfig
from workflows.io import ToolCallResult, ToolSpec
from workflows.safety import ToolAnnotations, classify

log = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY = "hitlflow/idempotency_key"


class McpTransportError(Exception):
    """The connection to an MCP server failed; a call under way has an unknown outcome."""


def _is_transport_failure(exc: MCPError) -> bool:
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


def _target(server: McpServerConfig) -> StdioServerParameters | str:
    if server.url is not None:
        return server.url  # the SDK's streamable-HTTP client
    assert server.command is not None
    return StdioServerParameters(
        command=server.command[0], args=server.command[1:], env=server.env or None, cwd=server.cwd
    )


class _Connection:
    """One client session, owned by a dedicated task that enters and exits its contexts."""

    def __init__(self, server: McpServerConfig) -> None:
        self.server = server
        self.dead = False
        self._started: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        # Mark a start failure as seen even when every waiter was cancelled meanwhile.
        self._started.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(self._own(), name=f"mcp-session:{server.name}")

    async def _own(self) -> None:
        name = self.server.name
        try:
            client = Client(
                _target(self.server), list_roots_callback=roots_callback(self.server), cache=None
            )
            async with client:
                self._started.set_result(client)
                await self._stop.wait()
        except Exception as exc:
            if not self._started.done():
                why = f"MCP server {name!r} could not be started: {_describe(exc)}"
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


class McpClientPool:
    """Live MCP client sessions keyed by server name and connection config.

    Use it from one event loop (the worker's) and ``aclose()`` it on shutdown.
    """

    def __init__(self) -> None:
        self._connections: dict[str, _Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Every owner task still running, also those of dropped sessions still closing.
        self._owners: set[asyncio.Task[None]] = set()
        # How many sessions were started (tests assert reuse with it).
        self.sessions_started = 0

    @staticmethod
    def _key(server: McpServerConfig) -> str:
        # Overrides change how tools are classified, not the session.
        return server.model_dump_json(exclude={"tool_overrides"})

    async def _connection(self, server: McpServerConfig) -> tuple[_Connection, Client]:
        key = self._key(server)
        async with self._locks.setdefault(key, asyncio.Lock()):
            conn = self._connections.get(key)
            if conn is None or conn.dead:
                if conn is not None:
                    await self._drop(key, conn)
                conn = _Connection(server)
                self._connections[key] = conn
                self._owners.add(conn.task)
                conn.task.add_done_callback(self._owners.discard)
                self.sessions_started += 1
        try:
            return conn, await conn.client()
        except McpTransportError:
            await self._drop(key, conn)
            raise

    async def _drop(self, key: str, conn: _Connection) -> None:
        if self._connections.get(key) is conn:
            del self._connections[key]
        await conn.close()

    async def _request(self, server: McpServerConfig, what: str, send: Callable[[Client], Any]):
        """Run ``send`` on the server's session; a lost connection drops the session.

        Raises ``McpTransportError`` for a lost connection; re-raises any other
        ``MCPError`` (an error answer from a live server) and the SDK's
        ``RuntimeError`` for a result it rejects (e.g. structured content that
        does not match the tool's output schema) while the session is alive.
        """
        conn, client = await self._connection(server)
        try:
            return await send(client)
        except MCPError as exc:
            if not _is_transport_failure(exc):
                raise
            failure: Exception = exc
        except RuntimeError as exc:
            if not conn.dead:
                raise
            failure = exc
        except Exception as exc:
            failure = exc
        await self._drop(self._key(server), conn)
        raise McpTransportError(
            f"MCP server {server.name!r}: connection lost during {what} ({_describe(failure)}); "
            "whether it took effect is unknown; the next call connects again "
            "(starting a stdio server anew)"
        ) from failure

    async def list_tools(self, server: McpServerConfig) -> list[ToolSpec]:
        """All tools of ``server`` (every page), classified with its overrides."""

        async def every_page(client: Client) -> list[types.Tool]:
            tools: list[types.Tool] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return tools

        tools = await self._request(server, "tools/list", every_page)
        return [_tool_spec(server, tool) for tool in tools]

    async def call_tool(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        idempotency_key: str | None = None,
    ) -> ToolCallResult:
        """Call ``tool``; the idempotency key travels in ``_meta`` for servers that honour it."""
        meta = (
            cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: idempotency_key})
            if idempotency_key is not None
            else None
        )
        try:
            result = await self._request(
                server, repr(tool), lambda client: client.call_tool(tool, arguments, meta=meta)
            )
        except MCPError as exc:  # e.g. an unknown tool on servers that raise for it
            return ToolCallResult(is_error=True, text=exc.message, error_message=exc.message)
        except RuntimeError as exc:  # the tool ran, but its result was rejected
            message = f"invalid result from {tool!r}: {exc}"
            return ToolCallResult(is_error=True, text=message, error_message=message)
        return _tool_result(result)

    async def aclose(self) -> None:
        """Stop every session; each owner task exits its own contexts (and reaps its server)."""
        for conn in self._connections.values():
            conn.stop()
        self._connections.clear()
        await asyncio.gather(*self._owners, return_exceptions=True)

    async def __aenter__(self) -> McpClientPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _describe(exc: BaseException) -> str:
    """A one-line cause; a group of one (anyio task groups wrap everything) is unwrapped."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _tool_spec(server: McpServerConfig, tool: types.Tool) -> ToolSpec:
    a = tool.annotations
    annotations = ToolAnnotations(
        read_only_hint=a.read_only_hint if a else None,
        destructive_hint=a.destructive_hint if a else None,
        idempotent_hint=a.idempotent_hint if a else None,
    )
    return ToolSpec(
        server=server.name,
        name=tool.name,
        description=tool.description or "",
        input_schema=tool.input_schema,
        annotations=annotations,
        safety=classify(annotations, server.tool_overrides.get(tool.name)),
    )


def _tool_result(result: types.CallToolResult) -> ToolCallResult:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content]")
    text = "\n".join(parts)
    structured = result.structured_content if isinstance(result.structured_content, dict) else None
    if result.is_error:
        return ToolCallResult(
            is_error=True, text=text, structured=structured, error_message=text or "tool failed"
        )
    return ToolCallResult(text=text, structured=structured)
