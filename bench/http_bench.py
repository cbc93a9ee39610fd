"""Benchmark: N HTTP clients driving sessions through `hitlflow up`, with the bare
Temporal update as the baseline, and the read endpoints against /healthz.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/http_bench.py                     # 200 clients x 3 replies, then reads
    .venv/bin/python bench/http_bench.py -n 1 --replies 10   # the unloaded latencies
    .venv/bin/python bench/http_bench.py --mode read --read-s 5
    .venv/bin/python bench/http_bench.py --mode auth --read-s 5   # reads: auth off vs a key
    .venv/bin/python bench/http_bench.py --mode cpu          # up's CPU per request, by kind

It starts ``hitlflow up`` as a user runs it (the tuned dev server; the exporter and the
API in ``up``'s process, the worker in its child process) on free ports in a temporary
data dir. The load
generator is kept apart from what it measures: the clients run in ``--procs`` client
processes (asyncio, each client its own connections), started by this one, which
only orchestrates and probes ``/healthz``. Phases, in one run against one ``up``:

``drive``: each client POSTs a session (scripted: R confirm requests), follows its SSE
stream and, R times, on ``conversation.state.changed`` to ``waiting_user`` does
``GET /api/sessions/{id}`` (the pending request) and ``POST .../reply``. Reported:
requests/s and GET requests/s, GET/POST p50/p99, reply -> SSE, and nothing lost
(every accepted reply exactly once in the session's state and in its audit log).
The baseline, once before the drive and once after: a bare workflow
(``bare_workflow.UpdateLoop``, its worker in a process of its own, the sandboxed
runner) on the same Temporal server, the same number of clients each sending R
updates through the Temporal client: the bare update round trip, against which the
reply's p50 is a ratio (both baseline runs pooled, and each).

``read``: one waiting session; ``--read-clients`` (32) clients hammer, ``--read-s``
(10) seconds each, ``/healthz`` (the framework's floor), ``GET /api/sessions/{id}``,
``GET /api/execution/{id}/timeline`` and ``GET /api/sessions?status=waiting_user``.
Reported: each rate as a ratio of /healthz's, and p50/p99.

``auth``: the same reads from two ``up``s side by side, one with authentication off
(``HITLFLOW_API_AUTH=off``), one in local mode read with a person's key (the admin
``up`` adds), each endpoint from one then the other. Reported: each rate with the key
as a ratio of the rate with auth off (target >= 0.8x).

``cpu``: ``up``'s own process CPU per request of each kind the inbox sends (issue 28),
read from ``/proc`` around ``--cpu-requests`` (500) requests sent one after the other
on one keep-alive connection by this process (no load generator competing for the
cores), ``up``'s idle CPU over as long taken off: ``/healthz`` (with Temporal's health
check), ``GET /api/whoami`` (the framework's floor: the doors, no store read),
``GET /api/sessions/{id}?min_seq=`` of a waiting session, ``POST .../reply`` naming
another request (the API's checks, the update's round trip to the workflow's
validator and its 409; nothing changes), ``POST .../messages`` to an ended session
(its 409: the update, then Temporal's record of the session), and SSE: each stream
of an ended session read whole (CPU per event sent).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import httpx
from stack import Up, WorkerProcess, api_headers, cpu_s, p50_p99, pct, ratio, session_body, start_up

from api.cli.sse_client import aparse_lines

STUCK_AFTER_S = 300  # a client still going after this many seconds failed


# ---------------------------------------------------------------------------
# In the client processes: each phase returns a tally (plain data, pickled back)


def new_tally() -> dict[str, Any]:
    return {"lat": {}, "requests": 0, "errors": 0, "results": [], "t0": 0.0, "t1": 0.0}


async def timed(tally: dict, kind: str, coro: Any) -> Any:
    t0 = time.perf_counter()
    r = await coro
    tally["lat"].setdefault(kind, []).append((time.perf_counter() - t0) * 1000)
    tally["requests"] += 1
    if isinstance(r, httpx.Response):
        r.raise_for_status()
    return r


async def at(start_at: float) -> None:
    """All client processes start together."""
    await asyncio.sleep(max(0.0, start_at - time.time()))


def run_phase(fn: Callable[..., Any], *args: Any) -> dict:
    """The entry point of a client process: one phase with its share of clients."""
    tally = new_tally()
    asyncio.run(fn(tally, *args))
    return tally


class Stream:
    """One SSE stream: status changes queued as they arrive, with their arrival time."""

    def __init__(self) -> None:
        self.changes: asyncio.Queue[tuple[dict, float]] = asyncio.Queue()

    async def follow(self, http: httpx.AsyncClient, sid: str) -> None:
        async with http.stream("GET", f"/api/sessions/{sid}/events", timeout=None) as r:
            async for msg in aparse_lines(r.aiter_lines()):
                if msg.event == "conversation.state.changed":
                    # The event's id is its log seq: a read of the read model passes it as
                    # `min_seq` to see at least this change (read-your-writes).
                    change = {**msg.json(), "seq": int(msg.id) if msg.id else 0}
                    self.changes.put_nowait((change, time.perf_counter()))

    async def until(self, to: str) -> tuple[dict, float]:
        while True:
            change, at_ = await self.changes.get()
            if change.get("to") == to:
                return change, at_


async def drive_phase(tally: dict, count: int, url: str, replies: int, data_dir: str,
                      start_at: float) -> None:
    await at(start_at)
    tally["t0"] = time.time()
    tally["results"] = await asyncio.gather(*(drive_client(tally, url, replies, Path(data_dir))
                                              for _ in range(count)))
    tally["t1"] = time.time()


async def drive_client(tally: dict, url: str, replies: int, data_dir: Path) -> tuple[int, int]:
    where = {"stage": "start"}
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=api_headers()) as http:
        try:
            return await asyncio.wait_for(drive(tally, http, replies, data_dir, where),
                                          STUCK_AFTER_S)
        except Exception as err:
            body = err.response.text[:300] if isinstance(err, httpx.HTTPStatusError) else ""
            print(f"client failed: {where}: {type(err).__name__}: {err} {body}",
                  file=sys.stderr)
            tally["errors"] += 1
            return -1, -1


async def drive(tally: dict, http: httpx.AsyncClient, replies: int, data_dir: Path,
                where: dict) -> tuple[int, int]:
    r = await timed(tally, "start", http.post("/api/sessions", json=session_body(replies)))
    sid = where["sid"] = r.json()["session_id"]
    stream = Stream()
    sse = asyncio.create_task(stream.follow(http, sid))
    for i in range(replies):
        where["stage"] = f"waiting_user {i}"
        waiting, _ = await stream.until("waiting_user")
        s = (await timed(tally, "get", http.get(f"/api/sessions/{sid}", params={
            "min_seq": waiting["seq"]}))).json()
        assert s["status"] == "waiting_user" and s["pending"]["prompt"] == f"step {i}?", s
        await timed(tally, "reply", http.post(f"/api/sessions/{sid}/reply", json={
            "request_id": s["pending"]["request_id"], "approve": True}))
        accepted = time.perf_counter()
        where["stage"] = f"replied {i}"
        change, arrived = await stream.until("queued")
        assert change.get("trigger") == "interaction.reply.accepted", change
        tally["lat"].setdefault("reply_to_sse", []).append((arrived - accepted) * 1000)
    where["stage"] = "succeeded"
    await stream.until("succeeded")
    await asyncio.wait_for(sse, 120)
    where["stage"] = "state"
    while not (state := (await http.get(f"/api/sessions/{sid}")).json())["live"] and \
            state.get("status") != "succeeded":
        await asyncio.sleep(0.5)
    where["stage"] = "log"
    return state["replies"], await accepted_in_log(data_dir / "runs" / sid / "events.ndjson")


async def accepted_in_log(log: Path) -> int:
    """How many replies the exported log holds, once it shows the run completed."""
    for _ in range(600):  # the exporter catches up (bounded)
        lines = log.read_text().splitlines() if log.exists() else []
        if any('"RUN_COMPLETED"' in x for x in lines):
            break
        await asyncio.sleep(0.1)
    return sum('"ISSUE_RESOLVED"' in x for x in lines)


async def update_phase(tally: dict, count: int, temporal: str, task_queue: str, updates: int,
                       start_at: float) -> None:
    from temporalio.client import Client

    client = await Client.connect(temporal)
    handles = [await client.start_workflow("UpdateLoop", updates + 1,
                                           id=f"upd-{uuid.uuid4().hex[:10]}",
                                           task_queue=task_queue) for _ in range(count)]

    async def one(h: Any) -> None:
        await h.execute_update("reply", 0, result_type=int)  # untimed: the first task
        for _ in range(updates):
            await timed(tally, "update", h.execute_update("reply", 0, result_type=int))
        await h.result()

    await at(start_at)
    tally["t0"] = time.time()
    await asyncio.gather(*(one(h) for h in handles))
    tally["t1"] = time.time()


async def read_phase(tally: dict, count: int, url: str, path: str, seconds: float,
                     headers: dict[str, str] | None, start_at: float) -> None:
    async def one() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     headers=api_headers() if headers is None else headers
                                     ) as http:
            await http.get(path)  # connect before the clock starts
            await at(start_at)
            while time.time() < start_at + seconds:
                try:
                    await timed(tally, "read", http.get(path))
                except httpx.HTTPError:
                    tally["errors"] += 1

    tally["t0"] = start_at
    await asyncio.gather(*(one() for _ in range(count)))
    tally["t1"] = time.time()


# ---------------------------------------------------------------------------
# In this process: orchestration


class Clients:
    """``procs`` client processes; a phase's clients are split among them."""

    def __init__(self, procs: int) -> None:
        self.procs = procs
        self.pool = ProcessPoolExecutor(procs, mp_context=get_context("spawn"))

    async def run(self, fn: Callable[..., Any], total: int, *args: Any) -> dict:
        """Run ``fn(tally, count, *args, start_at)`` with ``total`` clients split across the
        processes; merge the tallies."""
        loop = asyncio.get_running_loop()
        start_at = time.time() + 3  # processes spawn and import meanwhile
        shares = [total // self.procs + (i < total % self.procs) for i in range(self.procs)]
        tallies = await asyncio.gather(*(
            loop.run_in_executor(self.pool, run_phase, fn, n, *args, start_at)
            for n in shares if n))
        return merge(tallies)

    def close(self) -> None:
        self.pool.shutdown()


def merge(tallies: list[dict]) -> dict:
    out = new_tally()
    for t in tallies:
        for k, v in t["lat"].items():
            out["lat"].setdefault(k, []).extend(v)
        out["requests"] += t["requests"]
        out["errors"] += t["errors"]
        out["results"] += t["results"]
    out["t0"] = min(t["t0"] for t in tallies)
    out["t1"] = max(t["t1"] for t in tallies)
    return out


async def healthz_probe(url: str, done: asyncio.Event) -> list[float]:
    lat: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=api_headers()) as http:
        while not done.is_set():
            t0 = time.perf_counter()
            (await http.get("/healthz")).raise_for_status()
            lat.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.05)
    return lat


