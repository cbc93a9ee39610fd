"""The MCP tool activities: list a session's tools, call one tool.

They are thin on purpose: the pool owns the live sessions (one per server,
shared by every activity in the worker) and the mapping of MCP results.
Transport failures propagate as exceptions; the workflow's retry policy,
chosen by the tool's safety class, decides whether a call may run again.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import activity

from activities.mcp_pool import McpClientPool
from workflows.io import ListToolsInput, ToolCallInput, ToolCallResult, ToolCatalog


class McpToolActivities:
    def __init__(self, pool: McpClientPool) -> None:
        self.pool = pool

    @activity.defn(name="list_tools")
    async def list_tools(self, input: ListToolsInput) -> ToolCatalog:
        """Every tool of every configured server, classified by safety."""
        tools = []
        for server in input.servers:
            tools.extend(await self.pool.list_tools(server))
        return ToolCatalog(tools=tools)

    @activity.defn(name="call_tool")
    async def call_tool(self, input: ToolCallInput) -> ToolCallResult:
        """One tool call; the idempotency key travels to the server in ``_meta``.

        It heartbeats while the call runs, so a worker lost mid-call is noticed
        within the heartbeat timeout instead of the whole start-to-close timeout.
        """
        beat = asyncio.create_task(_heartbeat_until_cancelled(input.execution_id))
        try:
            return await self.pool.call_tool(
                input.server, input.tool, input.arguments, input.idempotency_key
            )
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat


HEARTBEAT_EVERY_S = 2.0


async def _heartbeat_until_cancelled(detail: str) -> None:
    while True:
        activity.heartbeat(detail)
        await asyncio.sleep(HEARTBEAT_EVERY_S)
