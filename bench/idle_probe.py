"""What N sessions that all wait for a person cost on one ``hitlflow up``.

Starts ``hitlflow up`` (``bench.http_bench.start_up``), starts N sessions over HTTP
that each ask a question, waits until every one waits and its log reached the
question, then measures over a quiet window: CPU of the ``up`` process (worker,
exporter, API) and of the Temporal server, and the history reads the server
served (``GetWorkflowExecutionHistory`` requests, from its Prometheus metrics):
the exporter's open long-polls show as a steady stream of re-polls.

    .venv/bin/python -m bench.idle_probe -n 500                  # parking (default)
    HITLFLOW_EXPORTER_PARK=false .venv/bin/python -m bench.idle_probe -n 500
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.http_bench import body, start_up

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids = (task / "children").read_text().split()
        out += [int(k) for k in kids]
    return out


def history_requests(metrics: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("service_requests{") and \
                'operation="GetWorkflowExecutionHistory"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def metrics_url(data: Path) -> str | None:
    for log in data.glob("*.log"):
        m = re.search(r"Temporal Metrics:\s+(\S+)", log.read_text(errors="replace"))
        if m:
            return m.group(1)
    return None


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=500)
    p.add_argument("--window", type=float, default=70.0, help="quiet window, seconds")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        up, url, _ = await start_up(data)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=120) as http:
                gate = asyncio.Semaphore(16)

                async def start() -> str:
                    async with gate:
                        r = await http.post("/api/sessions", json=body(1))
                        return r.json()["session_id"]

                sids = await asyncio.gather(*(start() for _ in range(args.n)))
                t0 = time.perf_counter()
                while True:  # every session waits and its log has the question
                    logged = sum(
                        1 for s in sids if (data / "runs" / s / "events.ndjson").exists()
                        and b"ISSUE_OPENED" in (data / "runs" / s / "events.ndjson").read_bytes())
                    if logged == args.n:
                        break
                    await asyncio.sleep(1)
                settle = time.perf_counter() - t0
                await asyncio.sleep(5)  # the last followers park
                server = [c for c in children(up.pid)]
                murl = metrics_url(data)
                async with httpx.AsyncClient(timeout=10) as m:
                    h0 = history_requests((await m.get(murl)).text) if murl else float("nan")
                    c0 = {pid: cpu_s(pid) for pid in [up.pid, *server]}
                    await asyncio.sleep(args.window)
                    c1 = {pid: cpu_s(pid) for pid in [up.pid, *server]}
                    h1 = history_requests((await m.get(murl)).text) if murl else float("nan")
        finally:
            up.send_signal(signal.SIGINT)
            await up.wait()
    park = os.environ.get("HITLFLOW_EXPORTER_PARK", "true")
    up_cpu = (c1[up.pid] - c0[up.pid]) / args.window
    server_cpu = sum(c1[p] - c0[p] for p in server) / args.window
    print(f"{args.n} waiting sessions on `hitlflow up` (exporter_park={park}); "
          f"all logged {settle:.1f} s after the last start; quiet window {args.window:.0f} s")
    print(f"CPU of the up process (worker+exporter+API): {100 * up_cpu:5.1f} %")
    print(f"CPU of the Temporal server:                  {100 * server_cpu:5.1f} %")
    print(f"history reads served in the window: {h1 - h0:.0f} "
          f"({(h1 - h0) / args.window:.1f}/s)")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