async def drive_mode(up: Up, clients: Clients, args: argparse.Namespace) -> None:
    async def bare_updates() -> list[float]:
        tq = f"bench-update-{uuid.uuid4().hex[:6]}"
        with WorkerProcess("bare", up.temporal, tq):
            return (await clients.run(update_phase, args.n, up.temporal, tq,
                                      args.replies))["lat"].get("update", [])

    # The baseline before and after the drive: one run alone varied 1x-2x between runs
    # (the server's own state after a drive: its visibility and history queues).
    before = await bare_updates()
    done = asyncio.Event()
    probe = asyncio.create_task(healthz_probe(up.url, done))
    t = await clients.run(drive_phase, args.n, up.url, args.replies, str(up.data))
    done.set()
    health = await probe
    after = await bare_updates()
    wall = t["t1"] - t["t0"]
    lat = t["lat"]
    exact = sum(1 for state, log in t["results"] if state == log == args.replies)
    print(f"\n== drive: {args.n} clients x {args.replies} replies against `hitlflow up`, "
          f"clients in {clients.procs} process(es) ==")
    print(f"requests/s: {t['requests'] / wall:.1f} ({t['requests']} in {wall:.1f} s, SSE not "
          f"counted); GET session requests/s: {len(lat.get('get', [])) / wall:.1f}")
    for name, key in (("GET session", "get"), ("POST session", "start"),
                      ("POST reply", "reply"), ("reply -> SSE", "reply_to_sse")):
        print(f"{name:16} {p50_p99(lat.get(key, []))}")
    print(f"{'GET /healthz':16} {p50_p99(health)}  (probe from the orchestrator, same time)")
    print(f"bare update: the baseline, {args.n} Temporal clients x {args.replies} updates, "
          f"same server, before and after the drive phase")
    for name, samples in (("  before", before), ("  after", after), ("  both", before + after)):
        print(f"{name:16} {p50_p99(samples)}")
    reply50 = pct(lat["reply"], 50)
    print(f"reply p50 / bare update p50 (both): {ratio(reply50, pct(before + after, 50))} "
          f"(target <= 1.5x; before {ratio(reply50, pct(before, 50))}, "
          f"after {ratio(reply50, pct(after, 50))})")
    print(f"sessions whose every accepted reply is in state and log exactly once: "
          f"{exact}/{args.n} (client errors: {t['errors']})")


