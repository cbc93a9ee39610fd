"""Benchmark: the audit-log exporter (lag, throughput) and log verification.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/exporter_bench.py                      # 200 sessions, 1M events
    .venv/bin/python bench/exporter_bench.py -n 50 --verify-events 100000   # quicker

Three figures, in this one process, on one tuned dev server (as ``hitlflow up``
starts it, SQLite file):

1. **Exporter lag** while N sessions run at once (the real worker, scripted LLM, each
   session asking its person ``--turns`` times; each simulated person polls for the
   question every ``--poll-ms`` and answers at once): for every line the exporter
   writes, from the history event's time (the line's ``ts``) to the line being written
   (the LogWriter's observer sees it right after the write; the fsync follows at the end
   of the page). The exporter is the service of ``hitlflow up`` (``Exporter`` +
   telemetry store; discovery every 1 s). ``first page`` lines are the ones written when
   the exporter first picked a session up (they include discovery: the visibility
   listing and the 1 s poll); ``following`` lines are the rest, written while the
   exporter followed the session's history live. Lines whose ``ts`` is an activity's
   start (``LLM_CALL_STARTED``, ``TOOL_CALL_STARTED``, ``GATE_RUN_STARTED``: Temporal
   writes the start when the attempt ends) include the activity's run time.
2. **Export throughput**: the same N sessions exported again from Temporal into a
   fresh directory (history fetched over gRPC, mapped, chained, one write per line,
   one fsync, snapshot and head per page), 8 sessions at a time; then offline
   (saved histories, no network) and the pure mapping alone (map + chain, no I/O).
3. **Verify throughput** on a synthetic log of ``--verify-events`` events (the demo
   session's events repeated, re-chained): ``verify_lines`` (parse, canonical form,
   hash, chain) against the floor of plain ``sha256`` over the same line bytes, in
   the same run; the ratio says what checking costs beyond hashing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stack import free_port
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.mcp_pool import McpClientPool
from api.devserver import DevServer
from api.worker import build_worker
from observation.exporter import Chain, Exporter, export_history, export_session, map_history
from observation.exporter.chain import GENESIS, HASH_PREFIX, line_bytes
from observation.exporter.decode import load_history
from observation.exporter.verify import read_lines, verify_lines
from observation.telemetry import STORE_NAME, TelemetryStore
from observation.telemetry.hook import SessionTelemetry, Telemetry
from observation.telemetry.otel import time_ns
from workflows.messages import ReplyInput, SessionInput
from workflows.session_state import PendingRequest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "tests" / "workflows" / "histories" / "demo.json"
STARTED_AT_START = ("LLM_CALL_STARTED", "TOOL_CALL_STARTED", "GATE_RUN_STARTED")


def q(samples: list[float], p: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else float("nan")
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


# -- 1. lag while sessions run -------------------------------------------------------


class TimedObserver:
    """Wraps the session's telemetry hook; notes each appended line's lag."""

    def __init__(self, inner: SessionTelemetry | None, lag: dict[str, list[float]]) -> None:
        self.inner, self.lag, self.commits, self.appended = inner, lag, 0, 0

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        if not replayed:
            self.appended += 1
            ms = (time.time_ns() - time_ns(event["ts"])) / 1e6
            kind = "first page" if self.commits == 0 else "following"
            self.lag[kind].append(ms)
            if event["type"] not in STARTED_AT_START:
                self.lag[kind + " (no activity start)"].append(ms)
        if self.inner is not None:
            self.inner.event(event, replayed)

    def commit(self) -> None:
        self.commits += 1 if self.appended else 0  # the writer also commits on open
        if self.inner is not None:
            self.inner.commit()


def session_config(turns: int) -> dict:
    responses = [{"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}}
                 for i in range(turns)] + [{"text": "done", "end": True}]
    return {"initial_message": "go", "agent": {"llm": {"provider": "scripted",
                                                        "responses": responses}}}


async def drive(client: Client, tq: str, turns: int, poll_s: float) -> str:
    sid = f"s-bench{uuid.uuid4().hex[:10]}"
    inp = SessionInput.model_validate({"session_id": sid, "config": session_config(turns),
                                       "journal_in_header": True})  # as the API starts it
    h = await client.start_workflow("SessionWorkflow", inp, id=sid, task_queue=tq)
    for i in range(turns):
        while True:
            pending = await h.query("pending_request", result_type=PendingRequest | None)
            if pending is not None and pending.prompt == f"step {i}?":
                break
            await asyncio.sleep(poll_s)  # a person polling for the question
        await h.execute_update("reply", ReplyInput(request_id=pending.request_id, approve=True))
    await h.result()
    return sid


async def live(client: Client, data: Path, n: int, turns: int, poll_s: float,
               telemetry: bool = True) -> dict[str, Any]:
    lag: dict[str, list[float]] = {k: [] for k in (
        "first page", "following", "first page (no activity start)",
        "following (no activity start)")}
    (data / "runs").mkdir(parents=True)
    store = TelemetryStore.open(data / STORE_NAME)
    hook = Telemetry(store, None, background=True)  # as start_telemetry makes it

    def observer(sid: str) -> TimedObserver:
        return TimedObserver(hook.observer(sid) if telemetry else None, lag)

    exporter = Exporter(client, data / "runs", observers=observer)
    stop = asyncio.Event()
    task = asyncio.create_task(exporter.run(stop))
    tq = f"bench-{uuid.uuid4().hex[:6]}"
    pool = McpClientPool()
    t0 = time.perf_counter()
    async with build_worker(client, tq, pool, max_concurrent_activities=200):
        sids = await asyncio.gather(*(drive(client, tq, turns, poll_s) for _ in range(n)))
        sessions_s = time.perf_counter() - t0
        while not set(sids) <= exporter.done:  # the last lines of the last sessions
            assert exporter.fatal is None, exporter.fatal
            await asyncio.sleep(0.05)
    all_s = time.perf_counter() - t0
    stop.set()
    await task
    await pool.aclose()
    lines = sum(len(v) for k, v in lag.items() if "(" not in k)
    hook.flush()
    runs = len(store.runs())
    hook.close()
    return {"sids": sids, "lag": lag, "lines": lines, "sessions_s": sessions_s,
            "all_s": all_s, "telemetry_runs": runs}


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


async def histories(client: Client, sids: list[str]) -> list[tuple[str, list[HistoryEvent]]]:
    return [(s, list((await client.get_workflow_handle(s).fetch_history()).events))
            for s in sids]


def offline(hists: list[tuple[str, list[HistoryEvent]]], out: Path) -> tuple[int, float, float]:
    t0 = time.perf_counter()
    events = sum(export_history(sid, evs, out).written for sid, evs in hists)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mapped = sum(len(list(Chain().link_all(map_history(sid, evs)))) for sid, evs in hists)
    assert mapped == events
    return events, write_s, time.perf_counter() - t0


# -- 3. verify throughput --------------------------------------------------------------


def _dumps(obj: Any) -> bytes:
    """JCS for these events (ASCII keys, no non-integral floats after the JSON
    round trip below); the verify pass itself checks every line is canonical."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def synthetic_log(path: Path, n: int) -> int:
    """The demo log's events repeated to ``n`` lines, re-numbered and re-chained."""
    sid, events = load_history(DEMO.read_text())
    template = [json.loads(line_bytes(e)) for e in Chain().link_all(map_history(sid, events))]
    prev, size = GENESIS, 0
    with path.open("wb", buffering=1 << 20) as f:
        for i in range(n):
            body = dict(template[i % len(template)])
            del body["event_hash"]
            body.update(seq=i + 1, event_id=f"bench:{i + 1}:0", prev_hash=prev)
            prev = hashlib.sha256(HASH_PREFIX + _dumps(body)).hexdigest()
            body["event_hash"] = prev
            line = _dumps(body) + b"\n"
            size += f.write(line)
    return size


