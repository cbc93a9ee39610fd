"""Benchmark: the audit-log exporter (lag, throughput) and log verification.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/exporter_bench.py                      # 200 sessions, 1M events
    .venv/bin/python bench/exporter_bench.py -n 50 --verify-events 100000   # quicker

Four figures, in this one process, on one tuned dev server (as ``hitlflow up``
starts it, SQLite file):

1. **Exporter lag** while N sessions run at once (the real worker in its own process,
   as ``up`` runs it; scripted LLM; each session asking its person ``--turns`` times;
   each simulated person, in another process, polls for the question every
   ``--poll-ms`` and answers at once; ``--together``: worker and people in this
   process, as the bench ran them before): for every line the exporter
   writes, from the history event's time (the line's ``ts``) to the line being durable
   (its batch fsynced, ``snapshot.json`` and ``head`` replaced: the observer's commit),
   split into "ts -> line written" and "line written -> durable". The exporter runs
   as ``hitlflow up`` runs it: ``run_exporter`` (telemetry store, read model, SSE feed,
   signed checkpoints, parking; discovery every 1 s), woken after each reply as the
   API wakes it. ``first page`` lines are those of a session's first commit (they
   include discovery: the visibility listing and the 1 s poll); ``following`` lines
   are the rest. Lines whose ``ts`` is an activity's start (``LLM_CALL_STARTED``,
   ``TOOL_CALL_STARTED``, ``GATE_RUN_STARTED``: Temporal writes the start when the
   attempt ends) include the activity's run time.
   That run has no stage timers: it also gives the exporter's **process CPU** per
   history event (every thread, the client's core and the kernel's work included).
   Then **where the exporter's CPU goes**, from the same workload run again with every
   stage timed (``--skip-stages`` skips it): each stage's CPU time per history event
   (map, chain and hash, canonical line, append, snapshot fold/serialise/write, head,
   fsync, checkpoint, read model, telemetry, SSE feed; ``Stages``), against the
   fetch-and-decode floor: the CPU of fetching the same histories again, nothing
   else running (what any follower must pay); and against a bare live follower: the
   same workload again, followed by tasks that only long-poll each history page after
   page and decode it, as the exporter's follower fetches it (``--skip-live-floor``
   skips that run), the exporter's process CPU against that follower's; and that
   follower's lag, from a history event's time to its page in hand (what any
   follower waits for before the exporter's own work), split as the exporter's is.
2. **Export throughput**: the same N sessions exported again from Temporal into a
   fresh directory (history fetched over gRPC, mapped, chained, one write per line,
   one fsync, snapshot and head per page), 8 sessions at a time; then offline
   (saved histories, no network) and the pure mapping alone (map + chain, no I/O).
   With ``--skip-live``: offline only, over ``tests/workflows/histories`` (x 20).
3. **Verify throughput** on a synthetic log of ``--verify-events`` events (the demo
   session's log stretched, format v2, passing every check): ``verify_lines`` (parse,
   canonical form, both hashes, chain, every field) against plain ``sha256`` of each
   line over the same bytes, and against the two sha256 per line that format v2 needs
   (the floor of any verifier), and the reference path alone (``fast=False``: how
   every line was checked before issue 28), all in CPU time of this one run; reported
   as ratios of rates (issue 28's target: verify >= 0.25x the sha256 rate). Then the
   same checks on ``--verify-jobs`` processes (default: the cores, at most 8), as
   ``verify_dir`` runs a big log (``verify_parallel``): wall time, and the CPU time of
   all processes, against one process's sha256 per line. ``--verify-only``: this
   part alone (no Temporal)::

    .venv/bin/python bench/exporter_bench.py --verify-only --verify-events 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
from stack import WorkerProcess, free_port
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from activities.mcp.pool import McpClientPool
from api.runtime.devserver import DevServer
from api.runtime.process import serving_loop
from api.runtime.worker import build_worker
from observation.exporter import (
    Chain,
    Exporter,
    LogSnapshot,
    LogWriter,
    MappedEvent,
    SessionMapper,
    Wakeups,
    export_history,
    export_session,
    files,
    follower,
    map_history,
    run_exporter,
    service,
)
from observation.exporter import feed as feed_mod
from observation.exporter import log as log_mod
from observation.exporter.chain import line_bytes
from observation.exporter.decode import load_history
from observation.exporter.feed import LogFeed
from observation.exporter.log import LogObserver
from observation.exporter.note import Signer
from observation.exporter.verify import (
    MAX_JOBS,
    default_jobs,
    read_lines,
    verify_lines,
    verify_ranges,
)
from observation.read_model.sync import ReadModelObserver, Tee
from observation.read_model.writer import GroupWriter
from observation.telemetry import STORE_NAME, TelemetryStore
from observation.telemetry import hook as telemetry_hook
from observation.telemetry.hook import SessionTelemetry
from observation.telemetry.otel import time_ns
from observation.telemetry.writer import BackgroundWriter
from workflows.messages import CURRENT_BEHAVIOUR, ReplyInput, SessionInput
from workflows.session_state import PendingRequest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "tests" / "workflows" / "histories" / "demo.json"
STARTED_AT_START = ("LLM_CALL_STARTED", "TOOL_CALL_STARTED", "GATE_RUN_STARTED")


def q(samples: list[float], p: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else float("nan")
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


# -- 0. where the exporter's CPU goes ---------------------------------------------------


class Stages:
    """CPU time (of the calling thread: ``time.thread_time``) spent in each stage of
    the exporter, each exclusive of the stages it calls (a stage inside a stage is
    counted once, in the inner one). The read model's and telemetry's writer
    threads are stages of their own ("... (writer thread)": their rounds), so work
    moved to them is still counted. What no stage covers (the follower's event loop
    work: fetching and decoding history, scheduling) is not here: the fetch-and-decode
    floor measures it apart."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self._local = threading.local()

    def timed(self, real: Callable[..., Any], label: str | Callable[..., str]
              ) -> Callable[..., Any]:
        stages = self

        def run(*args: Any, **kw: Any) -> Any:
            stack = stages._local.__dict__.setdefault("stack", [])
            stack.append(0.0)
            t0 = time.thread_time()
            try:
                return real(*args, **kw)
            finally:
                spent = time.thread_time() - t0
                inner = stack.pop()
                stages.cpu[label(*args, **kw) if callable(label) else label] += spent - inner
                if stack:
                    stack[-1] += spent
        return run

    def patches(self) -> contextlib.ExitStack:
        """Every stage timed, for as long as the returned context is open."""
        stack = contextlib.ExitStack()
        for owner, attr, label in (
            (SessionMapper, "feed", "map (history event -> log events)"),
            (Chain, "link", "chain and hash"),
            (log_mod, "line_bytes", "canonical line (JCS)"),
            (LogWriter, "append", "append (write the line)"),
            (log_mod, "read_json", "re-read the line"),
            (LogSnapshot, "apply", "snapshot fold"),
            (LogSnapshot, "to_bytes", "snapshot serialise"),
            (LogWriter, "commit", "commit (rest)"),
            (files, "fsync", "fsync (CPU)"),
            (log_mod, "atomic_write", lambda path, data, **_: "write " + (
                path.name if path.name in ("snapshot.json", "head", "checkpoint")
                else "artifact")),
            (log_mod, "checkpoint_bytes", "checkpoint (sign)"),
            (ReadModelObserver, "event", "read model"),
            (ReadModelObserver, "commit", "read model"),
            (SessionTelemetry, "event", "telemetry"),
            (SessionTelemetry, "commit", "telemetry"),
            (TelemetryStore, "upsert", "telemetry (store, its thread)"),
            # the writer threads' CPU (a round: merge, one transaction, callbacks)
            (GroupWriter, "_round", "read model (writer thread)"),
            (BackgroundWriter, "_round", "telemetry (writer thread)"),
            (feed_mod._FeedObserver, "event", "SSE feed"),
            (feed_mod._FeedObserver, "commit", "SSE feed"),
            (Tee, "event", "observers (Tee)"),
            (Tee, "commit", "observers (Tee)"),
            (TimedObserver, "event", "bench (lag timing)"),
            (TimedObserver, "commit", "bench (lag timing)"),
        ):
            stack.enter_context(mock.patch.object(owner, attr, self.timed(
                getattr(owner, attr), label)))
        return stack


