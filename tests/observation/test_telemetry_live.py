"""End to end on the real dev server: the exporter fills the telemetry store and
exports spans while a session runs (a session waiting for its person already has
its ended children as spans, not its own), and the store then equals a rebuild
from the log."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from api.cli.demo_config import demo_config
from observation.exporter import Exporter
from observation.exporter.verify import read_lines, verify_lines
from observation.telemetry import STORE_NAME, TelemetryStore, project
from observation.telemetry.hook import Telemetry, rebuild_store
from observation.telemetry.otel import SpanSink
from tests.support.sessions import running_worker, start_session, until
from workflows.messages import ReplyInput
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


async def bounded(check, what: str, limit_s: float = 30) -> None:
    """Wait until ``check()`` holds (a condition poll with a deadline)."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


async def test_the_exporter_writes_telemetry_as_the_session_runs(dev_env, tmp_path: Path):
    memory = InMemorySpanExporter()
    store = TelemetryStore.open(tmp_path / STORE_NAME)
    telemetry = Telemetry(store, SpanSink(memory, batch=False), background=True)
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    exporter = Exporter(dev_env.client, tmp_path / "runs", discover_every_s=0.05,
                        retry_after_s=0.05, observers=telemetry.observer)
    stop = asyncio.Event()
    task = asyncio.create_task(exporter.run(stop))
    try:
        async with running_worker(dev_env.client, tq):
            h = await start_session(dev_env.client, demo_config(tmp_path / "notes"), tq)
            sid = h.id

            def root():
                return store.run(f"{sid}/session")

            snap = await until(h, lambda s: s.status == W)
            await bounded(lambda: root() is not None and root().status == "waiting_user",
                          "the session run waits for its person")
            mine = [s for s in memory.get_finished_spans()
                    if s.attributes["hitlflow.session_id"] == sid]
            assert mine and all(s.parent is not None for s in mine)  # children, live
            assert "llm_call" in {s.attributes["hitlflow.job_type"] for s in mine}
            assert store.runs(session_id=sid, job_type="work_item", status="waiting_user")
            for kind in ("approval", "confirm"):
                snap = await until(h, lambda s, k=kind: s.status == W and s.pending is not None
                                   and s.pending.kind == k)
                await h.execute_update("reply", ReplyInput(
                    request_id=snap.pending.request_id, approve=True))
            await h.result()
            await bounded(lambda: sid in exporter.done, "exported")
    finally:
        stop.set()
        await task
    telemetry.flush()
    runs = store.runs(session_id=sid)
    log = list(verify_lines(read_lines(tmp_path / "runs" / sid / "events.ndjson")))
    assert runs == project(sid, log) and runs[0].status == "succeeded"
    spans = [s for s in memory.get_finished_spans()
             if s.attributes["hitlflow.session_id"] == sid]
    assert sorted(format(s.context.span_id, "016x") for s in spans) == sorted(
        r.span_id for r in runs)  # each run once
    live = b"".join(line for line in store.dump() if sid.encode() in line)
    telemetry.close()
    rebuild_store(tmp_path)
    with TelemetryStore.open(tmp_path / STORE_NAME, readonly=True) as again:
        assert b"".join(line for line in again.dump() if sid.encode() in line) == live