async def waiting_session(up: Up, headers: dict[str, str]) -> str:
    async with httpx.AsyncClient(base_url=up.url, timeout=60, headers=headers) as http:
        created = await http.post("/api/sessions", json=session_body(1))
        created.raise_for_status()
        sid = created.json()["session_id"]
        for _ in range(600):
            if (await http.get(f"/api/sessions/{sid}")).json().get("status") == "waiting_user":
                break
            await asyncio.sleep(0.1)
    return sid


def read_paths(sid: str) -> dict[str, str]:
    return {"/healthz": "/healthz", "GET session": f"/api/sessions/{sid}",
            "timeline": f"/api/execution/{sid}/timeline",
            "list waiting": "/api/sessions?status=waiting_user"}


async def read_mode(up: Up, clients: Clients, args: argparse.Namespace) -> None:
    sid = await waiting_session(up, api_headers())
    rows = {}
    for name, path in read_paths(sid).items():
        print(f"read: {name}", file=sys.stderr, flush=True)
        rows[name] = await clients.run(read_phase, args.read_clients, up.url, path,
                                       args.read_s, None)
    base = rows["/healthz"]["requests"] / args.read_s
    print(f"\n== read: {args.read_clients} clients, {args.read_s:.0f} s each, one waiting "
          f"session, clients in {clients.procs} process(es) ==")
    print(f"{'endpoint':14} {'req/s':>8} {'x healthz':>10} {'errors':>7}  latency")
    for name, t in rows.items():
        rate = t["requests"] / args.read_s
        print(f"{name:14} {rate:8.1f} {ratio(rate, base):>10} {t['errors']:7}  "
              f"{p50_p99(t['lat'].get('read', []))}")
    print("target: each >= 0.5x /healthz")