# -- 1. lag while sessions run -------------------------------------------------------


class TimedObserver:
    """Wraps a log's observers (telemetry, read model: ``run_exporter``'s ``Tee``);
    at each commit (the batch fsynced, then ``snapshot.json`` and ``head`` replaced)
    notes the lag of every line the batch appended."""

    def __init__(self, sid: str, inner: LogObserver | None, lag: dict[str, list[float]],
                 appended: dict[str, int]) -> None:
        self.sid, self.inner, self.lag, self.appended = sid, inner, lag, appended
        self.pending: list[tuple[int, str]] = []
        self.written: list[int] = []  # when each pending line was written (ns)

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        if not replayed:
            now = time.time_ns()
            self.pending.append((time_ns(event["ts"]), event["type"]))
            self.lag["(ts -> line written)"].append((now - time_ns(event["ts"])) / 1e6)
            self.written.append(now)
        if self.inner is not None:
            self.inner.event(event, replayed)

    def commit(self) -> None:
        now = time.time_ns()
        kind = "first page" if self.appended.get(self.sid, 0) == 0 else "following"
        for ts, type_ in self.pending:
            ms = (now - ts) / 1e6
            self.lag[kind].append(ms)
            if type_ not in STARTED_AT_START:
                self.lag[kind + " (no activity start)"].append(ms)
        self.lag["(line written -> durable)"].extend((now - w) / 1e6 for w in self.written)
        self.appended[self.sid] = self.appended.get(self.sid, 0) + len(self.pending)
        self.pending, self.written = [], []
        if self.inner is not None:
            self.inner.commit()


