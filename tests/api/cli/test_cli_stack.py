"""``hitlflow up`` and ``hitlflow worker`` as real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from api.cli.up import READY_LINE
from api.runtime.devserver import PID_FILENAME, check_port_free
from api.settings import TASK_QUEUE

try:
    from api.runtime.worker import run_worker  # noqa: F401
except ImportError:
    HAS_WORKER = False
else:
    HAS_WORKER = True
needs_worker = pytest.mark.skipif(
    not HAS_WORKER, reason="api.runtime.worker.run_worker does not exist yet (the lead writes it)"
)

START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 60


def cli_env(**extra: str) -> dict[str, str]:
    """The environment without any HITLFLOW_* of the caller, wide and colourless output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HITLFLOW_")}
    env.update(COLUMNS="200", NO_COLOR="1", TERM="dumb", **extra)
    return env


@dataclass
class Cli:
    proc: asyncio.subprocess.Process
    stderr_path: Path
    stdout: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def wait_for_line(self, marker: str, timeout: float = START_TIMEOUT_S) -> None:
        """Read stdout lines until one contains ``marker`` (bounded; fails on EOF)."""
        assert self.proc.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                pytest.fail(f"no {marker!r} within {timeout} s; stdout={self.stdout}, "
                            f"stderr={self.stderr}")
            try:
                raw = await asyncio.wait_for(self.proc.stdout.readline(), remaining)
            except TimeoutError:
                continue
            if not raw:
                await self.proc.wait()
                pytest.fail(f"exited with {self.proc.returncode} before {marker!r}; "
                            f"stdout={self.stdout}, stderr={self.stderr}")
            self.stdout.append(raw.decode().rstrip("\n"))
            if marker in self.stdout[-1]:
                return

    async def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT_S)


@contextlib.asynccontextmanager
async def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
              stdin: bytes | None = None) -> AsyncIterator[Cli]:
    """``python -m api.cli ARGS`` (``stdin``: what the person types, then end of input);
    whatever it started is stopped afterwards, even on failure."""
    stderr_path = tmp_path / f"cli-{uuid.uuid4().hex[:6]}.err"
    with open(stderr_path, "wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "api.cli", *args,
            stdout=asyncio.subprocess.PIPE, stderr=err,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            env=env or cli_env(), cwd=tmp_path,
        )  # fmt: skip
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        await proc.stdin.drain()
        proc.stdin.close()
    try:
        yield Cli(proc, stderr_path)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        # A dev server orphaned by a failed test: its pid is in the data dir.
        for pid_file in tmp_path.rglob(PID_FILENAME):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def frontend_answers(address: str) -> None:
    client = await Client.connect(address)
    await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))


async def wait_for_pollers(client: Client, task_queue: str, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace="default", task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        ))  # fmt: skip
        if resp.pollers:
            return
        assert loop.time() < deadline, f"no worker polls {task_queue} after {timeout} s"
        await asyncio.sleep(0.2)


def worker_processes(parent: int) -> list[int]:
    """``up``'s worker child processes (``python -m api.runtime.worker_process``)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(pid) for pid in children
            if b"api.runtime.worker_process" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def pid_alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def assert_free(*ports: int) -> None:
    for port in ports:
        check_port_free("127.0.0.1", port, "test")


async def run_up_until_ready_then_interrupt(
    tmp_path: Path, free_port: Callable[[], int], *extra: str
) -> tuple[Cli, int]:
    temporal, ui, api = free_port(), free_port(), free_port()
    data_dir = tmp_path / "stack"
    async with cli(tmp_path, "up", "--data-dir", str(data_dir), "--temporal-port", str(temporal),
                   "--ui-port", str(ui), "--api-port", str(api), *extra) as up:
        await up.wait_for_line(READY_LINE)
        out = "\n".join(up.stdout)
        assert f"127.0.0.1:{temporal}" in out
        assert f"http://127.0.0.1:{ui}" in out
        assert "API:" in out
        assert (data_dir / "temporal.sqlite").is_file()
        # The exporter's checkpoint key, made at the first start, readable by its owner only.
        assert stat.S_IMODE((data_dir / "checkpoint.key").stat().st_mode) == 0o600
        await frontend_answers(f"127.0.0.1:{temporal}")
        workers = worker_processes(up.proc.pid)
        if "--no-worker" not in extra:
            # Polling once "up" says so: the worker in a process of its own.
            await wait_for_pollers(await Client.connect(f"127.0.0.1:{temporal}"), TASK_QUEUE)
            assert len(workers) == 1, workers
        else:
            assert workers == []
        rc = await up.interrupt()
    assert all(not pid_alive(pid) for pid in workers)
    assert_free(temporal, ui, api)
    assert not (data_dir / PID_FILENAME).exists()
    return up, rc


@needs_worker
async def test_up_runs_the_stack_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    up, rc = await run_up_until_ready_then_interrupt(tmp_path, free_port)
    assert rc == 0, up.stderr
    assert "stopped" in up.stderr


@contextlib.asynccontextmanager
async def up_with_its_worker(tmp_path: Path, free_port: Callable[[], int]
                             ) -> AsyncIterator[tuple[Cli, int]]:
    """``up`` on free ports, once it says it is up, and its worker process's pid."""
    ports = [str(free_port()) for _ in range(3)]
    async with cli(tmp_path, "up", "--data-dir", str(tmp_path / "stack"), "--temporal-port",
                   ports[0], "--ui-port", ports[1], "--api-port", ports[2]) as up:
        await up.wait_for_line(READY_LINE)
        [worker] = worker_processes(up.proc.pid)
        yield up, worker


