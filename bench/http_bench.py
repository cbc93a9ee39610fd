"""Benchmark: N concurrent HTTP clients, each driving a session through R replies.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/http_bench.py               # 200 clients x 3 replies
    .venv/bin/python bench/http_bench.py -n 50
    .venv/bin/python bench/http_bench.py -n 1 --replies 10   # the unloaded latencies

It starts ``hitlflow up`` (the tuned dev server, a worker, the exporter and the
API: one process, as a user runs it) on free ports in a temporary data dir; the
clients run in this process. Each client POSTs a session (scripted: R confirm
requests), follows its SSE stream and, R times, on the stream's
``conversation.state.changed`` to ``waiting_user`` does ``GET /api/sessions/{id}``
(the pending request) and ``POST .../reply`` -- what an application would do.

Reported: requests per second, p50/p99 of GET session and POST reply, reply ->
SSE (from the reply being accepted to its ``conversation.state.changed``
reaching the SSE client), and nothing lost: every accepted reply appears exactly
once in the session's state and in its audit log. The baseline measured in the
same run is ``GET /healthz`` (the HTTP stack alone, same server, same load). A
client that fails, or is still going after ``STUCK_AFTER_S``, is reported on stderr
and counted as not exact.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from api.sse import aparse_lines

LAT: dict[str, list[float]] = {k: [] for k in ("start", "get", "reply", "reply_to_sse", "healthz")}
REQUESTS = 0
READY_LINE = b"hitlflow is up"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(replies: int) -> dict:
    asks = [{"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}} for i in range(replies)]
    return {"initial_message": "go", "agent": {"llm": {"provider": "scripted", "responses": [
        *asks, {"text": "done", "end": True}]}}}


async def timed(kind: str, coro) -> httpx.Response:
    global REQUESTS
    t0 = time.perf_counter()
    r = await coro
    LAT[kind].append((time.perf_counter() - t0) * 1000)
    REQUESTS += 1
    r.raise_for_status()
    return r


class Stream:
    """One SSE stream: status changes queued as they arrive, with their arrival time."""

    def __init__(self) -> None:
        self.changes: asyncio.Queue[tuple[dict, float]] = asyncio.Queue()

    async def follow(self, http: httpx.AsyncClient, sid: str) -> None:
        async with http.stream("GET", f"/api/sessions/{sid}/events", timeout=None) as r:
            async for msg in aparse_lines(r.aiter_lines()):
                if msg.event == "conversation.state.changed":
                    self.changes.put_nowait((msg.json(), time.perf_counter()))

    async def until(self, to: str) -> tuple[dict, float]:
        while True:
            change, at = await self.changes.get()
            if change.get("to") == to:
                return change, at


STUCK_AFTER_S = 300  # a client still going after this many seconds failed


async def client(url: str, replies: int, data_dir: Path) -> tuple[int, int]:
    # Each client its own connections (one pool for all 200 would serialise them).
    where = {"stage": "start"}
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        try:
            return await asyncio.wait_for(drive(http, replies, data_dir, where), STUCK_AFTER_S)
        except Exception as err:
            print(f"client failed: {where}: {type(err).__name__}: {err}", file=sys.stderr)
            return -1, -1


async def drive(http: httpx.AsyncClient, replies: int, data_dir: Path,
                where: dict) -> tuple[int, int]:
    r = await timed("start", http.post("/api/sessions", json=body(replies)))
    sid = where["sid"] = r.json()["session_id"]
    stream = Stream()
    sse = asyncio.create_task(stream.follow(http, sid))
    for i in range(replies):
        where["stage"] = f"waiting_user {i}"
        await stream.until("waiting_user")
        s = (await timed("get", http.get(f"/api/sessions/{sid}"))).json()
        assert s["status"] == "waiting_user" and s["pending"]["prompt"] == f"step {i}?", s
        await timed("reply", http.post(f"/api/sessions/{sid}/reply", json={
            "request_id": s["pending"]["request_id"], "approve": True}))
        accepted = time.perf_counter()
        where["stage"] = f"replied {i}"
        change, at = await stream.until("queued")
        assert change.get("trigger") == "interaction.reply.accepted", change
        LAT["reply_to_sse"].append((at - accepted) * 1000)
    where["stage"] = "succeeded"
    await stream.until("succeeded")
    await asyncio.wait_for(sse, 120)
    where["stage"] = "live state"
    while not (state := (await http.get(f"/api/sessions/{sid}")).json())["live"]:
        await asyncio.sleep(0.5)  # the query timed out under load: ask again
    where["stage"] = "log"
    log = data_dir / "runs" / sid / "events.ndjson"
    for _ in range(600):  # the exporter catches up (bounded)
        lines = log.read_text().splitlines() if log.exists() else []
        if any('"RUN_COMPLETED"' in x for x in lines):
            break
        await asyncio.sleep(0.1)
    return state["replies"], sum('"ISSUE_RESOLVED"' in x for x in lines)


async def healthz(http: httpx.AsyncClient, done: asyncio.Event) -> None:
    while not done.is_set():
        await timed("healthz", http.get("/healthz"))
        await asyncio.sleep(0.05)


def q(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a"
    p99 = statistics.quantiles(values, n=100)[98]
    return f"p50 {statistics.median(values):7.1f} ms  p99 {p99:7.1f} ms"


def up_env() -> dict[str, str]:
    """As a user runs it: bytecode is cached. (Some CI images set PYTHONDONTWRITEBYTECODE;
    the workflow sandbox re-imports the workflow module per session, so without the
    cache every new session compiles it from source.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONUNBUFFERED": "1"}


async def start_up(data: Path) -> tuple[asyncio.subprocess.Process, str, str]:
    """``hitlflow up`` on free ports: the process, the API's URL, Temporal's address."""
    temporal, ui, api = free_port(), free_port(), free_port()
    up = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "api.cli", "up", "--data-dir", str(data),
        "--temporal-port", str(temporal), "--ui-port", str(ui), "--api-port", str(api),
        stdout=asyncio.subprocess.PIPE, env=up_env())
    assert up.stdout is not None
    while READY_LINE not in (line := await asyncio.wait_for(up.stdout.readline(), 120)):
        if not line:
            raise SystemExit(f"hitlflow up exited with {await up.wait()}")
    return up, f"http://127.0.0.1:{api}", f"127.0.0.1:{temporal}"


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200)
    p.add_argument("--replies", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        up, url, _ = await start_up(data)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=120) as http:
                await timed("healthz", http.get("/healthz"))
                done = asyncio.Event()
                probe = asyncio.create_task(healthz(http, done))
                t0 = time.perf_counter()
                results = await asyncio.gather(*(client(url, args.replies, data)
                                                 for _ in range(args.n)))
                wall = time.perf_counter() - t0
                done.set()
                await probe
        finally:
            up.send_signal(signal.SIGINT)
            code = await up.wait()
    exact = sum(1 for state, log in results if state == log == args.replies)
    for i, (state, log) in enumerate(results):
        if not state == log == args.replies:
            print(f"client {i}: {state} replies in state, {log} in the log", file=sys.stderr)
    print(f"{args.n} clients x {args.replies} replies against `hitlflow up` "
          f"(exit {code} on Ctrl-C)")
    print(f"requests/s: {REQUESTS / wall:.1f} ({REQUESTS} requests in {wall:.1f} s; "
          f"SSE streams not counted)")
    print(f"GET session      {q(LAT['get'])}")
    print(f"POST session     {q(LAT['start'])}")
    print(f"POST reply       {q(LAT['reply'])}")
    print(f"reply -> SSE     {q(LAT['reply_to_sse'])}")
    print(f"GET /healthz     {q(LAT['healthz'])}  (baseline: the HTTP stack alone)")
    print(f"GET session / healthz p50 ratio: "
          f"{statistics.median(LAT['get']) / statistics.median(LAT['healthz']):.1f}")
    print(f"sessions whose every accepted reply is in state and log exactly once: "
          f"{exact}/{args.n}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
