"""Benchmark: the CPU of handing a call to a thread and back, on ``up``'s event loop
(uvloop): ``asyncio.to_thread`` (the baseline), a ``ThreadPoolExecutor`` with
``asyncio.wrap_future`` (the group committer before), and the exporter's
:class:`~observation.exporter.lane.Lane` (both now). The call itself does nothing, so
what is measured is the hand-over: this process's CPU (every thread) per call.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/lane_bench.py            # 20,000 calls a side, 3 rounds
    .venv/bin/python bench/lane_bench.py -n 5000 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from api.runtime.process import serving_loop
from observation.exporter.lane import Lane


def nothing() -> None:
    return None


async def per_call(call: Callable[[], Awaitable[None]], n: int) -> float:
    """Microseconds of this process's CPU per call, the calls one after the other."""
    t0 = time.process_time()
    for _ in range(n):
        await call()
    return (time.process_time() - t0) / n * 1e6


async def main(n: int, rounds: int) -> None:
    lane = Lane(4, "bench")
    pool = concurrent.futures.ThreadPoolExecutor(4)
    sides: dict[str, Callable[[], Awaitable[None]]] = {
        "asyncio.to_thread": lambda: asyncio.to_thread(nothing),
        "ThreadPoolExecutor + wrap_future": lambda: asyncio.wrap_future(pool.submit(nothing)),
        "Lane.run": lambda: lane.run(nothing),
    }
    figures: dict[str, list[float]] = {k: [] for k in sides}
    try:
        for _ in range(rounds):
            for name, call in sides.items():
                await per_call(call, n // 10)  # warm: threads started, caches filled
                figures[name].append(await per_call(call, n))
    finally:
        lane.close()
        pool.shutdown()
    base = min(figures["asyncio.to_thread"])
    print(f"CPU per hand-over, {n:,} calls a side, best of {rounds} round(s), "
          f"loop {type(asyncio.get_running_loop()).__module__}:")
    for name, xs in figures.items():
        print(f"  {name:34} {min(xs):7.1f} us   {min(xs) / base:5.2f}x to_thread   "
              f"(rounds: {', '.join(f'{x:.1f}' for x in xs)})")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.n < 10 or args.rounds < 1:
        p.error("-n must be at least 10 and --rounds at least 1")
    with asyncio.Runner(loop_factory=serving_loop()) as runner:  # as `up` runs
        runner.run(main(args.n, args.rounds))
