"""Streamed tokens over real HTTP: the worker's LLM activity streams the model's text (the
real openai SDK, ``stream=True``, against the fake OpenAI-compatible server) to a
``DeltaBus``; the API's SSE stream (the exporter's ``LogFeed``) merges it in as
ephemeral ``text.delta`` events. Two layouts: ``hitlflow up`` (the worker in a child
process, its text over a pipe into the API's in-process bus) and a cluster's (worker and
API each with their own ``PostgresDeltaBus`` on a real PostgreSQL: nothing shared but
the database)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from activities.deltas import InProcessDeltaBus
from activities.deltas.postgres import PostgresDeltaBus
from api.cli.sse_client import SseMessage
from api.http.app import create_app
from api.runtime.worker_process import run_worker_process
from api.settings import HitlflowSettings
from api.sse_names import TEXT_DELTA
from observation.exporter import LogFeed
from observation.exporter.verify import LOG_NAME
from tests.api.http.test_http_sse import Reader
from tests.api.http_support import AUTH, TOKEN, HttpStack, eventually, serve
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.postgres import postgres_url
from tests.support.sessions import running_exporter, running_worker

KEY_ENV = "TEST_DELTA_LLM_KEY"
ANSWER = ["The answer ", "is forty", "-two."]


@pytest.fixture(scope="module", params=["up", "cluster"])
async def stream_stack(request: pytest.FixtureRequest, dev_env: WorkflowEnvironment,
                       free_port: Callable[[], int],
                       tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpStack]:
    """Worker, exporter and API on one log feed, as in ``up``; the worker's bus and the
    API's are one object (``up``) or two on one PostgreSQL database (``cluster``)."""
    settings = HitlflowSettings(
        temporal_address=dev_env.client.service_client.config.target_host,
        task_queue=f"tq-delta-{uuid.uuid4().hex[:8]}", api_token=TOKEN,
        data_dir=tmp_path_factory.mktemp("delta-data"))
    if request.param == "up":
        api_bus, buses = InProcessDeltaBus(), []
    else:
        url = postgres_url()
        buses = [PostgresDeltaBus(url), PostgresDeltaBus(url)]  # the worker's, the API's
        api_bus = buses[1]
        api_bus.listen()
        assert await asyncio.to_thread(api_bus.listening.wait, 30), "not listening"
    feed = LogFeed(settings.data_dir / "runs")
    app = create_app(settings, event_provider=lambda _c, sid, after: feed.events(sid, after),
                     stream_head=lambda _c, sid: feed.head(sid), delta_bus=api_bus)
    worker = (worker_process(settings, api_bus) if request.param == "up"
              else running_worker(dev_env.client, settings.task_queue, deltas=buses[0]))
    try:
        async with worker, \
                running_exporter(dev_env.client, settings.data_dir, settings.task_queue,
                                 feed=feed), \
                serve(app, free_port()) as server, \
                httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
            yield HttpStack(http=http, url=server.url, client=dev_env.client,
                            settings=settings)
    finally:
        for bus in buses:
            await asyncio.to_thread(bus.close)


@contextlib.asynccontextmanager
async def worker_process(settings: HitlflowSettings, bus: InProcessDeltaBus
                         ) -> AsyncIterator[None]:
    """The worker as ``up`` runs it: a child process whose text comes over a pipe.
    The child has the environment it started with: the model's key is set first."""
    stop, ready = asyncio.Event(), asyncio.Event()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(KEY_ENV, "sk-delta")
        task = asyncio.create_task(run_worker_process(settings, stop, deltas=bus,
                                                      on_ready=lambda _id: ready.set()))
        await asyncio.wait({task, asyncio.ensure_future(ready.wait())}, timeout=60,
                           return_when=asyncio.FIRST_COMPLETED)
    assert ready.is_set(), f"the worker process is not ready: {task}"
    try:
        yield
    finally:
        stop.set()
        await task  # stopped cleanly: exit code 0


