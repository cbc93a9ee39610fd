"""Benchmark: reads served by the read model against ``/healthz`` (the HTTP stack's floor).

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/read_bench.py              # 32 clients, 10 s per endpoint
    .venv/bin/python bench/read_bench.py -c 32 -s 5

It starts ``hitlflow up`` (the tuned dev server, a worker, the exporter with its
read model and the API: one process, as a user runs it) on free ports in a
temporary data dir, starts one session that waits for the person, then, one
endpoint after the other, runs ``-c`` concurrent keep-alive clients for ``-s``
seconds in a separate process (so the clients do not share the server's CPU
accounting): ``/healthz``, ``GET /api/sessions/{id}``, the timeline and
``GET /api/sessions?status=waiting_user``. Reported: requests/s, p50/p99 and each
endpoint's rate as a multiple of ``/healthz``'s (target: >= 0.5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.http_bench import start_up

WAITING = {"initial_message": "go", "agent": {"llm": {"provider": "scripted", "responses": [
    {"ecs_request": {"kind": "confirm", "prompt": "go on?"}}, {"text": "done", "end": True}]}}}


async def clients(url: str, path: str, n: int, seconds: float) -> dict:
    """``n`` concurrent clients GET ``path`` for ``seconds``: count, errors, latencies."""
    lat: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        end = time.perf_counter() + seconds

        async def one() -> None:
            nonlocal errors
            while time.perf_counter() < end:
                t = time.perf_counter()
                r = await http.get(path)
                lat.append((time.perf_counter() - t) * 1000)
                if r.status_code != 200:
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        wall = time.perf_counter() - t0
    p99 = statistics.quantiles(lat, n=100)[98] if len(lat) > 1 else float("nan")
    return {"path": path, "count": len(lat), "errors": errors, "rate": len(lat) / wall,
            "p50": statistics.median(lat), "p99": p99}


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-c", "--clients", type=int, default=32)
    p.add_argument("-s", "--seconds", type=float, default=10.0)
    p.add_argument("--run-clients", nargs=2, metavar=("URL", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run_clients:
        print(json.dumps(await clients(*args.run_clients, args.clients, args.seconds)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        up, url, _ = await start_up(Path(tmp))
        try:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                sid = (await http.post("/api/sessions", json=WAITING)).json()["session_id"]
                deadline = time.perf_counter() + 60
                while (await http.get(f"/api/sessions/{sid}")).json()["status"] != \
                        "waiting_user":
                    if time.perf_counter() > deadline:
                        raise SystemExit("the session did not reach waiting_user")
                    await asyncio.sleep(0.1)
            results = []
            for path in ("/healthz", f"/api/sessions/{sid}", f"/api/execution/{sid}/timeline",
                         "/api/sessions?status=waiting_user"):
                out = subprocess.run(
                    [sys.executable, __file__, "-c", str(args.clients), "-s", str(args.seconds),
                     "--run-clients", url, path], capture_output=True, text=True, check=True)
                results.append(json.loads(out.stdout))
        finally:
            up.send_signal(signal.SIGINT)
            await up.wait()
    base = results[0]["rate"]
    print(f"{args.clients} concurrent clients, {args.seconds:.0f} s per endpoint, one waiting "
          "session, against `hitlflow up`")
    for r in results:
        print(f"{r['path'][:48]:48s} {r['rate']:8.1f} req/s  p50 {r['p50']:6.1f} ms  "
              f"p99 {r['p99']:6.1f} ms  errors {r['errors']:3d}  {r['rate'] / base:4.2f}x healthz")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