def session_config(turns: int) -> dict:
    responses = [{"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}}
                 for i in range(turns)] + [{"text": "done", "end": True}]
    return {"initial_message": "go", "agent": {"llm": {"provider": "scripted",
                                                        "responses": responses}}}


async def drive(client: Client, tq: str, turns: int, poll_s: float,
                wakeups: Callable[[str], None]) -> str:
    sid = f"s-bench{uuid.uuid4().hex[:10]}"
    inp = SessionInput.model_validate({"session_id": sid, "config": session_config(turns),
                                       "behaviour": CURRENT_BEHAVIOUR})  # as the API starts it
    h = await client.start_workflow("SessionWorkflow", inp, id=sid, task_queue=tq)
    wakeups(sid)  # as the API does for a session it started (POST /api/sessions)
    for i in range(turns):
        sent = False
        while True:  # a person polling for the question (a timed-out call is retried)
            try:
                pending = await h.query("pending_request", result_type=PendingRequest | None)
                if pending is not None and pending.prompt == f"step {i}?":
                    sent = True
                    await h.execute_update("reply", ReplyInput(request_id=pending.request_id,
                                                               approve=True))
                    break
                if sent:
                    break  # the reply went through, though its call timed out
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
                pass  # an overloaded server: ask again
            await asyncio.sleep(poll_s)
        wakeups(sid)  # as the API does for each write it accepted
    await h.result()
    return sid


def _people_main(address: str, tq: str, n: int, turns: int, poll_s: float,
                 conn: Connection) -> None:
    """The simulated people, in their own process (as browsers are): each reply's
    session id goes to ``conn`` (the parent wakes the exporter, as the API does), then
    ``("done", sids)``."""
    async def run() -> list[str]:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        return await asyncio.gather(*(drive(client, tq, turns, poll_s, conn.send)
                                      for _ in range(n)))
    conn.send(("done", asyncio.run(run())))
    conn.close()
    # Ended at once, its answer sent: the Temporal client's core threads outlive
    # asyncio.run, and an interpreter's finalization that meets one of them can abort
    # ("PyGILState_Release ... finalizing", printed at 200 sessions).
    os._exit(0)


async def people_apart(address: str, tq: str, n: int, turns: int, poll_s: float,
                       wakeups: Wakeups) -> list[str]:
    """:func:`_people_main` in a spawned process; its replies wake the exporter here."""
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_people_main, daemon=True,
                       args=(address, tq, n, turns, poll_s, theirs))
    proc.start()
    theirs.close()
    loop = asyncio.get_running_loop()

    def listen() -> list[str]:
        while True:
            msg = mine.recv()
            if isinstance(msg, tuple):
                return msg[1]
            loop.call_soon_threadsafe(wakeups, msg)
    try:
        return await asyncio.to_thread(listen)
    finally:
        proc.join(10)


#: How lags are split, the exporter's and a bare follower's alike: a session's first
#: page, the pages after it, and each without the lines (or events) of an activity's
#: start (its time is the start, written when the attempt ends).
LAG_SPLIT = ("first page", "following", "first page (no activity start)",
             "following (no activity start)")


