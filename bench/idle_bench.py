"""Benchmark: what N sessions that wait for a person cost one `hitlflow up`.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/idle_bench.py               # 10,000 waiting sessions
    .venv/bin/python bench/idle_bench.py -n 500 --idle-s 10   # quick, for development

It starts ``hitlflow up`` as a user runs it (server; exporter and API in ``up``'s
process; the session worker in a child process of its own) and, through the HTTP API,
``--base`` (100) sessions whose scripted LLM first asks for a confirmation, so each
waits for a person; it measures, then starts more until N wait and measures again, in
the same run:

* RSS of the ``up`` process (exporter and API), of its worker process and of the
  Temporal server;
* CPU of each while everything waits (``/proc/<pid>/stat`` over ``--idle-s``), and
  the idle cost per waiting session ((at N - at base) / (N - base));
* ``GET /api/sessions/{id}`` p50/p99 over random waiting sessions (``--gets``
  requests, 8 at a time, from a client process of its own) at N against at base;
* reply -> next step of a few sessions among them (``--probes``): from just before
  ``POST .../reply`` to the next ``llm_call``'s start, read from the session's history
  (a long-poll; the session then waits again at its second confirmation).

Then a worker restart: a ``hitlflow worker`` process started against the same server
(on a task queue of its own, so that only it can serve the session started with it):
the time until it polls the task queue, and until that new session's first step is
done (it waits for the person). It does whatever a starting worker does for the N
waiting sessions meanwhile. Targets: worker RSS <= 1 GiB, GET p99 at N <= 1.2x at base, idle
CPU near zero.

``--notify`` (issue 26) measures instead what notifications cost N waiting sessions, in
one run: the same stack twice, without and then with ``HITLFLOW_NOTIFY_CONFIG`` (a
webhook per opened request to a receiver in this process; ``up`` runs the notifier as
a child process), N sessions waiting in each; once every webhook arrived, idle CPU and
RSS of up, its worker, the server and (on) the notifier, and the ratio of the totals::

    .venv/bin/python bench/idle_bench.py --notify -n 1000

Target: idle CPU and RSS on within 1.1x of off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import httpx
from stack import (
    StepFollower,
    Up,
    api_headers,
    cpu_share,
    p50_p99,
    pct,
    ratio,
    rss_mib,
    session_body,
    start_cli_worker,
    start_up,
)
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from api.runtime.process import connect
from api.settings import HitlflowSettings
from workflows.messages import CURRENT_BEHAVIOUR, SessionInput
from workflows.search_attributes import SESSION_STATUS

WAITING = 'WorkflowType = "SessionWorkflow" AND SessionStatus = "waiting_user"'


@dataclass
class Figures:
    waiting: int
    rss: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    get: list[float] = field(default_factory=list)
    get_errors: int = 0
    reply: list[float] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Sessions


async def start_sessions(http: httpx.AsyncClient, count: int, concurrency: int) -> list[str]:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> str:
        async with gate:
            r = await http.post("/api/sessions", json=session_body(2))
            return r.raise_for_status().json()["session_id"]

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def until_waiting(client: Client, count: int, timeout_s: float) -> int:
    """Until ``count`` sessions wait (progress on stderr each minute); on time out,
    say so and go on with those that wait (the figures then say how many)."""
    t0 = time.monotonic()
    said = t0
    while (n := (await client.count_workflows(WAITING)).count) < count:
        now = time.monotonic()
        if now - t0 > timeout_s:
            print(f"only {n} of {count} sessions wait after {timeout_s:.0f} s; measuring "
                  "those", file=sys.stderr, flush=True)
            return n
        if now - said >= 60:
            print(f"{n} of {count} wait after {now - t0:.0f} s", file=sys.stderr, flush=True)
            said = now
        await asyncio.sleep(1)
    return n


# ---------------------------------------------------------------------------
# Measures


def _gets(url: str, sids: list[str], count: int) -> tuple[list[float], int]:
    """In a client process of its own: ``count`` GETs of random sessions, 8 at a time;
    (latencies in ms, errors)."""
    latencies: list[float] = []
    errors = 0

    async def run() -> None:
        nonlocal errors
        gate = asyncio.Semaphore(8)
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=api_headers()) as http:
            async def one(sid: str) -> None:
                nonlocal errors
                async with gate:
                    t0 = time.perf_counter()
                    try:
                        (await http.get(f"/api/sessions/{sid}")).raise_for_status()
                    except httpx.HTTPError:
                        errors += 1
                        return
                    latencies.append((time.perf_counter() - t0) * 1000)

            await one(sids[0])  # connections open, imports done: not measured
            latencies.clear()
            await asyncio.gather(*(one(random.choice(sids)) for _ in range(count)))

    asyncio.run(run())
    return latencies, errors


async def get_latencies(url: str, sids: list[str], count: int, f: Figures) -> None:
    """Measured from a fresh process: this one holds what it needed to start N sessions,
    and its own garbage collector's pauses would count as the API's latency."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        f.get, f.get_errors = await asyncio.get_running_loop().run_in_executor(
            pool, _gets, url, sids, count)


