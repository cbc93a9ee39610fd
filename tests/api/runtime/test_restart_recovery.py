"""Restart recovery (seed 004) at a bounded cost per worker start: a cold start asks
every waiting session to check itself with one batch operation; a worker that
starts next to a live one sends nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import EventType
from temporalio.api.taskqueue.v1 import PollerInfo
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode, WorkflowService

from api.runtime.recovery import live_pollers, other_workers
from api.runtime.worker import run_worker
from api.settings import HitlflowSettings
from observation.exporter.decode import journal_of
from tests.support.sessions import running_worker, start_session, until_status
from workflows.config import SessionConfig
from workflows.statechart import SessionStatus

SESSIONS = 20
BUSY = ": refused, another batch runs"


class _Counted:
    """A WorkflowService that records the name of every RPC made through it."""

    def __init__(self, inner: WorkflowService, calls: list[str]) -> None:
        self._inner, self._calls = inner, calls

    def __getattr__(self, name: str) -> Any:
        rpc = getattr(self._inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await rpc(*args, **kwargs)
            except RPCError as err:
                # another test's batch runs in the shared namespace: tried again later
                busy = err.status == RPCStatusCode.RESOURCE_EXHAUSTED
                self._calls.append(f"{name}{BUSY if busy else ': failed'}")
                raise
            self._calls.append(name)
            return result

        return call


class CountingClient(Client):
    """The client a worker gets: every Python-side RPC is counted (the worker's own
    polls go through the SDK core, not through here)."""

    def __init__(self, client: Client) -> None:
        super().__init__(**client.config())
        self.calls: list[str] = []

    @property
    def workflow_service(self) -> WorkflowService:
        return _Counted(super().workflow_service, self.calls)  # type: ignore[return-value]


def poller(identity: str, seen: datetime) -> PollerInfo:
    ts = Timestamp()
    ts.FromDatetime(seen)
    return PollerInfo(identity=identity, last_access_time=ts)


def test_a_poller_counts_as_alive_within_the_window():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    pollers = [poller("live", now - timedelta(seconds=59)),
               poller("gone", now - timedelta(seconds=91))]
    assert live_pollers(pollers, now) == ["live"]
    assert live_pollers(pollers, now, timedelta(0)) == []


def waiting_config() -> SessionConfig:
    return SessionConfig.model_validate({"initial_message": "go", "agent": {"llm": {
        "provider": "scripted", "responses": [
            {"ecs_request": {"kind": "confirm", "prompt": "ok?"}},
            {"text": "thanks", "end": True}]}}})


async def recover_signals(client: Client, session_id: str) -> int:
    history = await client.get_workflow_handle(session_id).fetch_history()
    return sum(1 for e in history.events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
               and e.workflow_execution_signaled_event_attributes.signal_name == "recover")


async def preserved(client: Client, session_id: str) -> bool:
    history = await client.get_workflow_handle(session_id).fetch_history()
    return any(entry["kind"] == "session.status" and "restart.preserve_waiting" in
               json.dumps(entry) for e in history.events for entry in journal_of(e))


async def eventually(check, what: str, limit_s: float = 60) -> None:
    """Wait (bounded) for a condition of the server's state."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


async def test_cold_start_recovers_all_in_two_rpcs_and_warm_start_sends_nothing(
        dev_env, caplog):
    """20 waiting sessions: the cold start's RPCs are the same two whatever their
    number; the warm start's is one describe, and no session gets a signal."""
    client = dev_env.client
    caplog.set_level(logging.INFO, logger="hitlflow.worker")
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    target = client.service_client.config.target_host
    async with running_worker(client, tq):
        handles = [await start_session(client, waiting_config(), tq) for _ in range(SESSIONS)]
        for h in handles:
            await until_status(h, SessionStatus.WAITING_USER)

    # Cold: the worker that ran the sessions is gone (a 0 s window says so at once;
    # the default 90 s would a moment later).
    cold = CountingClient(client)
    first_stop = asyncio.Event()
    first = asyncio.create_task(run_worker(
        HitlflowSettings(temporal_address=target, task_queue=tq, live_poller_window_s=0),
        first_stop, client=cold))
    try:
        for h in handles:
            await eventually(lambda h=h: preserved(client, h.id),
                             f"{h.id} never checked itself")
        # (a batch another test started may still run: the namespace's limit refuses
        # ours then, and it is tried again; those refusals are not this start's cost)
        assert [c for c in cold.calls if not c.endswith(BUSY)] == [
            "describe_task_queue", "start_batch_operation"]
        assert [await recover_signals(client, h.id) for h in handles] == [1] * SESSIONS

        # Warm: a second worker starts while the first polls: nothing is sent.
        async def first_is_polling() -> bool:
            return bool(await other_workers(client, tq))

        await eventually(first_is_polling, "the first worker never polled")
        # Its own connection: the SDK allows one worker per task queue per client.
        warm = CountingClient(await Client.connect(target, namespace=client.namespace,
                                                   data_converter=client.data_converter))
        second_stop = asyncio.Event()
        second = asyncio.create_task(run_worker(
            HitlflowSettings(temporal_address=target, task_queue=tq), second_stop,
            client=warm))

        async def second_decided() -> bool:
            return any("nothing to recover" in r.getMessage() for r in caplog.records)

        try:
            await eventually(second_decided, "the second worker never started")
        finally:
            second_stop.set()
            await second
        assert warm.calls == ["describe_task_queue"]
        assert [await recover_signals(client, h.id) for h in handles] == [1] * SESSIONS
        assert sum("started cold" in r.getMessage() for r in caplog.records) == 1
    finally:
        first_stop.set()
        await first