async def live(client: Client, data: Path, n: int, turns: int, poll_s: float,
               together: bool = False, timed: bool = True) -> dict[str, Any]:
    """N sessions while ``run_exporter`` runs as ``hitlflow up`` runs it (telemetry,
    read model, parking, woken by each write as the API wakes it). As in ``up``, the
    worker runs in a process of its own and the people elsewhere (``together``: both
    in this process, as the bench ran before issue 28's second pass). ``timed``: each
    stage's CPU (:class:`Stages`; its timers cost CPU of their own); ``cpu_s``: this
    process's CPU from the exporter's start to its end."""
    lag: dict[str, list[float]] = {k: [] for k in (
        *LAG_SPLIT, "(ts -> line written)", "(line written -> durable)")}
    appended: dict[str, int] = {}
    exporters: list[Exporter] = []

    class Timed(Exporter):  # run_exporter's own Exporter, its observers timed
        def __init__(self, *args: Any, observers: Any = None, **kw: Any) -> None:
            def timed(sid: str) -> TimedObserver:
                return TimedObserver(sid, observers(sid) if observers else None, lag,
                                     appended)
            super().__init__(*args, observers=timed, **kw)
            exporters.append(self)

    writers: list[Any] = []  # run_exporter's writer threads (rounds, batches)

    class Group(GroupWriter):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            writers.append(self)

    class Background(BackgroundWriter):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            writers.append(self)

    data.mkdir(parents=True)
    stop, wakeups = asyncio.Event(), Wakeups()
    stages = Stages()
    timing = stages.patches() if timed else contextlib.ExitStack()
    timing.__enter__()
    cpu0 = time.process_time()
    with mock.patch.object(service, "Exporter", Timed), \
            mock.patch.object(service, "GroupWriter", Group), \
            mock.patch.object(telemetry_hook, "BackgroundWriter", Background):
        task = asyncio.create_task(run_exporter(  # as `up` runs it
            client, data, stop, wakeups=wakeups, feed=LogFeed(data / "runs"),
            signer=Signer.generate("bench.example/hitlflow")))
        while not exporters:
            await asyncio.sleep(0.01)
    exporter = exporters[0]
    tq = f"bench-{uuid.uuid4().hex[:6]}"
    pool = McpClientPool()
    t0 = time.perf_counter()
    async with contextlib.AsyncExitStack() as apart:
        if together:
            await apart.enter_async_context(
                build_worker(client, tq, pool, max_concurrent_activities=200))
            sids = await asyncio.gather(*(drive(client, tq, turns, poll_s, wakeups)
                                          for _ in range(n)))
        else:
            apart.enter_context(WorkerProcess("hitlflow", client.service_client.config
                                              .target_host, tq))
            t0 = time.perf_counter()
            sids = await people_apart(client.service_client.config.target_host, tq, n,
                                      turns, poll_s, wakeups)
        sessions_s = time.perf_counter() - t0
        while not set(sids) <= exporter.done:  # the last lines of the last sessions
            assert exporter.fatal is None, exporter.fatal
            await asyncio.sleep(0.05)
    all_s = time.perf_counter() - t0
    stop.set()
    await task
    cpu_s = time.process_time() - cpu0
    timing.close()
    await pool.aclose()
    lines = sum(len(v) for k, v in lag.items() if "(" not in k)
    store = TelemetryStore.open(data / STORE_NAME)
    runs = len(store.runs())
    store.close()
    rounds = [f"{type(w).__name__}: {getattr(w, 'batches', getattr(w, 'written', 0))} "
              f"commits in {w.rounds} transactions" for w in writers]
    return {"sids": sids, "lag": lag, "lines": lines, "sessions_s": sessions_s,
            "all_s": all_s, "telemetry_runs": runs, "stages": dict(stages.cpu),
            "rounds": rounds, "cpu_s": cpu_s}


async def bare_live(client: Client, n: int, turns: int, poll_s: float
                    ) -> tuple[int, float, dict[str, list[float]]]:
    """The live fetch-and-decode floor: the same workload (the worker and the people
    apart) followed by bare followers in this process, one per session from its first
    reply on, each long-polling its history page after page as the exporter's follower
    does (``follower.history_pages``, the same cursor and requests) and decoding it,
    nothing else: no log, no observers, no parking. Its events, this process's CPU
    for the run, and its lag: from each history event's time to its page in hand, as
    the exporter's lag is split (a session's first page, the pages after it; the
    events' times are kept as the pages come, about 1 us an event, and the lags
    computed after the run)."""
    tq = f"bench-{uuid.uuid4().hex[:6]}"
    counts: dict[str, int] = {}
    tasks: list[asyncio.Task[None]] = []
    pages: list[tuple[bool, float, list[tuple[float, int]]]] = []  # first?, in hand, events

    async def follow(sid: str) -> None:
        first = True
        async for page in follower.history_pages(client, sid, follow=True):
            counts[sid] += len(page)
            pages.append((first, time.time(), [
                (e.event_time.seconds + e.event_time.nanos / 1e9, e.event_type)
                for e in page]))
            first = False

    def seen(sid: str) -> None:  # the people's reply: the session exists
        if sid not in counts:
            counts[sid] = 0
            tasks.append(asyncio.ensure_future(follow(sid)))

    wakeups = Wakeups()
    wakeups._to = seen  # the API's wake-up, taken as discovery
    t0 = time.process_time()
    with WorkerProcess("hitlflow", client.service_client.config.target_host, tq):
        sids = await people_apart(client.service_client.config.target_host, tq, n, turns,
                                  poll_s, wakeups)
        await asyncio.gather(*tasks)
    cpu_s = time.process_time() - t0
    assert set(sids) == set(counts)
    lag: dict[str, list[float]] = {k: [] for k in LAG_SPLIT}
    for first, now, events in pages:
        kind = "first page" if first else "following"
        for ts, event_type in events:
            ms = (now - ts) * 1e3
            lag[kind].append(ms)
            if event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                lag[kind + " (no activity start)"].append(ms)
    return sum(counts.values()), cpu_s, lag