async def auth_mode(clients: Clients, args: argparse.Namespace, tmp: Path) -> None:
    """The read endpoints with authentication off and with a person's key (local mode,
    the admin ``up`` adds: a key looked up in people.json, hashed per request), two
    ``up``s side by side, each endpoint read from one then the other, in one run."""
    for name in ("off", "key"):
        (tmp / name).mkdir(parents=True)
    off = await start_up(tmp / "off", env={"HITLFLOW_API_AUTH": "off",
                                           "HITLFLOW_API_TOKEN": ""})
    on = await start_up(tmp / "key")
    try:
        key = (on.data / "cli-key").read_text().strip()
        stacks = {"off": (off, {}), "key": (on, {"authorization": f"Bearer {key}"})}
        sids = {k: await waiting_session(up, h) for k, (up, h) in stacks.items()}
        rates: dict[str, dict[str, float]] = {}
        for name in read_paths("x"):
            for k, (up, headers) in stacks.items():
                print(f"auth: {name} ({k})", file=sys.stderr, flush=True)
                t = await clients.run(read_phase, args.read_clients, up.url,
                                      read_paths(sids[k])[name], args.read_s, headers)
                if t["errors"]:
                    print(f"  {t['errors']} errors", file=sys.stderr)
                rates.setdefault(name, {})[k] = t["requests"] / args.read_s
        print(f"\n== auth: {args.read_clients} clients, {args.read_s:.0f} s each, auth off "
              "against a person's key (local mode), one run ==")
        print(f"{'endpoint':14} {'off req/s':>10} {'key req/s':>10} {'key/off':>8}")
        for name, r in rates.items():
            print(f"{name:14} {r['off']:10.1f} {r['key']:10.1f} {ratio(r['key'], r['off']):>8}")
        print("target: each >= 0.8x")
    finally:
        for up in (off, on):
            print(f"`hitlflow up` exit code on Ctrl-C: {await up.stop()}")


