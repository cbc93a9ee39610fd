"""Live MCP client sessions shared by every tool activity, bounded in number and in time.

Starting an MCP server and listing its tools takes 1.5-2.5 s, so the worker
never spawns a server per call: the first call for a server starts it, later
calls (from any number of concurrent activities) reuse the same session.

A waiting session must cost almost nothing, and a server config that differs
per session (e.g. ``--dir <the session's folder>``) is a distinct server, so:
- a server with no call in flight and none for ``idle_s`` is closed (a reaper
  task sweeps; ``close_idle`` is the sweep); the next call starts it again;
- at most ``max_servers`` run at once, counting those still closing (for stdio:
  child processes). When full, the least recently used idle server is closed
  to make room; when every one is busy, the call waits up to ``slot_wait_s``
  for one to go idle, then fails with ``McpPoolFullError``. Waiting comes
  first because at-most-once tools are never retried by the workflow.

The pool never sends a call twice: a call is counted in flight before any
await, and idle close and eviction only take sessions with none in flight, so
a call either keeps the live session or starts a fresh one.

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
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import mcp_types as types
from mcp import Client, MCPError

from activities.mcp.connection import (
    WATCH,
    Connection,
    McpTransportError,
    SendWatch,
    describe,
    is_transport_failure,
    log,
    program,
    roots_callback,
)
from activities.mcp.results import tool_result, tool_spec
from workflows.config import McpServerConfig
from workflows.io import ToolCallResult, ToolSpec

__all__ = ["McpClientPool", "McpNotSentError", "McpPoolFullError", "McpTransportError",
           "roots_callback"]

IDEMPOTENCY_META_KEY = "hitlflow/idempotency_key"
DEFAULT_IDLE_S = 300.0
DEFAULT_MAX_SERVERS = 32
DEFAULT_SLOT_WAIT_S = 60.0


class McpPoolFullError(McpTransportError):
    """Every server the pool may run stayed busy; the call was not sent (safe to retry)."""


class McpNotSentError(McpTransportError):
    """The connection was lost before the call's request was handed to the transport's
    write: the call was not sent (safe to retry under the same key)."""


class McpClientPool:
    """Live MCP client sessions keyed by server connection config.

    Use it from one event loop (the worker's) and ``aclose()`` it on shutdown.
    ``clock`` (monotonic seconds) decides idleness; tests inject their own.
    """

    def __init__(
        self,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        max_servers: int = DEFAULT_MAX_SERVERS,
        slot_wait_s: float = DEFAULT_SLOT_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_servers < 1:
            raise ValueError(f"max_servers must be at least 1, got {max_servers}")
        if idle_s < 0 or slot_wait_s < 0:
            raise ValueError(f"idle_s and slot_wait_s must be >= 0, got {idle_s}, {slot_wait_s}")
        self.idle_s = idle_s
        self.max_servers = max_servers
        self.slot_wait_s = slot_wait_s
        self._clock = clock
        self._connections: dict[str, Connection] = {}
        # Every owner task still running, also those of dropped sessions still closing:
        # the cap counts these, so it bounds processes, not just map entries.
        self._owners: set[asyncio.Task[None]] = set()
        # Set (and replaced) whenever a session goes idle or an owner task ends.
        self._changed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        # Counters (tests assert reuse, closes and evictions with them).
        self.sessions_started = 0
        self.closed_idle = 0
        self.evicted = 0
        self.waiting = 0  # calls waiting for a slot right now

    @property
    def live_servers(self) -> int:
        """Sessions running or still closing (for stdio servers: child processes)."""
        return len(self._owners)

    @staticmethod
    def _key(server: McpServerConfig) -> str:
        # Overrides change how tools are classified, not the session; the order of
        # ``env`` changes nothing either (docs/session-config.md, "Tool servers").
        return json.dumps(server.model_dump(mode="json", exclude={"tool_overrides"}),
                          sort_keys=True)

    async def _acquire(self, server: McpServerConfig) -> Connection:
        """A session for ``server`` with this call counted in flight.

        Between looking a session up and counting the call there is no await,
        which is what makes idle close and eviction safe against this call.
        """
        self._ensure_reaper()
        key = self._key(server)
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            conn = self._connections.get(key)
            if conn is not None and conn.dead:
                del self._connections[key]
                conn.stop()  # its owner task frees the slot when it ends
                conn = None
            if conn is None and len(self._owners) < self.max_servers:
                conn = self._start(key, server)
            if conn is not None:
                conn.in_flight += 1
                conn.last_used = self._clock()
                return conn
            # A server already closing will free a slot: wait for it rather than evict another.
            victim = None if self._closing() else self._lru_idle()
            if victim is not None:
                self._remove(victim)
                self.evicted += 1
                log.info(
                    "MCP server %r evicted: the pool is at its cap of %d live servers "
                    "(HITLFLOW_MCP_MAX_SERVERS)", victim.server.name, self.max_servers,
                )
                await victim.close()  # its process is gone before the new one starts
                continue
            deadline = loop.time() + self.slot_wait_s if deadline is None else deadline
            if loop.time() >= deadline:
                raise self._full(server)
            changed = self._changed
            self.waiting += 1
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), deadline - loop.time())
            finally:
                self.waiting -= 1

    def _start(self, key: str, server: McpServerConfig) -> Connection:
        conn = Connection(server, self._clock())
        self._connections[key] = conn
        self._owners.add(conn.task)
        conn.task.add_done_callback(self._owner_done)
        self.sessions_started += 1
        log.info(
            "MCP server %r starting (%s); %d of at most %d live",
            server.name, program(server), len(self._owners), self.max_servers,
        )
        return conn

    def _owner_done(self, task: asyncio.Task[None]) -> None:
        self._owners.discard(task)
        self._notify()

    def _release(self, conn: Connection) -> None:
        conn.in_flight -= 1
        conn.last_used = self._clock()
        if conn.in_flight == 0:
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _closing(self) -> int:
        return len(self._owners - {c.task for c in self._connections.values()})

    def _lru_idle(self) -> Connection | None:
        idle = [c for c in self._connections.values() if c.in_flight == 0 and not c.dead]
        return min(idle, key=lambda c: c.last_used, default=None)

    def _remove(self, conn: Connection) -> None:
        """Take ``conn`` out of the pool and tell it to stop (no await: see ``_acquire``)."""
        key = self._key(conn.server)
        if self._connections.get(key) is conn:
            del self._connections[key]
        conn.stop()

    async def _drop(self, conn: Connection) -> None:
        self._remove(conn)
        await conn.close()

    def _full(self, server: McpServerConfig) -> McpPoolFullError:
        log.warning(
            "MCP pool full: %d servers, all busy for %g s; %r not called",
            self.max_servers, self.slot_wait_s, server.name,
        )
        return McpPoolFullError(
            f"MCP server {server.name!r} was not called: this worker already runs its cap of "
            f"{self.max_servers} MCP servers and all stayed busy for {self.slot_wait_s:g} s. "
            "The call was not sent, so it is safe to retry; raise the cap with "
            "HITLFLOW_MCP_MAX_SERVERS"
        )

    async def close_idle(self, now: float | None = None) -> int:
        """Close every server with no call in flight and none for ``idle_s``; return how many.

        The reaper calls it; tests call it with a ``now`` of their choosing. The
        servers are chosen and told to stop before the first await, so a call
        starting meanwhile either was counted first (its server stays) or
        finds it gone (and starts a fresh one); it returns once they have exited.
        """
        now = self._clock() if now is None else now
        idle = [
            c for c in self._connections.values()
            if c.in_flight == 0 and not c.dead and now - c.last_used >= self.idle_s
        ]
        for conn in idle:
            self._remove(conn)
            self.closed_idle += 1
            log.info(
                "MCP server %r closed after %.0f s idle", conn.server.name, now - conn.last_used
            )
        await asyncio.gather(*(c.close() for c in idle))
        return len(idle)

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap(), name="mcp-pool-reaper")

    async def _reap(self) -> None:
        # A server closes between idle_s and idle_s + sweep after its last call;
        # with no server left the reaper ends (the next call starts it again).
        sweep = min(max(self.idle_s / 4, 1.0), 30.0)
        while self._connections:
            await asyncio.sleep(sweep)
            try:
                await self.close_idle()
            except Exception:  # a failed sweep must not end idle closing for good
                log.exception("closing idle MCP servers failed")

    async def _request(self, server: McpServerConfig, what: str, send: Callable[[Client], Any],
                       on_send: Callable[[], Awaitable[None]] | None = None,
                       watch: SendWatch | None = None):
        """Run ``send`` on the server's session; a lost connection drops the session.

        Raises ``McpTransportError`` for a lost connection; re-raises any other
        ``MCPError`` (an error answer from a live server) and the SDK's
        ``RuntimeError`` for a result it rejects (e.g. structured content that
        does not match the tool's output schema) while the session is alive.
        """
        conn = await self._acquire(server)
        try:
            return await self._send(conn, what, send, on_send, watch)
        finally:
            self._release(conn)

    async def _send(self, conn: Connection, what: str, send: Callable[[Client], Any],
                    on_send: Callable[[], Awaitable[None]] | None = None,
                    watch: SendWatch | None = None):
        try:
            client = await conn.client()
        except McpTransportError:
            await self._drop(conn)
            raise
        if on_send is not None:  # the last step before the request leaves
            await on_send()
        if conn.dead and watch is not None:  # lost, or closed, while the mark was stored
            await self._drop(conn)
            raise McpNotSentError(
                f"MCP server {conn.server.name!r}: the connection was closed before the "
                f"{what} request was written; it was not sent")
        token = WATCH.set(watch)
        try:
            return await send(client)
        except MCPError as exc:
            if not is_transport_failure(exc):
                raise
            failure: Exception = exc
        except RuntimeError as exc:
            if not conn.dead:
                raise
            failure = exc
        except Exception as exc:
            failure = exc
        finally:
            WATCH.reset(token)
        await self._drop(conn)
        if watch is not None and not watch.written:
            raise McpNotSentError(
                f"MCP server {conn.server.name!r}: connection lost before the {what} request "
                f"was written ({describe(failure)}); it was not sent"
            ) from failure
        raise McpTransportError(
            f"MCP server {conn.server.name!r}: connection lost during {what} "
            f"({describe(failure)}); whether it took effect is unknown; the next call "
            "connects again (starting a stdio server anew)"
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
        return [tool_spec(server, tool) for tool in tools]

    async def call_tool(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        idempotency_key: str | None = None,
        on_send: Callable[[], Awaitable[None]] | None = None,
        on_written: Callable[[], Awaitable[None]] | None = None,
    ) -> ToolCallResult:
        """Call ``tool``; the idempotency key travels in ``_meta`` for servers that honour it.

        ``on_send`` is awaited once the server is connected, just before the request
        is written (the activity stores its "sending" mark there); an error from it,
        or anything before it, means the request was not sent. ``on_written`` is
        awaited once the ``tools/call`` request was handed to the transport's write
        (the "sent" mark). Given either, a connection lost before that write raises
        ``McpNotSentError``: the request never left.
        """
        watch = SendWatch(on_written) if on_send or on_written else None
        meta = (
            cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: idempotency_key})
            if idempotency_key is not None
            else None
        )
        try:
            result = await self._request(
                server, repr(tool), lambda client: client.call_tool(tool, arguments, meta=meta),
                on_send, watch,
            )
        except MCPError as exc:  # e.g. an unknown tool on servers that raise for it
            return ToolCallResult(is_error=True, text=exc.message, error_message=exc.message)
        except RuntimeError as exc:  # the tool ran, but its result was rejected
            message = f"invalid result from {tool!r}: {exc}"
            return ToolCallResult(is_error=True, text=message, error_message=message)
        return tool_result(result)

    async def aclose(self) -> None:
        """Stop the reaper and every session; each owner task exits its own contexts
        (and reaps its server)."""
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        for conn in self._connections.values():
            conn.stop()
        self._connections.clear()
        await asyncio.gather(*list(self._owners), return_exceptions=True)

    async def __aenter__(self) -> McpClientPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
