"""Benchmark: where a session's first page's time goes in ``exporter_bench``'s live run
(issue 28's lag at 200 sessions starting at once), from the exporter's side.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/first_page_bench.py             # -n 200 --turns 3, as the issue's
    .venv/bin/python bench/first_page_bench.py -n 50

It runs ``bench/exporter_bench.py``'s live part (its own report first) with the
exporter's steps timed per session: the wake-up (as the API's after a start), the
follower's task, the lookup of the first run (``first_run_id``), opening the log, the
first history event, the first page fed, its commit. Each is reported after the
session's wake-up, and the wake-ups themselves since the first one: how far the starts
of the burst are spread is what the exporter cannot shorten (it learns of a session
when its start returns, as in ``up``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import exporter_bench

from api.runtime.process import serving_loop
from observation.exporter import follower, service
from observation.exporter.log import LogWriter

STEPS = ("follow task", "first run looked up", "log opened", "first history event",
         "first page fed", "first page committed")
marks: dict[str, dict[str, float]] = defaultdict(dict)


def mark(session_id: str, step: str) -> None:
    marks[session_id].setdefault(step, time.time())


def instrument() -> None:
    """Wrap the exporter's steps (this process only, for this run)."""
    def after(owner: Any, name: str, step: str, sid: Callable[..., str]) -> None:
        real = getattr(owner, name)

        def run(*args: Any, **kw: Any) -> Any:
            result = real(*args, **kw)
            if result is not False:  # feed_page_now: False, nothing was fed
                mark(sid(*args), step)
            return result
        setattr(owner, name, run)

    wake, follow, first_run = service.Exporter.wake, service.Exporter._follow, \
        follower.first_run_id
    history = follower.history_pages

    def woken(self: Any, session_id: str) -> None:
        mark(session_id, "wake")
        wake(self, session_id)

    async def followed(self: Any, session_id: str) -> None:
        mark(session_id, "follow task")
        await follow(self, session_id)

    async def looked_up(client: Any, session_id: str) -> str:
        run_id = await first_run(client, session_id)
        mark(session_id, "first run looked up")
        return run_id

    async def pages(client: Any, session_id: str, **kw: Any) -> Any:
        async for page in history(client, session_id, **kw):
            mark(session_id, "first history event")
            yield page

    service.Exporter.wake, service.Exporter._follow = woken, followed
    follower.first_run_id, follower.history_pages = looked_up, pages
    after(LogWriter, "open", "log opened", lambda w: w.run_dir.name)
    after(LogWriter, "commit", "first page committed", lambda w, *_: w.run_dir.name)
    for name in ("feed_page_now", "feed_page"):
        after(follower.SessionExport, name, "first page fed",
              lambda e, *_: e.w.run_dir.name)


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def report() -> None:
    rows = [m for m in marks.values() if "wake" in m and "first page committed" in m]
    if not rows:
        print("no session was followed")
        return
    t0 = min(m["wake"] for m in rows)
    spread = [(m["wake"] - t0) * 1e3 for m in rows]
    print(f"\nfirst pages, {len(rows)} sessions: wake-ups since the first one p50 "
          f"{q(spread, 50):.0f} ms, max {max(spread):.0f} ms (the burst of starts)")
    print(f"  {'step (ms after the wake-up)':34} {'p50':>8} {'p99':>8}")
    for step in STEPS:
        xs = [(m[step] - m["wake"]) * 1e3 for m in rows if step in m]
        if xs:
            print(f"  {step:34} {q(xs, 50):8.1f} {q(xs, 99):8.1f}")


async def main(n: int, turns: int) -> None:
    await exporter_bench.main(["-n", str(n), "--turns", str(turns), "--skip-verify",
                               "--skip-live-floor", "--skip-stages"])


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200)
    p.add_argument("--turns", type=int, default=3)
    args = p.parse_args()
    if args.n < 1 or args.turns < 0:
        p.error("-n must be at least 1 and --turns at least 0")
    instrument()
    with asyncio.Runner(loop_factory=serving_loop()) as runner:  # as `up` runs it
        runner.run(main(args.n, args.turns))
    report()
