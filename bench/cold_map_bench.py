"""Benchmark: what mapping a history event costs when it runs a few events at a time
with other work between, as a live follower runs it, against the same events mapped
one history after another (issue 28: ``SessionMapper.feed`` costs 76 to 90 us an
event live and 18 us offline on the same histories).

The saved histories (``tests/workflows/histories``, ``--copies`` times) are mapped
four ways, each with ``SessionMapper.feed`` alone timed (``thread_time``), the least
of ``--rounds`` runs:

* **serial**: each history whole, one after the other (the offline figure);
* **pages**: every session's mapper fed ``--page`` events in turn, round-robin (a live
  follower's pages, 3.2 events on average in ``exporter_bench``), nothing between;
* **pages, cold**: the same, with ``--touch-mb`` of memory written between two
  pages (what other processes on the same core do to the caches between two of a
  follower's wake-ups: the dev server, the worker, the rest of ``up``);
* **bigger pages, cold**: the same with ``--big-page`` events a page.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/cold_map_bench.py
    .venv/bin/python bench/cold_map_bench.py --page 3 --touch-mb 16 --copies 10
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.api.history.v1 import HistoryEvent

from observation.exporter.decode import load_history
from observation.exporter.mapping import SessionMapper

HISTORIES = Path(__file__).resolve().parents[1] / "tests" / "workflows" / "histories"
Histories = list[tuple[str, list[HistoryEvent]]]


def serial(hists: Histories) -> tuple[float, int]:
    """Microseconds of CPU per event, each history mapped whole; and the events."""
    n, spent = 0, 0.0
    for sid, events in hists:
        mapper = SessionMapper(sid)
        t0 = time.thread_time()
        for e in events:
            list(mapper.feed(e))
        spent += time.thread_time() - t0
        n += len(events)
    return spent / n * 1e6, n


def paged(hists: Histories, page: int, touch: bytearray | None) -> tuple[float, int]:
    """Microseconds of CPU per event, the sessions fed ``page`` events in turn
    (``touch``: written between two pages, not timed); and the events."""
    mappers = [(SessionMapper(sid), events) for sid, events in hists]
    n, spent, at = 0, 0.0, 0
    longest = max(len(events) for _, events in hists)
    while at < longest:
        for mapper, events in mappers:
            chunk = events[at:at + page]
            if not chunk:
                continue
            if touch is not None:
                for i in range(0, len(touch), 64):  # a write per cache line
                    touch[i] ^= 1
            t0 = time.thread_time()
            for e in chunk:
                list(mapper.feed(e))
            spent += time.thread_time() - t0
            n += len(chunk)
        at += page
    return spent / n * 1e6, n


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--copies", type=int, default=10, help="the saved histories, this often")
    p.add_argument("--page", type=int, default=3, help="events a page")
    p.add_argument("--big-page", type=int, default=30, help="events a bigger page")
    p.add_argument("--touch-mb", type=int, default=16, help="memory written between pages")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if min(args.copies, args.page, args.big_page, args.rounds) < 1 or args.touch_mb < 0:
        p.error("--copies, --page, --big-page and --rounds must be at least 1, "
                "--touch-mb at least 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    hists = [load_history(f.read_text()) for f in sorted(HISTORIES.glob("*.json"))]
    hists *= args.copies
    events = sum(len(e) for _, e in hists)
    touch = bytearray(args.touch_mb << 20) if args.touch_mb else None
    print(f"{len(hists)} histories, {events} events; SessionMapper.feed, us of CPU per "
          f"event, the least of {args.rounds}")
    base = min(serial(hists)[0] for _ in range(args.rounds))
    rows = [("serial (whole histories)", base),
            (f"pages of {args.page}, round-robin",
             min(paged(hists, args.page, None)[0] for _ in range(args.rounds))),
            (f"pages of {args.page}, {args.touch_mb} MB written between",
             min(paged(hists, args.page, touch)[0] for _ in range(args.rounds))),
            (f"pages of {args.big_page}, {args.touch_mb} MB written between",
             min(paged(hists, args.big_page, touch)[0] for _ in range(args.rounds)))]
    for name, us in rows:
        print(f"  {name:42s} {us:7.1f} us   {us / base:5.2f}x serial")


if __name__ == "__main__":
    main()
