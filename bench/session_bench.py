"""Benchmark: hitlflow sessions vs a bare Temporal workflow with the same activities.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/session_bench.py -n 1              # one at a time (latency)
    .venv/bin/python bench/session_bench.py -n 200            # 200 concurrent (throughput)
    .venv/bin/python bench/session_bench.py -n 1 --synchronous normal,full   # SQLite durability

What ``hitlflow up`` runs, measured against a baseline in the same run: a tuned dev
server as ``up`` starts it (``api.runtime.devserver``'s flags, SQLite file; ``--synchronous``
varies the pragma, by default what ``up`` uses), and for each variant a worker in a
process of its own (the benchmark's clients stay out of it), both with
``build_worker``'s sandboxed runner (``api.runtime.sandbox``):

* ``hitlflow``: the worker exactly as ``api.runtime.worker.build_worker`` builds it;
  ``SessionWorkflow`` with the scripted LLM, each answer an ECS confirm request, so a
  turn is: LLM activity -> waiting_user -> reply;
* ``bare``: ``bare_workflow.BareSession`` with the same activities: the same
  ``llm_call``, then wait for a ``reply`` update; no hitlflow logic.

Each session's history is followed with a long-poll (no query polling): once it shows
the session waits, the client asks the ``pending_request`` query once (both variants
answer it), sends the ``reply`` update and reads from history when the next
``llm_call`` started. Reported per variant: reply -> next step p50/p99 (from just
before the update is sent to the next ``llm_call``'s start, server event time, same
clock), turns/s over the run with ``-n`` sessions at a time, history events per turn;
and the ratios hitlflow/bare (and full/normal with two ``--synchronous`` values). Then
where a reply's time goes, from the history's event times (``SEGMENTS``), and the CPU
per turn of the worker process and of the server over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from stack import StepFollower as Follower
from stack import (
    WorkerProcess,
    cpu_s,
    free_port,
    pct,
    ratio,
    session_body,
    sqlite_tuning,
    up_synchronous,
)
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from api.runtime.devserver import DevServer
from api.runtime.process import connect
from api.settings import HitlflowSettings
from workflows.messages import CURRENT_BEHAVIOUR, ReplyInput, SessionInput
from workflows.search_attributes import SESSION_STATUS
from workflows.session_state import PendingRequest

WORKFLOW = {"hitlflow": "SessionWorkflow", "bare": "BareSession"}


@dataclass
class Result:
    samples: list[float] = field(default_factory=list)  # reply -> next step, ms
    events: int = 0
    turns: int = 0
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)  # worker / server, in the run
    steps: dict[str, list[float]] = field(default_factory=dict)  # SEGMENTS, ms
    # Each session driven and when each reply was sent (ms): read after the run.
    replies: list[tuple[WorkflowHandle, list[float]]] = field(default_factory=list)

    def row(self) -> dict[str, float]:
        return {"p50": pct(self.samples, 50), "p99": pct(self.samples, 99),
                "turns_per_s": self.turns / self.wall_s,
                "events_per_turn": self.events / self.turns}

    def add(self, other: Result) -> None:
        self.samples += other.samples
        self.events += other.events
        self.turns += other.turns
        self.wall_s += other.wall_s
        for k, v in other.cpu_s.items():
            self.cpu_s[k] = self.cpu_s.get(k, 0.0) + v
        for k, vs in other.steps.items():
            self.steps.setdefault(k, []).extend(vs)


#: Where a reply's time goes, from the history's event times (ms, server clock = this
#: machine's): the update reaching the server (its workflow task scheduled), the task
#: waiting for the worker, the worker's task (started -> completed: the activation,
#: the round trips and the server taking the completion), then the next activity's
#: start.
SEGMENTS = ("sent -> task scheduled", "task queued", "workflow task", "task done -> activity")


def reply_segments(events: list[HistoryEvent], sent: list[float]) -> dict[str, list[float]]:
    """Per accepted reply, in order, the SEGMENTS."""
    out: dict[str, list[float]] = {k: [] for k in SEGMENTS}
    accepted = [i for i, e in enumerate(events)
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    for at, i in zip(sent, accepted, strict=False):
        j = next(k for k in range(i, -1, -1)
                 if events[k].event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
        m = next(k for k in range(i, len(events))
                 if events[k].event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
        times = [at, ms(events[j]), ms(events[j + 1]), ms(events[j + 2]), ms(events[m])]
        for k, (a, b) in zip(SEGMENTS, itertools.pairwise(times), strict=True):
            out[k].append(b - a)
    return out


def ms(ev: HistoryEvent) -> float:
    return ev.event_time.ToMicroseconds() / 1000.0


async def start(client: Client, kind: str, tq: str, turns: int) -> WorkflowHandle:
    sid = f"{kind}-{uuid.uuid4().hex[:10]}"
    inp = SessionInput.model_validate({"session_id": sid, "config": session_body(turns),
                                       "behaviour": CURRENT_BEHAVIOUR})  # as the API starts it
    extra = ({"search_attributes": TypedSearchAttributes(
        [SearchAttributePair(SESSION_STATUS, "queued")])}
        if kind == "hitlflow" else {})  # as POST /api/sessions starts it
    return await client.start_workflow(WORKFLOW[kind], inp, id=sid, task_queue=tq, **extra)


async def drive(client: Client, kind: str, tq: str, turns: int, out: Result | None) -> None:
    """One session: start it, answer each request once history shows it waits."""
    h = await start(client, kind, tq, turns)
    follower = Follower(h)
    sent_ms: list[float] = []
    for i in range(turns):
        await follower.next_wait()
        pending = await h.query("pending_request", result_type=PendingRequest | None)
        assert pending is not None and pending.prompt == f"step {i}?", pending
        sent = time.time()
        await h.execute_update("reply", ReplyInput(request_id=pending.request_id, approve=True))
        started = await follower.started(i + 1)
        if out is not None:
            out.samples.append((started - sent) * 1000)
            sent_ms.append(sent * 1000)
    await h.result()
    events = await follower.done()
    if out is not None:
        out.events += events
        out.turns += turns
        out.replies.append((h, sent_ms))


async def run_variant(client: Client, address: str, kind: str, server_pid: int,
                      args: argparse.Namespace) -> Result:
    tq = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
    with WorkerProcess(kind, address, tq) as worker:
        await drive(client, kind, tq, args.turns, None)  # warm-up: first sandbox load
        out, gate = Result(), asyncio.Semaphore(args.n)

        async def one() -> None:
            async with gate:
                await drive(client, kind, tq, args.turns, out)

        cpu0 = {"worker": cpu_s(worker.pid), "server": cpu_s(server_pid)}
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(args.sessions)))
        out.wall_s = time.perf_counter() - t0
        out.cpu_s = {"worker": cpu_s(worker.pid) - cpu0["worker"],
                     "server": cpu_s(server_pid) - cpu0["server"]}
    for h, sent in out.replies:
        history = [e async for e in h.fetch_history_events()]
        for k, vs in reply_segments(history, sent).items():
            out.steps.setdefault(k, []).extend(vs)
    return out


async def run_server(sync: str, args: argparse.Namespace) -> dict[str, Result]:
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(Path(tmp), port=free_port(), ui_port=None,
                           tuning=sqlite_tuning(sync))
        async with server:
            client = await connect(HitlflowSettings(temporal_address=server.address))
            results: dict[str, Result] = {}
            for rnd in range(args.rounds):
                for kind in ("bare", "hitlflow"):
                    print(f"synchronous={sync} round {rnd + 1}: {kind}", file=sys.stderr,
                          flush=True)
                    r = await run_variant(client, server.address, kind, server.pid, args)
                    results.setdefault(kind, Result()).add(r)
            return results


def report(all_results: dict[str, dict[str, Result]], args: argparse.Namespace) -> None:
    print(f"\n{args.sessions} sessions x {args.turns} replies, {args.n} at a time, "
          f"{args.rounds} round(s); one tuned dev server per synchronous= value; "
          f"workers in their own process, build_worker's sandboxed runner")
    print(f"{'sync':7} {'variant':9} {'reply p50':>10} {'reply p99':>10} {'turns/s':>8} "
          f"{'events/turn':>12}")
    rows = {s: {k: r.row() for k, r in res.items()} for s, res in all_results.items()}
    for sync, res in rows.items():
        for kind, r in res.items():
            print(f"{sync:7} {kind:9} {r['p50']:8.1f}ms {r['p99']:8.1f}ms "
                  f"{r['turns_per_s']:8.1f} {r['events_per_turn']:12.1f}")
        b, h = res["bare"], res["hitlflow"]
        print(f"{sync:7} hitlflow/bare: p50 {ratio(h['p50'], b['p50'])} (target <= 1.15x "
              f"one at a time), p99 {ratio(h['p99'], b['p99'])}, turns/s "
              f"{ratio(h['turns_per_s'], b['turns_per_s'])} (target >= 0.85x at 200), "
              f"events/turn +{h['events_per_turn'] - b['events_per_turn']:.1f} (target <= +4)")
    print("\nwhere a reply's time goes (p50, ms; history event times) and CPU per turn (ms)")
    print(f"{'sync':7} {'variant':9} " + " ".join(f"{k:>22}" for k in SEGMENTS)
          + f" {'worker cpu':>11} {'server cpu':>11}")
    for sync, res in all_results.items():
        for kind, r in res.items():
            print(f"{sync:7} {kind:9} "
                  + " ".join(f"{pct(r.steps.get(k, []), 50):22.2f}" for k in SEGMENTS)
                  + "".join(f" {r.cpu_s.get(w, 0.0) * 1000 / r.turns:11.1f}"
                            for w in ("worker", "server")))
    if "normal" in rows and "full" in rows:
        for kind in ("bare", "hitlflow"):
            f, n = rows["full"][kind], rows["normal"][kind]
            print(f"full/normal {kind:9}: p50 {ratio(f['p50'], n['p50'])}, p99 "
                  f"{ratio(f['p99'], n['p99'])}, "
                  f"turns/s {ratio(f['turns_per_s'], n['turns_per_s'])}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="sessions at a time (200)")
    p.add_argument("--sessions", type=int, default=None,
                   help="sessions per variant in all (default: -n, at least 30)")
    p.add_argument("--turns", type=int, default=3, help="replies per session (3)")
    p.add_argument("--rounds", type=int, default=1, help="bare, hitlflow, bare, ... (1)")
    p.add_argument("--synchronous", default=up_synchronous(),
                   help="SQLite synchronous= values, comma-separated, each on a fresh server "
                        f"(default: what up uses, {up_synchronous()}; normal,full compares)")
    args = p.parse_args(argv)
    args.sessions = args.sessions or max(args.n, 30)
    args.syncs = [s.strip() for s in args.synchronous.split(",") if s.strip()]
    bad = [s for s in args.syncs if s not in ("off", "normal", "full", "extra")]
    if bad:
        p.error(f"unknown synchronous values {bad}")
    return args


async def main(argv: list[str]) -> None:
    args = parse(argv)
    results = {sync: await run_server(sync, args) for sync in args.syncs}
    report(results, args)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