async def idle_cpu_ms_per_s(up: Up, seconds: float) -> float:
    before = cpu_s(up.pid)
    await asyncio.sleep(seconds)
    return (cpu_s(up.pid) - before) * 1000 / seconds


async def cpu_of(up: Up, idle_ms_s: float, count: int,
                 one: Callable[[], Any]) -> tuple[float, float]:
    """``up``'s CPU in ms per call of ``one`` (idle CPU over the same time taken off),
    and the wall time per call in ms."""
    for _ in range(min(20, count)):  # warm: first-use imports, caches
        await one()
    t0, c0 = time.perf_counter(), cpu_s(up.pid)
    for _ in range(count):
        await one()
    wall, cpu = time.perf_counter() - t0, cpu_s(up.pid) - c0
    return (cpu * 1000 - idle_ms_s * wall) / count, wall * 1000 / count


async def ended_session(http: httpx.AsyncClient, confirms: int) -> str:
    """A session driven to its end: ``confirms`` replies (and an end, should it wait
    for a message after them)."""
    sid = (await http.post("/api/sessions", json=session_body(confirms))).json()["session_id"]
    replies = 0
    for _ in range(6000):
        s = (await http.get(f"/api/sessions/{sid}")).json()
        if s["status"] == "succeeded":
            return sid
        if s["status"] != "waiting_user" or s["replies"] < replies:
            await asyncio.sleep(0.05)  # working, or the read model has not caught up
        elif s["pending"] is None:
            if s["replies"] >= confirms:  # it waits for a message: end it
                (await http.post(f"/api/sessions/{sid}/end", json={})).raise_for_status()
                replies += 1_000_000  # nothing more to send
            else:  # its request is not in the read model yet
                await asyncio.sleep(0.05)
        else:
            (await http.post(f"/api/sessions/{sid}/reply", json={
                "request_id": s["pending"]["request_id"], "approve": True})).raise_for_status()
            replies = s["replies"] + 1
    raise SystemExit(f"session {sid} did not end")