# -- 2. export throughput ----------------------------------------------------------


async def reexport(client: Client, sids: list[str], out: Path, concurrency: int = 8
                   ) -> tuple[int, float]:
    gate = asyncio.Semaphore(concurrency)

    async def one(sid: str) -> int:
        async with gate:
            return (await export_session(client, sid, out)).written

    t0 = time.perf_counter()
    written = await asyncio.gather(*(one(s) for s in sids))
    return sum(written), time.perf_counter() - t0


async def histories(client: Client, sids: list[str]
                    ) -> tuple[list[tuple[str, list[HistoryEvent]]], float]:
    """Every session's history, fetched and decoded as any follower must (one page
    after another, each event a protobuf message), and the CPU time that took (this
    process: the client's core included); nothing else runs meanwhile."""
    t0 = time.process_time()
    out = []
    for s in sids:
        out.append((s, [e async for e in client.get_workflow_handle(s).fetch_history_events()]))
    return out, time.process_time() - t0


def offline(hists: list[tuple[str, list[HistoryEvent]]], out: Path) -> tuple[int, float, float]:
    t0 = time.perf_counter()
    events = sum(export_history(sid, evs, out / str(i)).written
                 for i, (sid, evs) in enumerate(hists))
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mapped = sum(len(list(Chain().link_all(map_history(sid, evs)))) for sid, evs in hists)
    assert mapped == events
    return events, write_s, time.perf_counter() - t0


# -- 3. verify throughput --------------------------------------------------------------


def synthetic_log(path: Path, n: int) -> int:
    """The demo session's log stretched to ``n`` lines, as the exporter would write a
    long session (format v2): its events after RUN_CREATED repeated with later history
    event ids, re-chained; it passes every check of ``verify_lines``."""
    sid, events = load_history(DEMO.read_text())
    mapped = map_history(sid, events)
    template = [m.envelope() for m in mapped]
    step = max(int(e["event_id"].split(":")[1]) for e in template)
    chain = Chain()
    size, i, rep = 0, 0, 0
    with path.open("wb", buffering=1 << 20) as f:
        while i < n:
            for e in template[1 if rep else 0:]:
                if i == n:
                    break
                run, event, k = e["event_id"].split(":")
                m = MappedEvent(**{**e, "event_id": f"{run}:{int(event) + rep * step}:{k}"})
                size += f.write(line_bytes(chain.link(m)))
                i += 1
            rep += 1
    return size


