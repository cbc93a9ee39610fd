"""Benchmark: the dev server's own defaults vs the flags ``hitlflow up`` uses.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/devserver_flags.py                    # default vs chosen
    .venv/bin/python bench/devserver_flags.py -n 300 --variants default,issue,chosen

For each variant it starts a fresh ``temporal server start-dev`` on a SQLite file
(as ``up`` does), runs a bare session-like workflow — wait for a signal, upsert
``SessionStatus``, run an activity, upsert ``SessionStatus``/``WaitingSince``, wait
again — and measures, in this one process:

* reply → next step: from just before ``signal()`` to the first line of the activity
  that the signal unblocks (N samples, after a warm-up);
* start → visible: from ``start_workflow()`` to the session being listed by a
  ``SessionStatus = "waiting_user"`` visibility query (what ``GET /api/sessions`` and
  the Temporal UI filter see).

It prints p50/p99 per variant and the ratio of each variant to ``default``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from api.runtime.devserver import DevServer, tuning_args
from workflows.search_attributes import SESSION_STATUS, WAITING_SINCE

TASK_QUEUE = "bench"

_PRAGMAS = ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]


def _dc(key: str, value: str) -> list[str]:
    return ["--dynamic-config-value", f"{key}={value}"]


VARIANTS: dict[str, list[str]] = {
    "default": [],
    # What the issue measured: WAL + the transfer queue poll rate.
    "issue": [
        "--sqlite-pragma", "journal_mode=wal",
        *_dc("history.transferProcessorMaxPollRPS", "10000"),
    ],
    "wal+sync-normal": [*_PRAGMAS, *_dc("history.transferProcessorMaxPollRPS", "10000")],
    "all-pollrps": [
        *_PRAGMAS,
        *_dc("history.transferProcessorMaxPollRPS", "10000"),
        *_dc("history.timerProcessorMaxPollRPS", "10000"),
        *_dc("history.visibilityProcessorMaxPollRPS", "10000"),
    ],
    "chosen": tuning_args(),
    "chosen+1-partition": [
        *tuning_args(),
        *_dc("matching.numTaskqueueReadPartitions", "1"),
        *_dc("matching.numTaskqueueWritePartitions", "1"),
    ],
}  # fmt: skip


# ---------------------------------------------------------------------------
# The workload


class Probe:
    starts: asyncio.Queue[tuple[int, float]]


probe = Probe()


@activity.defn
async def next_step(i: int) -> int:
    probe.starts.put_nowait((i, time.perf_counter()))
    return i


@workflow.defn
class ReplyLoop:
    def __init__(self) -> None:
        self.replies: list[int] = []
        self.handled = 0

    @workflow.signal
    def reply(self, i: int) -> None:
        self.replies.append(i)

    @workflow.query
    def handled_count(self) -> int:
        return self.handled

    @workflow.run
    async def run(self, n: int) -> int:
        for _ in range(n):
            await workflow.wait_condition(lambda: bool(self.replies))
            i = self.replies.pop(0)
            workflow.upsert_search_attributes([SESSION_STATUS.value_set("running")])
            await workflow.execute_activity(
                next_step, i, start_to_close_timeout=timedelta(seconds=30)
            )
            workflow.upsert_search_attributes(
                [SESSION_STATUS.value_set("waiting_user"), WAITING_SINCE.value_set(workflow.now())]
            )
            self.handled += 1
        return self.handled


@workflow.defn
class WaitingSession:
    @workflow.run
    async def run(self) -> None:
        workflow.upsert_search_attributes(
            [SESSION_STATUS.value_set("waiting_user"), WAITING_SINCE.value_set(workflow.now())]
        )
        await workflow.wait_condition(lambda: False)


# ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pct(xs: Sequence[float], p: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[p - 1] if len(xs) > 1 else xs[0]


async def _reply_latencies(client: Client, n: int, warmup: int) -> list[float]:
    handle = await client.start_workflow(
        ReplyLoop.run, n + warmup, id=f"bench-{uuid.uuid4()}", task_queue=TASK_QUEUE
    )
    out: list[float] = []
    for i in range(n + warmup):
        t0 = time.perf_counter()
        await handle.signal(ReplyLoop.reply, i)
        j, t1 = await asyncio.wait_for(probe.starts.get(), 30)
        assert j == i
        if i >= warmup:
            out.append(t1 - t0)
        # Wait until the session is back to waiting before the next reply.
        while await handle.query(ReplyLoop.handled_count) < i + 1:
            await asyncio.sleep(0.001)
    await handle.result()
    return out


async def _visibility_latencies(client: Client, k: int) -> list[float]:
    out: list[float] = []
    for _ in range(k):
        wid = f"vis-{uuid.uuid4()}"
        t0 = time.perf_counter()
        handle = await client.start_workflow(WaitingSession.run, id=wid, task_queue=TASK_QUEUE)
        query = f"WorkflowId = '{wid}' AND {SESSION_STATUS.name} = 'waiting_user'"
        while (await client.count_workflows(query)).count == 0:
            if time.perf_counter() - t0 > 30:
                raise TimeoutError(f"{wid} never became visible as waiting_user")
            await asyncio.sleep(0.002)
        out.append(time.perf_counter() - t0)
        await handle.terminate()
    return out


async def run_variant(name: str, args: list[str], n: int, warmup: int, k: int) -> dict:
    probe.starts = asyncio.Queue()
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        server = DevServer(tmp, port=_free_port(), ui_port=_free_port(), tuning=args)
        async with server:
            client = await server.connect()
            async with Worker(
                client,
                task_queue=TASK_QUEUE,
                workflows=[ReplyLoop, WaitingSession],
                activities=[next_step],
                # The script's own module cannot be sandbox-imported; the server is
                # what is compared here, the workflow code is the same for every variant.
                workflow_runner=UnsandboxedWorkflowRunner(),
            ):
                reply = await _reply_latencies(client, n, warmup)
                vis = await _visibility_latencies(client, k)
    return {"name": name, "reply": reply, "vis": vis}


def _fmt_ms(x: float) -> str:
    return f"{x * 1000:7.1f}"


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200, help="reply samples per variant (200)")
    ap.add_argument("--warmup", type=int, default=20, help="warm-up replies (20)")
    ap.add_argument("-k", type=int, default=30, help="visibility samples per variant (30)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the variants this many times, interleaved, and pool the samples")
    ap.add_argument("--variants", default="default,chosen",
                    help=f"comma-separated, from: {', '.join(VARIANTS)} (default,chosen)")
    ns = ap.parse_args(argv)
    names = [v.strip() for v in ns.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    if "default" not in names:
        names.insert(0, "default")

    pooled: dict[str, dict] = {name: {"name": name, "reply": [], "vis": []} for name in names}
    for rnd in range(ns.rounds):
        for name in names:
            print(f"round {rnd + 1}/{ns.rounds}, {name}: "
                  f"{' '.join(VARIANTS[name]) or '(server defaults)'}", file=sys.stderr, flush=True)
            r = await run_variant(name, VARIANTS[name], ns.n, ns.warmup, ns.k)
            pooled[name]["reply"] += r["reply"]
            pooled[name]["vis"] += r["vis"]
    results = list(pooled.values())

    base = results[0]
    b50, b99 = _pct(base["reply"], 50), _pct(base["reply"], 99)
    v50 = _pct(base["vis"], 50)
    print(f"\nreply → next activity start (n={ns.n}×{ns.rounds}) and start → visible as "
          f"waiting_user (k={ns.k}×{ns.rounds}), ms; ratio = variant / default")
    print(f"{'variant':<20} {'p50':>7} {'p99':>7} {'×p50':>6} {'×p99':>6}   "
          f"{'vis p50':>7} {'vis p99':>7} {'×p50':>6}")
    for r in results:
        r50, r99 = _pct(r["reply"], 50), _pct(r["reply"], 99)
        s50, s99 = _pct(r["vis"], 50), _pct(r["vis"], 99)
        print(f"{r['name']:<20} {_fmt_ms(r50)} {_fmt_ms(r99)} {r50 / b50:6.2f} {r99 / b99:6.2f}"
              f"   {_fmt_ms(s50)} {_fmt_ms(s99)} {s50 / v50:6.2f}")
    print("\nchosen flags (api.runtime.devserver.tuning_args()):\n  " + " ".join(tuning_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
