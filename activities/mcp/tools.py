"""The MCP tool activities: list a session's tools, call one tool.

They are thin on purpose: the pool owns the live sessions (one per server,
shared by every activity in the worker) and the mapping of MCP results.
Transport failures propagate as exceptions; the workflow's retry policy,
chosen by the tool's safety class, decides whether a call may run again.

A call that names its attempt (``attempt_id``) records two durable marks, each a
heartbeat that Temporal has stored (``workflows.outcome``): "sending" just before
its MCP request is written (from then on it may have left), and "sent" once the
request was handed to the transport's write. A worker lost after the first reads
as "maybe sent"; a failure the activity sees itself before the write (the
connection lost after the mark, say) is a ``ToolCallNotSent`` error, as is any
failure before the first mark: the call did not run, and is safe to try again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from temporalio import activity
from temporalio.client import AsyncActivityCancelledError
from temporalio.exceptions import ApplicationError

from activities.mcp.pool import McpClientPool, McpNotSentError, McpPoolFullError
from workflows.io import ListToolsInput, ToolCallInput, ToolCallResult, ToolCatalog
from workflows.outcome import ToolCallBeat

log = logging.getLogger("hitlflow.tools")


class McpToolActivities:
    def __init__(self, pool: McpClientPool) -> None:
        self.pool = pool

    @activity.defn(name="list_tools")
    async def list_tools(self, input: ListToolsInput) -> ToolCatalog:
        """Every tool of every configured server, classified by safety.

        It heartbeats from its start, the servers' start-up included (a stdio server
        that takes seconds to start is alive, not lost), so a worker lost while it
        lists is noticed within the workflow's heartbeat timeout
        (``workflows.activity_calls.LIST_TOOLS_HEARTBEAT``), not the whole
        start-to-close timeout.
        """
        beat = asyncio.create_task(_heartbeat_until_cancelled("list_tools"))
        try:
            tools = []
            for server in input.servers:
                tools.extend(await self.pool.list_tools(server))
            return ToolCatalog(tools=tools)
        finally:
            await _stop(beat)

    @activity.defn(name="call_tool")
    async def call_tool(self, input: ToolCallInput) -> ToolCallResult:
        """One tool call; the idempotency key travels to the server in ``_meta``.

        It heartbeats while the call runs, so a worker lost mid-call is noticed
        within the heartbeat timeout instead of the whole start-to-close timeout.
        """
        if input.attempt_id is None:  # a workflow from before the sent marks
            beat = asyncio.create_task(_heartbeat_until_cancelled(input.execution_id))
            try:
                return await self.pool.call_tool(
                    input.server, input.tool, input.arguments, input.idempotency_key
                )
            finally:
                await _stop(beat)
        beats = SentMarks(input.execution_id, input.attempt_id)
        beat: asyncio.Task | None = None
        try:
            await beats.beat()
            beat = asyncio.create_task(beats.every(HEARTBEAT_EVERY_S))
            return await self.pool.call_tool(
                input.server, input.tool, input.arguments, input.idempotency_key,
                on_send=beats.mark_sent, on_written=beats.mark_written,
            )
        except McpPoolFullError:
            raise  # already says it was not sent
        except Exception as exc:
            if beats.sent and not isinstance(exc, McpNotSentError):
                raise
            raise ApplicationError(
                f"the call was not sent: {type(exc).__name__}: {exc}", type="ToolCallNotSent",
            ) from exc
        finally:
            if beat is not None:
                await _stop(beat)


HEARTBEAT_EVERY_S = 2.0
# The SDK's heartbeat starts this long into an attempt: well within the heartbeat
# timeout (15 s, or a session's ``Timing.heartbeat_s``, at least 10 s; the worker
# enforces its expiry locally too; tests/workflows/test_timing.py keeps the two
# apart), and late enough that a call sent in its first seconds has only precise
# heartbeats before its mark.
SDK_BEAT_AFTER_S = 8.0


class SentMarks:
    """The heartbeats of one attempt.

    The precise ones go through the worker's client (an RPC awaited, one at a time),
    so each is stored by Temporal before the next step: ``sent: null`` until the
    "sending" mark (``sent`` names the attempt), which is stored before the request
    is written, then ``written: true`` once it was handed to the transport. The SDK's own heartbeat
    (which the worker's local heartbeat timeout needs) starts only after
    ``SDK_BEAT_AFTER_S`` and, before the mark, says ``sent: "maybe"``: the SDK sends
    it on its own schedule, so it must never be the one that says "not sent". A
    call is provably not sent only when the last stored details say ``sent: null``.
    Cancellation arrives in either heartbeat's answer."""

    def __init__(self, execution_id: str, attempt_id: str) -> None:
        self.details = ToolCallBeat(execution_id=execution_id, attempt_id=attempt_id)
        self._lock = asyncio.Lock()
        self.sent = False  # the mark was stored: the request may leave now
        self._task = asyncio.current_task()
        self._since = asyncio.get_running_loop().time()
        try:
            info = activity.info()
            self._handle = activity.client().get_async_activity_handle(
                task_token=info.task_token)
        except RuntimeError:  # no client (an ActivityEnvironment): the SDK's heartbeat
            self._handle = None

    async def beat(self) -> None:
        async with self._lock:
            # ``written`` only once true: the details before it are as they always were.
            details = self.details.model_dump(
                mode="json", exclude=None if self.details.written else {"written"})
            if self._handle is None:
                activity.heartbeat(details)
                return
            if asyncio.get_running_loop().time() - self._since >= SDK_BEAT_AFTER_S:
                activity.heartbeat(details if self.sent else {**details, "sent": "maybe"})
            try:
                await self._handle.heartbeat(details)
            except AsyncActivityCancelledError:
                if self._task is not None:
                    self._task.cancel()

    async def mark_sent(self) -> None:
        """The "sending" mark: from here on the request may have left."""
        self.details = self.details.model_copy(update={"sent": self.details.attempt_id})
        await self.beat()
        self.sent = True

    async def mark_written(self) -> None:
        """The "sent" mark: the request was handed to the transport's write."""
        self.details = self.details.model_copy(update={"written": True})
        await self.beat()

    async def every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await self.beat()
            except Exception:  # a lost RPC: the heartbeat timeout decides, not this
                log.warning("heartbeat of %s failed", self.details.attempt_id, exc_info=True)


async def _stop(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _heartbeat_until_cancelled(detail: str) -> None:
    while True:
        activity.heartbeat(detail)
        await asyncio.sleep(HEARTBEAT_EVERY_S)