async def reply_to_next_step(http: httpx.AsyncClient, client: Client, sid: str) -> float:
    """Answer the session's first request; ms until its next LLM call started."""
    follower = StepFollower(client.get_workflow_handle(sid), long_poll=False)
    try:
        await asyncio.wait_for(follower.next_wait(), 120)
        pending = (await http.get(f"/api/sessions/{sid}")).raise_for_status().json()["pending"]
        sent = time.time()
        (await http.post(f"/api/sessions/{sid}/reply", json={
            "request_id": pending["request_id"], "approve": True})).raise_for_status()
        return (await asyncio.wait_for(follower.started(1), 120) - sent) * 1000
    finally:
        follower.stop()


async def measure(up: Up, http: httpx.AsyncClient, client: Client, unreplied: list[str],
                  args: argparse.Namespace, settle_s: float) -> Figures:
    waiting = (await client.count_workflows(WAITING)).count
    print(f"measuring at {waiting} waiting", file=sys.stderr, flush=True)
    f = Figures(waiting)
    await asyncio.sleep(settle_s)
    pids = {"up": up.pid, "worker": up.worker_pid, "server": up.server_pid}
    f.cpu = await cpu_share(pids, args.idle_s)
    f.rss = {k: rss_mib(p) for k, p in pids.items()}
    await get_latencies(up.url, unreplied, args.gets, f)
    for _ in range(args.probes):
        f.reply.append(await reply_to_next_step(http, client, unreplied.pop()))
    return f


@dataclass
class Restart:
    polls_s: float | None  # None: not within RESTART_TIMEOUT_S
    first_step_s: float | None
    worker_rss: float


RESTART_TIMEOUT_S = 180.0


async def worker_restart(up: Up, client: Client) -> Restart:
    tq = f"restart-{uuid.uuid4().hex[:6]}"
    t0 = time.perf_counter()
    proc = await start_cli_worker(up.temporal, tq)
    try:
        sid = f"restart-{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(  # as POST /api/sessions does, on this queue
            "SessionWorkflow", SessionInput.model_validate(
                {"session_id": sid, "config": session_body(1), "behaviour": CURRENT_BEHAVIOUR}),
            id=sid, task_queue=tq,
            search_attributes=TypedSearchAttributes([SearchAttributePair(SESSION_STATUS,
                                                                         "queued")]))
        follower = StepFollower(handle, long_poll=False, poll_s=0.05)
        polls_s = first_s = None
        with contextlib.suppress(TimeoutError):
            polls_s = await asyncio.wait_for(until_polled(client, tq), RESTART_TIMEOUT_S) - t0
            await asyncio.wait_for(follower.next_wait(), RESTART_TIMEOUT_S)
            first_s = time.perf_counter() - t0
        follower.stop()
        return Restart(polls_s, first_s, rss_mib(proc.pid))
    finally:
        proc.send_signal(signal.SIGINT)
        await proc.wait()


async def until_polled(client: Client, tq: str) -> float:
    req = DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=tq),
                                   task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
    while not (await client.workflow_service.describe_task_queue(req)).pollers:
        await asyncio.sleep(0.05)
    return time.perf_counter()


# ---------------------------------------------------------------------------


