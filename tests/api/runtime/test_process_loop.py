"""The serving processes (``up``, ``serve``, the exporter, the notifier) run on uvloop's
event loop (issue 28: less CPU per callback and wake-up); the worker keeps asyncio's
loop (its workflows run on Temporal's)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import asyncio, sys
    from api.runtime.process import run

    async def main() -> int:
        print(type(asyncio.get_running_loop()).__module__)
        return 7

    run(main(), serving=sys.argv[1] == "serving")
""")


def loop_module(*args: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, timeout=60)
    return done.stdout.strip(), done.returncode


def test_a_serving_process_runs_on_uvloop_and_keeps_its_exit_code():
    assert loop_module("serving") == ("uvloop", 7)


def test_other_processes_keep_asyncios_loop():
    module, code = loop_module("worker")
    assert code == 7 and module.startswith("asyncio")