def verify_bench(path: Path, session: str, jobs: int) -> dict[str, float]:
    """``verify_lines`` (the orjson fast path, and the reference path alone: every line
    read by ``json`` as doubles and checked with ``json.dumps``/``rfc8785``, as before
    issue 28) against plain sha256 per line over the same bytes (lines read as
    ``read_lines`` gives them), the hashing v2 itself needs (seed 003's event_hash +
    line_hash over slices of each line, nothing parsed: no verifier of the format can
    do less), and the floor of this verifier's design: orjson reading each line and
    writing it back plus those two hashes, no check. Each in CPU time of this process
    (a shared machine's load skews the ratios less) and wall time.

    And the same checks on ``jobs`` processes (``verify.verify_ranges``,
    ``verify_dir``'s path for a big log, here without artifact files as
    ``verify_lines``): wall time, and CPU time of this process and of its workers
    (``RUSAGE_CHILDREN``: the workers are waited for when the pool shuts down)."""
    def timed(run: Callable[[], int]) -> tuple[int, float, float]:
        t0, w0 = time.process_time(), time.perf_counter()
        count = run()
        return count, time.process_time() - t0, time.perf_counter() - w0

    def verify(fast: bool) -> Callable[[], int]:
        def run() -> int:
            count = 0
            for event in verify_lines(read_lines(path), fast=fast):
                count = event["seq"]
            return count
        return run

    def sha_lines() -> int:
        for line in read_lines(path):
            hashlib.sha256(line).digest()
        return 0

    def two_hashes() -> int:
        for line in read_lines(path):
            i, j = line.find(b',"payload":'), line.find(b',"line_hash":"')
            hashlib.sha256(line[i:]).digest()  # ~ event_id + ts + type + payload + prev_hash
            hashlib.sha256(line[:j] + line[j + 79:]).digest()  # the line without line_hash
        return 0

    def parse_write_hash() -> int:
        option = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER | orjson.OPT_APPEND_NEWLINE
        for line in read_lines(path):
            orjson.dumps(orjson.loads(line), option=option) == line  # noqa: B015
            i, j = line.find(b',"payload":'), line.find(b',"line_hash":"')
            hashlib.sha256(line[i:]).digest()
            hashlib.sha256(line[:j] + line[j + 79:]).digest()
        return 0

    def ranges() -> int:
        verified = verify_ranges(path, session, None, jobs)
        assert verified is not None, "the ranges fell back to serial on a good log"
        return verified.events

    count, verify_s, wall_s = timed(verify(True))
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    ranged, ranges_s, ranges_wall_s = timed(ranges)
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert ranged == count
    workers_s = (children1.ru_utime + children1.ru_stime
                 - children0.ru_utime - children0.ru_stime)
    _, reference_s, reference_wall_s = timed(verify(False))
    _, sha_lines_s, sha_wall_s = timed(sha_lines)
    _, two_s, _ = timed(two_hashes)
    _, floor_s, _ = timed(parse_write_hash)
    return {"events": count, "verify_s": verify_s, "verify_wall_s": wall_s,
            "ranges_s": ranges_s + workers_s, "ranges_parent_s": ranges_s,
            "ranges_wall_s": ranges_wall_s, "jobs": jobs,
            "reference_s": reference_s, "reference_wall_s": reference_wall_s,
            "sha_lines_s": sha_lines_s, "sha_wall_s": sha_wall_s, "two_hashes_s": two_s,
            "floor_s": floor_s}


# -- main ------------------------------------------------------------------------------


def report_lag(lag: dict[str, list[float]], what: str = "lines") -> None:
    print(f"  {what:34} {'n':>7} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for kind, xs in lag.items():
        if xs:
            print(f"  {kind:34} {len(xs):7d} {q(xs, 50):9.1f} {q(xs, 99):9.1f} "
                  f"{max(xs):9.1f}")
    every = [x for k, v in lag.items() if "(" not in k for x in v]
    print(f"  {'all ' + what:34} {len(every):7d} {q(every, 50):9.1f} {q(every, 99):9.1f} "
          f"{max(every):9.1f}")


def report_cpu(stages: dict[str, float], events: int, fetch_s: float,
               live_floor: tuple[int, float, dict[str, list[float]]] | None = None,
               whole: tuple[int, float] | None = None) -> None:
    """The exporter's CPU per history event by stage, against the floor: fetching and
    decoding the same histories (what any follower pays); and, with ``live_floor``
    (:func:`bare_live`'s events, CPU and lag), against what a bare live follower pays.
    ``whole``: the events and process CPU of the run without stage timers (the
    exporter whole, as ``up`` runs it; the bench's lag timing included)."""
    live = None if live_floor is None else live_floor[1] / live_floor[0] * 1e6
    if whole is not None:
        per = whole[1] / whole[0] * 1e6
        print(f"  the exporter's process CPU per history event (the run above, no stage "
              f"timers; {whole[0]} events): {per:.0f} us" + (
                  "" if live is None else f"; a bare live follower's: {live:.0f} us; "
                  f"{per / live:.2f}x it (target <= 2x)"))
    if live_floor is not None:
        print("  the bare live follower's lag (a history event's time -> its page in hand: "
              "what any follower waits for, before the exporter's own work):")
        report_lag(live_floor[2], "history events")
    if not stages:
        return
    print(f"  where it goes: the same workload again, each stage timed ({events} events; "
          "the timers cost CPU of their own, counted in the stages they time)")
    floor = fetch_s / events * 1e6
    own = {k: v for k, v in stages.items() if not k.startswith("bench")}
    total = sum(own.values()) / events * 1e6
    print(f"  exporter CPU per history event ({events} events): {total + floor:.0f} us = "
          f"fetch-and-decode floor {floor:.0f} us (measured apart, same histories) + stages "
          f"{total:.0f} us; {(total + floor) / floor:.2f}x the floor (target <= 2x)")
    if live is not None:
        print(f"  a bare live follower of the same workload (long-polls page after page, "
              f"decodes, nothing else; {live_floor[0]} events): {live:.0f} us per event "
              f"(this process's CPU); the exporter's stages + that: "
              f"{(total + live) / live:.2f}x it")
    for k, v in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"    {k:34} {v / events * 1e6:8.1f} us/event")