def report(base: Figures, full: Figures, restart: Restart, start_rate: float,
           args: argparse.Namespace) -> None:
    print(f"\n== {full.waiting} sessions waiting for a person on one `hitlflow up` "
          f"(against {base.waiting} in the same run) ==")
    print(f"starting them: {start_rate:.1f} sessions/s until all waited "
          f"(POST, {args.concurrency} at a time)")
    print(f"{'':28} {'at ' + str(base.waiting):>14} {'at ' + str(full.waiting):>14} {'ratio':>7}")

    def row(name: str, a: float, b: float, unit: str) -> None:
        print(f"{name:28} {a:12.1f}{unit:>2} {b:12.1f}{unit:>2} {ratio(b, a):>7}")

    row("RSS up (exporter+API)", base.rss["up"], full.rss["up"], "Mi")
    row("RSS up's worker process", base.rss["worker"], full.rss["worker"], "Mi")
    row("RSS Temporal server", base.rss["server"], full.rss["server"], "Mi")
    row("CPU up, % of a core", base.cpu["up"] * 100, full.cpu["up"] * 100, "%")
    row("CPU worker, % of a core", base.cpu["worker"] * 100, full.cpu["worker"] * 100, "%")
    row("CPU server, % of a core", base.cpu["server"] * 100, full.cpu["server"] * 100, "%")
    row("GET session p50", pct(base.get, 50), pct(full.get, 50), "ms")
    row("GET session p99", pct(base.get, 99), pct(full.get, 99), "ms")
    row("reply -> next step p50", pct(base.reply, 50), pct(full.reply, 50), "ms")
    extra = full.waiting - base.waiting
    if extra > 0:
        for who in ("up", "worker", "server"):
            per = (full.cpu[who] - base.cpu[who]) / extra * 1e6
            print(f"idle CPU per waiting session, {who}: {per:.2f} us of CPU per second")
    print(f"GET errors: {base.get_errors} at base, {full.get_errors} at N")
    print(f"GET at N: {p50_p99(full.get)}; reply -> next step at N: {p50_p99(full.reply)}")
    def secs(x: float | None) -> str:
        return f"{x:.2f} s" if x is not None else f"not within {RESTART_TIMEOUT_S:.0f} s"

    print(f"worker restart (`hitlflow worker`, own process): polls after "
          f"{secs(restart.polls_s)}, a new session's first step done after "
          f"{secs(restart.first_step_s)}, its RSS then {restart.worker_rss:.0f} MiB")
    print("targets: worker RSS <= 1024 MiB; GET p99 at N <= 1.2x at base; idle CPU near zero")


# ---------------------------------------------------------------------------
# --notify: notifications on vs off


async def notify_stack(args: argparse.Namespace, on: bool) -> dict[str, dict[str, float]]:
    """One stack with N waiting sessions (and, ``on``, the notifier having sent a webhook
    for each): idle CPU share and RSS per process."""
    import json

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.api.notify.webhook_receiver import Receiver

    receiver = Receiver().start() if on else None
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        env: dict[str, str] = {}
        if receiver is not None:
            cfg = data / "notify.json"
            cfg.write_text(json.dumps({
                "channels": {"hook": {"type": "webhook", "url_env": "BENCH_HOOK_URL",
                                      "secret_env": "BENCH_HOOK_SECRET"}},
                "routes": [{"to": "*", "channel": "hook", "on": ["opened"]}]}))
            env = {"HITLFLOW_NOTIFY_CONFIG": str(cfg), "BENCH_HOOK_URL": receiver.url,
                   "BENCH_HOOK_SECRET": receiver.secret}
        up = await start_up(data, env=env)
        try:
            client = await connect(HitlflowSettings(temporal_address=up.temporal))
            limits = httpx.Limits(max_connections=args.concurrency + 8)
            async with httpx.AsyncClient(base_url=up.url, timeout=120, headers=api_headers(),
                                         limits=limits) as http:
                await start_sessions(http, args.n, args.concurrency)
                await until_waiting(client, args.n, args.wait_s)
            if receiver is not None:
                deadline = time.monotonic() + args.wait_s
                while len(set(receiver.ids())) < args.n and time.monotonic() < deadline:
                    await asyncio.sleep(1)
                print(f"webhooks received: {len(set(receiver.ids()))} of {args.n}",
                      file=sys.stderr, flush=True)
            await asyncio.sleep(args.settle_full_s or args.settle_s)
            pids = {"up": up.pid, "worker": up.worker_pid, "server": up.server_pid}
            if on:
                children = Path(f"/proc/{up.pid}/task/{up.pid}/children").read_text().split()
                pids["notifier"] = next(
                    int(p) for p in children
                    if b"api.cli\x00notifier\x00" in Path(f"/proc/{p}/cmdline").read_bytes())
            cpu = await cpu_share(pids, args.idle_s)
            return {"cpu": cpu, "rss": {k: rss_mib(p) for k, p in pids.items()}}
        finally:
            print(f"`hitlflow up` exit code on Ctrl-C: {await up.stop()}", file=sys.stderr)
            if receiver is not None:
                receiver.stop()


