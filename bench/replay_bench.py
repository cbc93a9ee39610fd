"""Benchmark: the worker's CPU per workflow task, temporalio's sandbox against
``build_worker``'s (``api.runtime.sandbox.CompiledSandboxRunner``), by replaying the saved
histories.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/replay_bench.py                 # 7 runs each way, 10 replays each
    .venv/bin/python bench/replay_bench.py --runs 3 --reps 5

Each run replays every history in ``tests/workflows/histories/`` ``--reps`` times
through a ``Replayer`` built as the worker is (interceptors, pydantic converter,
``workflows.session`` passed through), with one runner or the other, alternating; it
reports each run's process CPU time and the ratio compiled/stock by median and by
minimum. Replay runs the same activations, payload visits and sandbox entries as a
live worker, with no server in the way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from api.runtime.worker import SESSION_RUNNER
from workflows.journal_carrier import INTERCEPTORS
from workflows.session import SessionWorkflow

HISTORIES = Path(__file__).resolve().parents[1] / "tests" / "workflows" / "histories"
RUNNERS: dict[str, WorkflowRunner] = {
    "stock": SandboxedWorkflowRunner(restrictions=SESSION_RUNNER.restrictions),
    "compiled": SESSION_RUNNER,  # build_worker's own
}


async def replay_all(runner: WorkflowRunner, histories: list[WorkflowHistory], reps: int
                     ) -> float:
    """Process CPU seconds to replay every history ``reps`` times."""
    replayer = Replayer(workflows=[SessionWorkflow], interceptors=INTERCEPTORS,
                        data_converter=pydantic_data_converter, workflow_runner=runner)
    t0 = time.process_time()
    for _ in range(reps):
        for history in histories:
            await replayer.replay_workflow(history, raise_on_replay_failure=True)
    return time.process_time() - t0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7, help="runs per runner, alternating (7)")
    p.add_argument("--reps", type=int, default=10, help="replays of each history a run (10)")
    args = p.parse_args(argv)
    if args.runs < 1 or args.reps < 1:
        p.error("--runs and --reps must be at least 1")
    return args


async def main(argv: list[str]) -> None:
    args = parse(argv)
    histories = [WorkflowHistory.from_json(p.stem, p.read_text())
                 for p in sorted(HISTORIES.glob("*.json"))]
    cpu: dict[str, list[float]] = {name: [] for name in RUNNERS}
    for run in range(args.runs):
        for name, runner in RUNNERS.items():
            cpu[name].append(await replay_all(runner, histories, args.reps))
            print(f"run {run + 1} {name}: {cpu[name][-1]:.2f} s", file=sys.stderr, flush=True)
    print(f"\n{len(histories)} histories x {args.reps} replays, {args.runs} runs each")
    for name, values in cpu.items():
        print(f"{name:9} median {statistics.median(values):.2f} s  min {min(values):.2f} s")
    med = {name: statistics.median(values) for name, values in cpu.items()}
    print(f"compiled/stock: median {med['compiled'] / med['stock']:.2f}x, "
          f"min {min(cpu['compiled']) / min(cpu['stock']):.2f}x")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