def parse(argv: Iterable[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="concurrent sessions")
    p.add_argument("--turns", type=int, default=3, help="replies per session")
    p.add_argument("--poll-ms", type=float, default=100,
                   help="how often each simulated person polls for its question")
    p.add_argument("--verify-events", type=int, default=1_000_000)
    p.add_argument("--together", action="store_true",
                   help="the worker and the simulated people in the exporter's process "
                        "(as before issue 28's second pass; `up` runs the worker apart)")
    p.add_argument("--skip-live", action="store_true")
    p.add_argument("--skip-verify", action="store_true")
    p.add_argument("--verify-only", action="store_true",
                   help="only the verify throughput (no Temporal, no export)")
    p.add_argument("--verify-jobs", type=int, default=0,
                   help="processes of the parallel verify (default: the cores, at most 8)")
    p.add_argument("--skip-stages", action="store_true",
                   help="skip the second live run, each stage timed (the breakdown)")
    p.add_argument("--skip-live-floor", action="store_true",
                   help="skip the bare live follower's run (the live fetch-and-decode floor)")
    p.add_argument("--asyncio-loop", action="store_true",
                   help="run on asyncio's event loop, not the one up runs on (uvloop)")
    args = p.parse_args(list(argv))
    if args.n < 1 or args.turns < 0 or args.poll_ms <= 0 or args.verify_events < 1:
        p.error("-n and --verify-events must be at least 1, --turns at least 0, "
                "--poll-ms above 0")
    if not 0 <= args.verify_jobs <= MAX_JOBS or args.verify_jobs == 1:
        p.error(f"--verify-jobs must be 2 to {MAX_JOBS} (0: the cores)")
    if args.verify_only and args.skip_verify:
        p.error("--verify-only and --skip-verify exclude each other")
    return args


async def main(argv: Iterable[str]) -> None:
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="hitlflow-bench-") as tmp:
        tmpd = Path(tmp)
        if args.verify_only:
            pass
        elif not args.skip_live:
            async with DevServer(tmpd / "temporal", port=free_port(), ui_port=None) as server:
                client = await Client.connect(server.address,
                                              data_converter=pydantic_data_converter)
                r = await live(client, tmpd / "data", args.n, args.turns, args.poll_ms / 1000,
                               args.together, timed=False)
                print(f"1. exporter lag: {args.n} concurrent sessions x {args.turns} replies "
                      f"(polled every {args.poll_ms:g} ms) on one tuned dev server; "
                      "run_exporter (telemetry, read model, parking, woken by each write) "
                      "in this process, " + ("the worker and the people too" if args.together
                                             else "the worker and the people apart, as in "
                                             "`up`") + "; lag = line ts -> its batch fsynced")
                print(f"  {r['lines']} lines written in {r['all_s']:.1f} s (sessions done in "
                      f"{r['sessions_s']:.1f} s): {r['lines'] / r['all_s']:.0f} lines/s live; "
                      f"{r['telemetry_runs']} telemetry runs")
                report_lag(r["lag"])
                print(f"  writer threads: {'; '.join(r['rounds'])}")
                events, secs = await reexport(client, r["sids"], tmpd / "again")
                same = all((tmpd / "again" / s / "events.ndjson").read_bytes()
                           == (tmpd / "data" / "runs" / s / "events.ndjson").read_bytes()
                           for s in r["sids"])
                hists, fetch_s = await histories(client, r["sids"])
                whole = (sum(len(evs) for _, evs in hists), r["cpu_s"])
                stages, timed_events = {}, whole[0]
                if not args.skip_stages:  # the same workload again, each stage timed
                    t = await live(client, tmpd / "timed", args.n, args.turns,
                                   args.poll_ms / 1000, args.together, timed=True)
                    stages = t["stages"]
                    timed_events = sum(len(evs) for _, evs in (
                        await histories(client, t["sids"]))[0])
                bare = None if args.skip_live_floor else await bare_live(
                    client, args.n, args.turns, args.poll_ms / 1000)
            report_cpu(stages, timed_events, fetch_s * timed_events / whole[0], bare, whole)
            print("2. export throughput")
            print(f"  from Temporal (fetch + map + write + fsync, 8 at a time): {events} events "
                  f"in {secs:.2f} s = {events / secs:,.0f} events/s (same bytes as live: {same})")
            ev, write_s, map_s = offline(hists, tmpd / "offline")
            print(f"  offline (saved histories; map + write + fsync): {ev / write_s:,.0f} "
                  f"events/s; map + chain only (no I/O): {ev / map_s:,.0f} events/s")
            shutil.rmtree(tmpd / "again", ignore_errors=True)
        else:  # no Temporal: the saved histories, offline (the per-event path alone)
            saved = [load_history(p.read_text()) for p in sorted(DEMO.parent.glob("*.json"))]
            ev, write_s, map_s = offline(saved * 20, tmpd / "offline")
            print(f"2. export throughput, offline: the {len(saved)} saved histories x 20")
            print(f"  map + write + fsync: {ev / write_s:,.0f} events/s; map + chain only "
                  f"(no I/O): {ev / map_s:,.0f} events/s")
        if not args.skip_verify:
            path = tmpd / "synthetic.ndjson"
            t0 = time.perf_counter()
            size = synthetic_log(path, args.verify_events)
            gen_s = time.perf_counter() - t0
            jobs = args.verify_jobs or max(2, default_jobs())  # at least 2: the ranges
            v = verify_bench(path, load_history(DEMO.read_text())[0], jobs)
            mb, n = size / 1e6, v["events"]
            rate = {k: n / v[k] for k in ("verify_s", "reference_s", "sha_lines_s",
                                          "two_hashes_s", "floor_s", "verify_wall_s",
                                          "sha_wall_s", "ranges_s", "ranges_wall_s")}
            sha = rate["sha_lines_s"]
            print(f"3. verify throughput: synthetic log of {n:,} events (format v2), "
                  f"{mb:,.0f} MB (made in {gen_s:.1f} s); rates in CPU time of this "
                  "process unless said")
            print(f"  verify_lines (every check): {rate['verify_s']:,.0f} events/s, "
                  f"{mb / v['verify_s']:.1f} MB/s: {v['verify_s']:.1f} s CPU, "
                  f"{v['verify_wall_s']:.1f} s wall")
            print(f"  verify_lines, reference path only (before issue 28): "
                  f"{rate['reference_s']:,.0f} events/s, {mb / v['reference_s']:.1f} MB/s: "
                  f"{v['reference_s']:.1f} s CPU, {v['reference_wall_s']:.1f} s wall")
            print(f"  sha256 of each line: {sha:,.0f} events/s, {mb / v['sha_lines_s']:.0f} MB/s "
                  f"({v['sha_wall_s']:.1f} s wall)")
            print(f"  the two sha256 v2 needs per line, nothing else: "
                  f"{rate['two_hashes_s']:,.0f} events/s")
            print(f"  orjson reading and writing back each line + the two sha256, no check "
                  f"(this design's floor): {rate['floor_s']:,.0f} events/s")
            print(f"  ratio verify / sha256 of each line (one process): "
                  f"{rate['verify_s'] / sha:.3f}x CPU, "
                  f"{rate['verify_wall_s'] / rate['sha_wall_s']:.3f}x wall (target >= 0.25x); "
                  f"reference path: {rate['reference_s'] / sha:.3f}x; the two hashes alone: "
                  f"{rate['two_hashes_s'] / sha:.3f}x; the floor: {rate['floor_s'] / sha:.3f}x")
            print(f"  on {v['jobs']} processes (verify_dir's path for a big log, ranges of "
                  f"lines; {os.cpu_count()} cores here): {rate['ranges_wall_s']:,.0f} "
                  f"events/s wall, {v['ranges_wall_s']:.1f} s wall; CPU of all processes "
                  f"{v['ranges_s']:.1f} s ({v['ranges_parent_s']:.2f} s of it this one's)")
            print(f"  ratio on {v['jobs']} processes / sha256 of each line (one process): "
                  f"{rate['ranges_wall_s'] / rate['sha_wall_s']:.3f}x wall (target >= 0.25x), "
                  f"{rate['ranges_s'] / sha:.3f}x CPU (all processes' CPU against one "
                  "sha256 per line's: what the work costs, not how fast it ends)")
            with contextlib.suppress(OSError):
                path.unlink()


if __name__ == "__main__":
    # The exporter on the event loop `up` runs it on (api.runtime.process.serving_loop:
    # uvloop where installed); --asyncio-loop: asyncio's own, to compare.
    loop = None if "--asyncio-loop" in sys.argv else serving_loop()
    with asyncio.Runner(loop_factory=loop) as runner:
        runner.run(main(sys.argv[1:]))