@needs_worker
async def test_up_killed_leaves_no_worker_process_behind(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    async with up_with_its_worker(tmp_path, free_port) as (up, worker):
        up.proc.kill()  # no chance to stop anything: the worker sees its stdin end
        await up.proc.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_TIMEOUT_S
        while pid_alive(worker):
            assert loop.time() < deadline, "the worker outlived up"
            await asyncio.sleep(0.1)


@needs_worker
async def test_up_whose_worker_dies_stops_with_an_error(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    async with up_with_its_worker(tmp_path, free_port) as (up, worker):
        os.kill(worker, signal.SIGKILL)
        rc = await asyncio.wait_for(up.proc.wait(), STOP_TIMEOUT_S)
    assert rc == 1, up.stderr
    assert "the worker process exited with code -9" in up.stderr
    assert "Traceback" not in up.stderr
    assert not (tmp_path / "stack" / PID_FILENAME).exists()  # the server stopped too


async def test_up_without_worker_runs_temporal_alone(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    up, rc = await run_up_until_ready_then_interrupt(tmp_path, free_port, "--no-worker")
    assert rc == 0, up.stderr
    assert any("not started (--no-worker)" in line for line in up.stdout)


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], capture_output=True, text=True,
        env=cli_env(**env), cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--temporal-port", "0"], {}, ["--temporal-port", "greater than or equal to 1"]),
        (["--temporal-port", "notanumber"], {}, ["--temporal-port", "valid integer"]),
        ([], {"HITLFLOW_TEMPORAL_PORT": "0"}, ["HITLFLOW_TEMPORAL_PORT", "greater than"]),
        ([], {"HITLFLOW_UI_PORT": "x"}, ["HITLFLOW_UI_PORT", "integer"]),
        (["--temporal-port", "7411", "--ui-port", "7411"], {}, ["ports must differ"]),
        (["--temporal-port", "65000"], {}, ["--ui-port"]),
    ],
)
def test_up_rejects_invalid_input_and_starts_nothing(
    tmp_path: Path, args: list[str], env: dict[str, str], expected: list[str]
) -> None:
    data_dir = tmp_path / "stack"
    r = run_cli(tmp_path, "up", "--data-dir", str(data_dir), *args, **env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    for fragment in expected:
        assert fragment in r.stderr, r.stderr
    assert not data_dir.exists()
    assert "Traceback" not in r.stderr


def test_up_with_a_broken_checkpoint_key_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "bad.key").write_text("PRIVATE+KEY+x+00000000+AA==\n")
    for given in (str(tmp_path / "missing.key"), str(tmp_path / "bad.key")):
        r = run_cli(tmp_path, "up", "--data-dir", str(tmp_path / "stack"),
                    HITLFLOW_CHECKPOINT_KEY=given)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert f"checkpoint key {given}" in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "stack").exists()


def test_up_on_a_used_port_fails_clearly(tmp_path: Path, free_port: Callable[[], int]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_cli(tmp_path, "up", "--no-worker", "--data-dir", str(tmp_path / "stack"),
                    "--temporal-port", str(port), "--ui-port", str(free_port()))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr
    assert READY_LINE not in r.stdout
    assert not (tmp_path / "stack" / PID_FILENAME).exists()


@needs_worker
async def test_worker_runs_against_a_given_address_until_ctrl_c(
    tmp_path: Path, dev_env: WorkflowEnvironment
) -> None:
    target = dev_env.client.service_client.config.target_host
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with cli(tmp_path, "worker", "--temporal-address", target, "--task-queue", tq) as w:
        await w.wait_for_line("press Ctrl-C to stop")
        await wait_for_pollers(dev_env.client, tq)
        rc = await w.interrupt()
    assert rc == 0, w.stderr


@needs_worker
def test_worker_without_temporal_fails_clearly(tmp_path: Path,
                                               free_port: Callable[[], int]) -> None:
    r = run_cli(tmp_path, "worker", "--temporal-address", f"127.0.0.1:{free_port()}")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "the worker failed" in r.stderr
