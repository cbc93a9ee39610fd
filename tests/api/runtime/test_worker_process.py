"""``up``'s worker process: a worker that cannot run is an error ``up`` reports (never
a silent "up"), and broken input to the child changes nothing and says what is wrong."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from activities.deltas import InProcessDeltaBus
from api.runtime.worker_process import WorkerProcessError, run_worker_process
from api.settings import HitlflowSettings


async def test_a_worker_that_cannot_start_is_an_error_not_ready(
        tmp_path: Path, free_port: Callable[[], int], capfd: pytest.CaptureFixture[str]) -> None:
    settings = HitlflowSettings(temporal_address=f"127.0.0.1:{free_port()}",
                                data_dir=tmp_path)  # nothing listens there
    ready: list[str] = []
    with pytest.raises(WorkerProcessError, match="exited with code 1"):
        await asyncio.wait_for(run_worker_process(settings, asyncio.Event(),
                                                  deltas=InProcessDeltaBus(),
                                                  on_ready=ready.append), 120)
    assert ready == []
    err = capfd.readouterr().err
    assert "the worker failed" in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "stdin", "expected"), [
    ([], b"", "usage: python -m api.runtime.worker_process <fd>"),
    (["x"], b"", "usage: python -m api.runtime.worker_process <fd>"),
    (["1"], b"not json\n", "the worker failed: ValidationError"),
    (["1"], b'{"temporal_port": 0}\n', "the worker failed: ValidationError"),
    (["1"], b"", "the worker failed: ValidationError"),  # up died before the settings
])
def test_the_child_refuses_broken_input_clearly(argv: list[str], stdin: bytes,
                                                expected: str) -> None:
    r = subprocess.run([sys.executable, "-m", "api.runtime.worker_process", *argv], input=stdin,
                       capture_output=True, timeout=60)
    assert r.returncode != 0
    assert expected in r.stderr.decode(), r.stderr
    assert b"Traceback" not in r.stderr and r.stdout == b""
