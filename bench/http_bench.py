"""Benchmark: N concurrent HTTP clients, each driving a session through R replies.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/http_bench.py               # 200 clients x 3 replies
    .venv/bin/python bench/http_bench.py -n 50

It starts what ``hitlflow up`` starts (a tuned dev server on a SQLite file, a
worker, the exporter and the API) in this one process, then each client: POST a
session (scripted: R confirm requests), follow its SSE stream, and R times poll
``GET /api/sessions/{id}`` until it waits and ``POST .../reply``. Reported:
requests per second, p50/p99 of GET and POST reply, reply -> SSE (from the reply
being accepted to its ``conversation.state.changed`` reaching the SSE client), and
whether every accepted reply appears exactly once in the state and in the log.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from api.app import ApiServer, create_app
from api.devserver import DevServer
from api.settings import HitlflowSettings
from api.sse import aparse_lines
from api.worker import run_worker
from observation.exporter import run_exporter

LAT: dict[str, list[float]] = {"get": [], "reply": [], "reply_to_sse": []}
REQUESTS = 0


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
    return r


async def follow(http: httpx.AsyncClient, sid: str, seen: dict[str, float]) -> None:
    async with http.stream("GET", f"/api/sessions/{sid}/events", timeout=None) as r:
        async for msg in aparse_lines(r.aiter_lines()):
            if msg.event == "conversation.state.changed":
                p = msg.json()
                if p.get("trigger") == "interaction.reply.accepted":
                    seen.setdefault(f"reply{len(seen)}", time.perf_counter())
                if p.get("to") == "succeeded":
                    return


async def client(http: httpx.AsyncClient, replies: int, data_dir: Path) -> tuple[int, int]:
    r = await timed("get", http.post("/api/sessions", json=body(replies)))
    sid = r.json()["session_id"]
    seen: dict[str, float] = {}
    sse = asyncio.create_task(follow(http, sid, seen))
    for i in range(replies):
        while True:
            s = (await timed("get", http.get(f"/api/sessions/{sid}"))).json()
            if s["status"] == "waiting_user" and s["pending"]["prompt"] == f"step {i}?":
                break
            await asyncio.sleep(0.05)
        r = await timed("reply", http.post(f"/api/sessions/{sid}/reply", json={
            "request_id": s["pending"]["request_id"], "approve": True}))
        accepted = time.perf_counter()
        while f"reply{i}" not in seen:
            await asyncio.sleep(0.002)
        LAT["reply_to_sse"].append((seen[f"reply{i}"] - accepted) * 1000)
    await asyncio.wait_for(sse, 120)
    state = (await http.get(f"/api/sessions/{sid}")).json()
    log = data_dir / "runs" / sid / "events.ndjson"
    for _ in range(600):  # the exporter catches up (bounded)
        lines = log.read_text().splitlines() if log.exists() else []
        if any('"RUN_COMPLETED"' in x for x in lines):
            break
        await asyncio.sleep(0.1)
    return state["replies"], sum('"ISSUE_RESOLVED"' in x for x in lines)


def q(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a"
    p99 = statistics.quantiles(values, n=100)[98]
    return f"p50 {statistics.median(values):7.1f} ms  p99 {p99:7.1f} ms"


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200)
    p.add_argument("--replies", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        async with DevServer(data, port=17433, ui_port=None) as server:
            settings = HitlflowSettings(data_dir=data, temporal_address=server.address)
            stop = asyncio.Event()
            tasks = [asyncio.create_task(run_worker(settings, stop)),
                     asyncio.create_task(run_exporter(settings, stop))]
            api = ApiServer(create_app(settings), "127.0.0.1", 0)
            await api.start()
            limits = httpx.Limits(max_connections=4 * args.n)
            async with httpx.AsyncClient(base_url=api.url, timeout=120, limits=limits) as http:
                t0 = time.perf_counter()
                results = await asyncio.gather(*(client(http, args.replies, data)
                                                 for _ in range(args.n)))
                wall = time.perf_counter() - t0
            await api.stop()
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
    exact = sum(1 for state, log in results if state == log == args.replies)
    print(f"{args.n} clients x {args.replies} replies through `up`'s stack, one process")
    print(f"requests/s: {REQUESTS / wall:.1f} ({REQUESTS} requests in {wall:.1f} s)")
    print(f"GET session      {q(LAT['get'])}")
    print(f"POST reply       {q(LAT['reply'])}")
    print(f"reply -> SSE     {q(LAT['reply_to_sse'])}")
    print(f"sessions whose every accepted reply is in state and log exactly once: "
          f"{exact}/{args.n}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
