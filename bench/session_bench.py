"""Benchmark: hitlflow sessions vs a bare Temporal workflow with the same activities.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/session_bench.py                 # 200 sessions x 3 replies
    .venv/bin/python bench/session_bench.py -n 50 --turns 2  # quicker

One tuned dev server (as ``hitlflow up`` starts it, SQLite file) serves both
variants, one after the other, in this one process:

* ``hitlflow``: SessionWorkflow with the scripted LLM; each LLM answer is an
  ECS confirm request, so each turn is: LLM activity -> waiting_user -> reply.
* ``bare``: a workflow that runs the same ``llm_call`` activity, then waits for a
  ``reply`` update, with no hitlflow logic (no statechart, journal, search
  attributes, contracts).

For each it reports reply -> next step (from the accepted reply update to the
next ``llm_call`` activity starting; p50/p99), turns per second over the whole
run with N concurrent sessions, and history events per turn; then the ratio
hitlflow/bare.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.llm import LlmActivities
from api.devserver import DevServer
from workflows.io import LLMCallInput, LLMCallResult
from workflows.messages import ReplyInput, SessionInput
from workflows.session import SessionWorkflow
from workflows.session_state import PendingRequest

STARTED: dict[tuple[str, int], float] = {}  # (session, call_index) -> activity start


class TimedLlm(LlmActivities):
    @activity.defn(name="llm_call")
    async def llm_call(self, input: LLMCallInput) -> LLMCallResult:
        STARTED[(input.session_id, input.call_index)] = time.perf_counter()
        return await super().llm_call(input)


@workflow.defn(name="BareSession")
class BareSession:
    """The same activities, no hitlflow logic."""

    def __init__(self) -> None:
        self.replies = 0
        self.waiting: int | None = None

    @workflow.run
    async def run(self, input: SessionInput) -> int:
        llm = input.config.agent.llm  # type: ignore[union-attr]
        for i in range(len(llm.responses)):
            await workflow.execute_activity(
                "llm_call", LLMCallInput(session_id=input.session_id, call_id=str(i),
                                         call_index=i, llm=llm, messages=[]),
                result_type=LLMCallResult, start_to_close_timeout=timedelta(seconds=60))
            if i < len(llm.responses) - 1:
                self.waiting = i
                await workflow.wait_condition(lambda i=i: self.replies > i)
                self.waiting = None
        return self.replies

    @workflow.update(name="reply")
    def reply(self, reply: ReplyInput) -> int:
        self.replies += 1
        return self.replies

    @workflow.query(name="pending_request")
    def pending_request(self) -> PendingRequest | None:
        """The same query as a session's, so both variants carry the same query load."""
        if self.waiting is None:
            return None
        return PendingRequest(request_id="bare", kind="confirm", prompt=f"step {self.waiting}?",
                              created_at=workflow.now())


def config(turns: int) -> dict:
    responses = [{"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}}
                 for i in range(turns)] + [{"text": "done", "end": True}]
    return {"initial_message": "go", "agent": {"llm": {"provider": "scripted",
                                                        "responses": responses}}}


async def drive(client: Client, kind: str, tq: str, turns: int, samples: list[float]) -> int:
    """One session: start it, answer each request; return its history length."""
    sid = f"{kind}-{uuid.uuid4().hex[:10]}"
    inp = SessionInput.model_validate({"session_id": sid, "config": config(turns)})
    h: WorkflowHandle = await client.start_workflow(
        "SessionWorkflow" if kind == "hitlflow" else "BareSession", inp, id=sid, task_queue=tq)
    for i in range(turns):
        while (sid, i + 1) in STARTED or (sid, i) not in STARTED:
            await asyncio.sleep(0.005)  # wait for this turn's LLM call
        while True:  # the session waits once the LLM answer is processed
            pending = await h.query("pending_request", result_type=PendingRequest | None)
            if pending is not None and pending.prompt == f"step {i}?":
                request_id = pending.request_id
                break
            await asyncio.sleep(0.005)
        sent = time.perf_counter()
        await h.execute_update("reply", ReplyInput(request_id=request_id, approve=True))
        while (sid, i + 1) not in STARTED:
            await asyncio.sleep(0.001)
        samples.append((STARTED[(sid, i + 1)] - sent) * 1000)
    await h.result()
    return len((await h.fetch_history()).events)


async def run_variant(client: Client, kind: str, n: int, turns: int) -> dict:
    tq = f"bench-{kind}"
    samples: list[float] = []
    async with Worker(client, task_queue=tq, workflows=[SessionWorkflow, BareSession],
                      activities=[TimedLlm().llm_call], max_concurrent_activities=200,
                      workflow_runner=UnsandboxedWorkflowRunner()):
        t0 = time.perf_counter()
        lengths = await asyncio.gather(*(drive(client, kind, tq, turns, samples)
                                         for _ in range(n)))
        wall = time.perf_counter() - t0
    q = statistics.quantiles(samples, n=100)
    return {"p50": statistics.median(samples), "p99": q[98], "turns_per_s": n * turns / wall,
            "events_per_turn": sum(lengths) / (n * turns), "wall_s": wall}


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="concurrent sessions")
    p.add_argument("--turns", type=int, default=3, help="replies per session")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        async with DevServer(Path(tmp), port=17233, ui_port=None) as server:
            client = await Client.connect(server.address,
                                          data_converter=pydantic_data_converter)
            results = {}
            for kind in ("bare", "hitlflow"):
                results[kind] = await run_variant(client, kind, args.n, args.turns)
    print(f"{args.n} concurrent sessions x {args.turns} replies, one tuned dev server")
    print(f"{'variant':10} {'reply p50':>10} {'reply p99':>10} {'turns/s':>9} "
          f"{'events/turn':>12}")
    for kind, r in results.items():
        print(f"{kind:10} {r['p50']:9.1f}ms {r['p99']:9.1f}ms {r['turns_per_s']:9.1f} "
              f"{r['events_per_turn']:12.1f}")
    b, h = results["bare"], results["hitlflow"]
    print(f"ratio hitlflow/bare: p50 {h['p50'] / b['p50']:.2f}, p99 {h['p99'] / b['p99']:.2f}, "
          f"turns/s {h['turns_per_s'] / b['turns_per_s']:.2f}, "
          f"events/turn {h['events_per_turn'] / b['events_per_turn']:.2f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