async def cpu_mode(up: Up, args: argparse.Namespace) -> None:
    n = args.cpu_requests
    sid = await waiting_session(up, api_headers())
    async with httpx.AsyncClient(base_url=up.url, timeout=60, headers=api_headers()) as http:
        done = await ended_session(http, 10)
        s = (await http.get(f"/api/sessions/{sid}")).json()
        assert s["status"] == "waiting_user", s
        idle = await idle_cpu_ms_per_s(up, 5.0)

        async def expect(status: int, r: Any) -> None:
            response = await r
            assert response.status_code == status, (response.status_code, response.text)

        async def stream() -> int:
            events = 0
            async with http.stream("GET", f"/api/sessions/{done}/events") as r:
                async for msg in aparse_lines(r.aiter_lines()):
                    events += 1
                    if msg.event == "stream.complete":
                        return events
            raise AssertionError("the stream ended without stream.complete")

        per_stream = await stream()
        kinds: dict[str, Callable[[], Any]] = {
            "/healthz": lambda: expect(200, http.get("/healthz")),
            "GET /api/whoami": lambda: expect(200, http.get("/api/whoami")),
            "GET session ?min_seq": lambda: expect(200, http.get(
                f"/api/sessions/{sid}", params={"min_seq": s["seq"]})),
            "POST reply (409)": lambda: expect(409, http.post(
                f"/api/sessions/{sid}/reply", json={"request_id": "another", "approve": True})),
            "POST messages (409)": lambda: expect(409, http.post(
                f"/api/sessions/{done}/messages", json={"text": "hi"})),
            f"SSE, {per_stream} events": stream,
        }
        rows = {}
        for name, one in kinds.items():
            print(f"cpu: {name}", file=sys.stderr, flush=True)
            rows[name] = await cpu_of(up, idle, n if "SSE" not in name else max(1, n // 10),
                                      one)
    print(f"\n== cpu: `hitlflow up`'s process CPU per request, {n} requests of each kind "
          f"one after the other ({max(1, n // 10)} SSE streams), idle {idle:.2f} ms/s "
          "taken off ==")
    print(f"{'request':24} {'CPU ms':>8} {'wall ms':>8}")
    for name, (cpu, wall) in rows.items():
        print(f"{name:24} {cpu:8.3f} {wall:8.3f}")
    sse_cpu = rows[f"SSE, {per_stream} events"][0]
    print(f"SSE per event sent: {sse_cpu / per_stream:.3f} ms")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="clients driving sessions (200)")
    p.add_argument("--replies", type=int, default=3, help="replies per session (3)")
    p.add_argument("--procs", type=int, default=2, help="client processes (2)")
    p.add_argument("--mode", default="drive,read",
                   help="drive, read, auth (reads: auth off against a key), cpu (up's CPU per "
                   "request), comma-separated "
                   "(drive,read)")
    p.add_argument("--read-clients", type=int, default=32, help="read mode clients (32)")
    p.add_argument("--read-s", type=float, default=10.0, help="seconds per endpoint (10)")
    p.add_argument("--cpu-requests", type=int, default=500,
                   help="cpu mode: requests of each kind (500)")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not args.modes or set(args.modes) - {"drive", "read", "auth", "cpu"}:
        p.error("--mode takes drive, read, auth and cpu, comma-separated")
    return args


async def main(argv: list[str]) -> None:
    args = parse(argv)
    clients = Clients(args.procs)
    with tempfile.TemporaryDirectory() as tmp:
        if args.modes == ["auth"]:
            try:
                await auth_mode(clients, args, Path(tmp))
            finally:
                clients.close()
            return
        up = await start_up(Path(tmp))
        try:
            if "drive" in args.modes:
                await drive_mode(up, clients, args)
            if "read" in args.modes:
                await read_mode(up, clients, args)
            if "cpu" in args.modes:
                await cpu_mode(up, args)
            if "auth" in args.modes:
                await auth_mode(clients, args, Path(tmp) / "auth")
        finally:
            clients.close()
            print(f"`hitlflow up` exit code on Ctrl-C: {await up.stop()}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