def verify_bench(path: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    count = 0
    for event in verify_lines(read_lines(path)):
        count = event["seq"]
    verify_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for line in read_lines(path):
        hashlib.sha256(line).digest()
    sha_lines_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    sha_file_s = time.perf_counter() - t0
    return {"events": count, "verify_s": verify_s, "sha_lines_s": sha_lines_s,
            "sha_file_s": sha_file_s}


# -- main ------------------------------------------------------------------------------


def report_lag(lag: dict[str, list[float]]) -> None:
    print(f"  {'lines':34} {'n':>7} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for kind, xs in lag.items():
        if xs:
            print(f"  {kind:34} {len(xs):7d} {q(xs, 50):9.1f} {q(xs, 99):9.1f} "
                  f"{max(xs):9.1f}")
    every = [x for k, v in lag.items() if "(" not in k for x in v]
    print(f"  {'all lines':34} {len(every):7d} {q(every, 50):9.1f} {q(every, 99):9.1f} "
          f"{max(every):9.1f}")


async def main(argv: Iterable[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="concurrent sessions")
    p.add_argument("--turns", type=int, default=3, help="replies per session")
    p.add_argument("--poll-ms", type=float, default=100,
                   help="how often each simulated person polls for its question")
    p.add_argument("--verify-events", type=int, default=1_000_000)
    p.add_argument("--skip-live", action="store_true")
    p.add_argument("--no-telemetry", action="store_true",
                   help="export the logs only (no telemetry store), to see its share")
    p.add_argument("--skip-verify", action="store_true")
    args = p.parse_args(list(argv))
    with tempfile.TemporaryDirectory(prefix="hitlflow-bench-") as tmp:
        tmpd = Path(tmp)
        if not args.skip_live:
            async with DevServer(tmpd / "temporal", port=free_port(), ui_port=None) as server:
                client = await Client.connect(server.address,
                                              data_converter=pydantic_data_converter)
                r = await live(client, tmpd / "data", args.n, args.turns, args.poll_ms / 1000,
                               telemetry=not args.no_telemetry)
                print(f"1. exporter lag: {args.n} concurrent sessions x {args.turns} replies "
                      f"(polled every {args.poll_ms:g} ms) on one tuned dev server, worker, "
                      f"exporter{'' if args.no_telemetry else ' and telemetry store'} in this "
                      "process")
                print(f"  {r['lines']} lines written in {r['all_s']:.1f} s (sessions done in "
                      f"{r['sessions_s']:.1f} s): {r['lines'] / r['all_s']:.0f} lines/s live; "
                      f"{r['telemetry_runs']} telemetry runs")
                report_lag(r["lag"])
                events, secs = await reexport(client, r["sids"], tmpd / "again")
                same = all((tmpd / "again" / s / "events.ndjson").read_bytes()
                           == (tmpd / "data" / "runs" / s / "events.ndjson").read_bytes()
                           for s in r["sids"])
                hists = await histories(client, r["sids"])
            print("2. export throughput")
            print(f"  from Temporal (fetch + map + write + fsync, 8 at a time): {events} events "
                  f"in {secs:.2f} s = {events / secs:,.0f} events/s (same bytes as live: {same})")
            ev, write_s, map_s = offline(hists, tmpd / "offline")
            print(f"  offline (saved histories; map + write + fsync): {ev / write_s:,.0f} "
                  f"events/s; map + chain only (no I/O): {ev / map_s:,.0f} events/s")
            shutil.rmtree(tmpd / "again", ignore_errors=True)
        if not args.skip_verify:
            path = tmpd / "synthetic.ndjson"
            t0 = time.perf_counter()
            size = synthetic_log(path, args.verify_events)
            gen_s = time.perf_counter() - t0
            v = verify_bench(path)
            mb = size / 1e6
            print(f"3. verify throughput: synthetic log of {v['events']:,} events, "
                  f"{mb:,.0f} MB (made in {gen_s:.1f} s)")
            print(f"  verify_lines: {v['verify_s']:.2f} s = {v['events'] / v['verify_s']:,.0f} "
                  f"events/s, {mb / v['verify_s']:.1f} MB/s")
            print(f"  floor, sha256 of each line: {v['sha_lines_s']:.2f} s = "
                  f"{v['events'] / v['sha_lines_s']:,.0f} events/s, "
                  f"{mb / v['sha_lines_s']:.0f} MB/s; sha256 of the file: "
                  f"{mb / v['sha_file_s']:.0f} MB/s")
            print(f"  ratio verify / sha256 of each line: {v['verify_s'] / v['sha_lines_s']:.1f}x"
                  f"; / sha256 of the file: {v['verify_s'] / v['sha_file_s']:.1f}x")
            with contextlib.suppress(OSError):
                path.unlink()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