def notify_report(off: dict[str, dict[str, float]], on: dict[str, dict[str, float]],
                  args: argparse.Namespace) -> None:
    print(f"\n== {args.n} sessions waiting for a person: notifications off vs on "
          "(the same run) ==")
    print(f"{'':30} {'off':>10} {'on':>10} {'ratio':>7}")
    for who in ("up", "worker", "server", "notifier"):
        a, b = off["cpu"].get(who, 0.0) * 100, on["cpu"].get(who, 0.0) * 100
        print(f"{'CPU ' + who + ', % of a core':30} {a:10.2f} {b:10.2f} {ratio(b, a):>7}")
    for who in ("up", "worker", "server", "notifier"):
        a, b = off["rss"].get(who, 0.0), on["rss"].get(who, 0.0)
        print(f"{'RSS ' + who + ', MiB':30} {a:10.1f} {b:10.1f} {ratio(b, a):>7}")
    cpu_off, cpu_on = sum(off["cpu"].values()) * 100, sum(on["cpu"].values()) * 100
    rss_off, rss_on = sum(off["rss"].values()), sum(on["rss"].values())
    print(f"{'CPU all, % of a core':30} {cpu_off:10.2f} {cpu_on:10.2f} {ratio(cpu_on, cpu_off):>7}")
    print(f"{'RSS all, MiB':30} {rss_off:10.1f} {rss_on:10.1f} {ratio(rss_on, rss_off):>7}")
    print("target: on within 1.1x of off (idle CPU and RSS)")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=10_000, help="waiting sessions (10,000)")
    p.add_argument("--base", type=int, default=100, help="the first measure, at (100)")
    p.add_argument("--concurrency", type=int, default=16, help="POSTs at a time (16)")
    p.add_argument("--idle-s", type=float, default=30.0, help="CPU sampling, s (30)")
    p.add_argument("--settle-s", type=float, default=5.0, help="quiet before sampling (5)")
    p.add_argument("--settle-full-s", type=float, default=None,
                   help="quiet before sampling at N (default: --settle-s); the exporter "
                        "may still be catching up when the last session waits")
    p.add_argument("--gets", type=int, default=500, help="GETs per measure (500)")
    p.add_argument("--probes", type=int, default=10, help="replies per measure (10)")
    p.add_argument("--wait-s", type=float, default=3600.0,
                   help="how long N may take to wait before measuring those that do (3600)")
    p.add_argument("--data-dir", help="keep up's data here (default: a temporary folder)")
    p.add_argument("--notify", action="store_true",
                   help="notifications off vs on, N waiting sessions each (issue 26)")
    args = p.parse_args(argv)
    if not 0 < args.base + args.probes < args.n:
        p.error("need 0 < --base + --probes < -n")
    return args


async def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.notify:
        off = await notify_stack(args, on=False)
        on = await notify_stack(args, on=True)
        notify_report(off, on, args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(args.data_dir or tmp)  # kept with --data-dir (up.stderr.log, runs/)
        data.mkdir(parents=True, exist_ok=True)
        up = await start_up(data)
        try:
            client = await connect(HitlflowSettings(temporal_address=up.temporal))
            limits = httpx.Limits(max_connections=args.concurrency + 8)
            async with httpx.AsyncClient(base_url=up.url, timeout=120, headers=api_headers(),
                                         limits=limits) as http:
                sids = await start_sessions(http, args.base, args.concurrency)
                await until_waiting(client, args.base, args.wait_s)
                base = await measure(up, http, client, sids, args, args.settle_s)
                t0 = time.perf_counter()
                more = await start_sessions(http, args.n - args.base, args.concurrency)
                await until_waiting(client, args.n, args.wait_s)
                start_rate = (args.n - args.base) / (time.perf_counter() - t0)
                full = await measure(up, http, client, sids + more, args,
                                     args.settle_full_s or args.settle_s)
                restart = await worker_restart(up, client)
        finally:
            print(f"`hitlflow up` exit code on Ctrl-C: {await up.stop()}", file=sys.stderr)
    report(base, full, restart, start_rate, args)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
