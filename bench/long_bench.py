"""Benchmark: one session driven through N turns over HTTP (a session of any length).

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/long_bench.py                 # 10,000 turns
    .venv/bin/python bench/long_bench.py --turns 2000

It starts ``hitlflow up`` (as a user runs it) and drives one scripted session
(N confirm requests) the way an application does: on each ``waiting_user`` from
the SSE stream, ``GET /api/sessions/{id}`` (the pending request), then ``POST
.../reply``; the next ``waiting_user`` on the stream closes the turn.

Reported, at turns 100, 1,000 and 10,000 (a window of 100 turns around each):
GET session p50 and response size, reply -> next step p50 (from the reply's 202
to the next ``waiting_user`` on the stream), with ``GET /healthz`` in the same
run as the baseline; the input each continued run carried (its size without the
config, and with it; DESIGN invariant 7: bounded), and that the log verifies.
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
from http_bench import Stream
from stack import api_headers, session_body, start_up
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from observation.exporter import verify_dir
from workflows.messages import SessionInput

WINDOW = 100


async def carried(client: Client, sid: str) -> list[tuple[int, int]]:
    """(size without config, size with it) of every continued run's input."""
    out: list[tuple[int, int]] = []
    desc = await client.get_workflow_handle(sid).describe()
    run_id: str | None = desc.raw_description.workflow_execution_info.first_run_id
    while run_id:
        history = await client.get_workflow_handle(sid, run_id=run_id).fetch_history()
        start = history.events[0].workflow_execution_started_event_attributes
        if start.continued_execution_run_id:
            data = start.input.payloads[0].data
            inp = SessionInput.model_validate_json(data)
            bare = len(inp.model_dump_json(exclude={"state": {"config"}}))
            out.append((bare, len(data)))
        last = history.events[-1]
        run_id = (last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                  if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
                  else None)
    return out


async def drive(http: httpx.AsyncClient, turns: int) -> tuple[str, list[dict]]:
    sid = (await http.post("/api/sessions", json=session_body(turns))).raise_for_status().json()[
        "session_id"]
    stream = Stream()
    sse = asyncio.create_task(stream.follow(http, sid))
    per_turn: list[dict] = []
    waiting, _ = await stream.until("waiting_user")
    for i in range(turns):
        t0 = time.perf_counter()
        r = (await http.get(f"/api/sessions/{sid}", params={"min_seq": waiting["seq"]})
             ).raise_for_status()
        get_ms = (time.perf_counter() - t0) * 1000
        s = r.json()
        assert s["status"] == "waiting_user" and s["pending"]["prompt"] == f"step {i}?", s
        t1 = time.perf_counter()
        (await http.post(f"/api/sessions/{sid}/reply", json={
            "request_id": s["pending"]["request_id"], "approve": True})).raise_for_status()
        t2 = time.perf_counter()
        waiting, _ = await stream.until("waiting_user" if i + 1 < turns else "succeeded")
        t3 = time.perf_counter()
        h0 = time.perf_counter()
        (await http.get("/healthz")).raise_for_status()
        per_turn.append({"get": get_ms, "size": len(r.content), "reply": (t2 - t1) * 1000,
                         "next": (t3 - t2) * 1000,
                         "healthz": (time.perf_counter() - h0) * 1000})
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} turns", file=sys.stderr)
    sse.cancel()
    return sid, per_turn


def window(per_turn: list[dict], at: int) -> list[dict]:
    lo = max(0, min(at, len(per_turn)) - WINDOW // 2 - (WINDOW // 2 if at >= len(per_turn)
                                                        else 0))
    return per_turn[lo:lo + WINDOW]


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=10_000)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        up = await start_up(data)
        try:
            async with httpx.AsyncClient(base_url=up.url, timeout=120,
                                         headers=api_headers()) as http:
                t0 = time.perf_counter()
                sid, per_turn = await drive(http, args.turns)
                wall = time.perf_counter() - t0
            client = await Client.connect(up.temporal)
            runs = await carried(client, sid)
            log = data / "runs" / sid
            for _ in range(600):  # the exporter catches up (bounded)
                if (log / "events.ndjson").exists() and b'"RUN_COMPLETED"' in (
                        log / "events.ndjson").read_bytes()[-4096:]:
                    break
                await asyncio.sleep(0.5)
            verified = verify_dir(log)
        finally:
            await up.stop()
    print(f"one session, {args.turns} turns over HTTP against `hitlflow up` "
          f"({wall:.0f} s, {args.turns / wall:.1f} turns/s)")
    base = statistics.median(t["healthz"] for t in per_turn[:WINDOW])
    print(f"{'at turn':>8} {'GET p50':>9} {'GET size':>9} {'reply p50':>10} "
          f"{'next step p50':>14} {'healthz p50':>12} {'GET/healthz':>12}")
    firsts = None
    for at in (100, 1_000, 10_000):
        if at > args.turns:
            continue
        w = window(per_turn, at)
        row = {k: statistics.median(t[k] for t in w)
               for k in ("get", "size", "reply", "next", "healthz")}
        firsts = firsts or row
        print(f"{at:>8} {row['get']:>7.1f}ms {row['size']:>8.0f}B {row['reply']:>8.1f}ms "
              f"{row['next']:>12.1f}ms {row['healthz']:>10.1f}ms "
              f"{row['get'] / row['healthz']:>11.2f}x   (GET vs turn 100: "
              f"{row['get'] / firsts['get']:.2f}x, next step: "
              f"{row['next'] / firsts['next']:.2f}x)")
    print(f"healthz p50 over the first {WINDOW} turns: {base:.1f} ms")
    if runs:
        bare = [b for b, _ in runs]
        whole = [w for _, w in runs]
        print(f"continued runs: {len(runs)}; carried input without the config: "
              f"max {max(bare)} B (first {bare[0]} B, last {bare[-1]} B); with it: "
              f"max {max(whole)} B, last {whole[-1]} B")
    else:
        print("continued runs: 0")
    print(f"log verifies: {verified}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