async def until(reader: Reader, event: str) -> tuple[list[SseMessage], SseMessage]:
    """The messages before the first ``event`` one, and that one."""
    before = []
    while (msg := await reader.next()) is not None:
        if msg.event == event:
            return before, msg
        before.append(msg)
    raise AssertionError(f"the stream ended before a {event} event; got {before}")


def accumulate(deltas: list[SseMessage]) -> str:
    """What a client shows: a delta with ``text`` replaces, the others append."""
    shown = ""
    for m in deltas:
        data = m.json()
        shown = data["text"] if "text" in data else shown + data["delta"]
    return shown


async def test_deltas_stream_before_the_text_and_a_late_client_gets_the_text_so_far(
        stream_stack: HttpStack, fake_openai: FakeOpenAIServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-delta")
    fake_openai.expected_key = "sk-delta"
    held = threading.Event()
    fake_openai.reply_text("".join(ANSWER), pieces=ANSWER, hold=held, hold_after=2)
    http = stream_stack.http
    body = {"initial_message": "what is the answer?", "agent": {"llm": {
        "provider": "openai", "base_url": fake_openai.base_url, "model": "fake-model",
        "api_key_env": KEY_ENV}}}
    r = await http.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    url = f"/api/sessions/{sid}/events"
    try:
        async with http.stream("GET", url) as first_r:
            first = Reader(first_r)
            # The pieces as they come (held until the stream passed the log lines from
            # before the call, then the text so far: one snapshot or the pieces).
            seen: list[SseMessage] = []
            while accumulate(seen) != ANSWER[0] + ANSWER[1]:
                seen.append((await until(first, TEXT_DELTA))[1])
            call_id = seen[0].json()["call_id"]
            assert seen[0].json()["text"] in (ANSWER[0], ANSWER[0] + ANSWER[1])
            assert {d.json()["call_id"] for d in seen} == {call_id}
            assert all(d.id is None for d in seen)  # ephemeral: no id to resume from

            # Mid-answer the activity heartbeats (its details: how far it got).
            handle = stream_stack.client.get_workflow_handle(sid)

            async def beats() -> list:
                pending = (await handle.describe()).raw_description.pending_activities
                return [await stream_stack.client.data_converter.decode(
                    p.heartbeat_details.payloads) for p in pending
                    if p.activity_type.name == "llm_call" and p.heartbeat_details.payloads]
            details = await eventually(beats, lambda b: len(b) == 1, what="a heartbeat")
            assert details[0][0]["call_id"] == call_id

            # A client that connects now gets the text so far first, then deltas.
            async with http.stream("GET", url) as late_r:
                late = Reader(late_r)
                logged, snapshot = await until(late, TEXT_DELTA)
                assert all(m.id is not None for m in logged)
                assert snapshot.json() == {"call_id": call_id, "delta": "",
                                           "text": ANSWER[0] + ANSWER[1]}
                held.set()
                late_deltas, late_text = await until(late, "text")
            first_deltas, text = await until(first, "text")
    finally:
        held.set()
    whole = "".join(ANSWER)
    for before, final, so_far in ((first_deltas, text, seen),
                                  (late_deltas, late_text, [snapshot])):
        assert [m.json() for m in before if m.event == TEXT_DELTA] == [
            {"call_id": call_id, "delta": ANSWER[2]}]
        assert final.json()["text"] == whole and final.json()["call_id"] == call_id
        assert final.id is not None
        assert accumulate(so_far + [m for m in before if m.event == TEXT_DELTA]) == whole
    # The deltas are not in the log: one `text` line holds the whole answer.
    lines = [json.loads(line) for line in
             (stream_stack.settings.data_dir / "runs" / sid / LOG_NAME).read_text()
             .splitlines()]
    assert not [line for line in lines if "delta" in line["type"]]
    assert [line["payload"]["text"] for line in lines if line["type"] == "text"] == [whole]
