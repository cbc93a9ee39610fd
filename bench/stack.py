"""What the benchmarks share: free ports, `hitlflow up` as a subprocess, worker
processes, session configs, following a workflow's history, percentiles and
/proc figures.

Benchmarks drive the stack through its public entry points only (`hitlflow up`,
`hitlflow worker`, `api.runtime.worker.build_worker`, the HTTP API, Temporal), so they keep
working while the internals change.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import re
import secrets
import signal
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle

from api.runtime.devserver import PID_FILENAME, tuning_args

READY_LINE = b"hitlflow is up"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------
# Ports, configs, figures


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_body(confirms: int) -> dict:
    """A scripted session config: ``confirms`` confirm requests ("step i?"), then done."""
    asks = [{"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}} for i in range(confirms)]
    return {"initial_message": "go", "agent": {"llm": {"provider": "scripted", "responses": [
        *asks, {"text": "done", "end": True}]}}}


def pct(values: Sequence[float], p: int) -> float:
    """The p-th percentile (inclusive method); the value itself for one sample."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def p50_p99(values: Sequence[float]) -> str:
    return f"p50 {pct(values, 50):8.1f} ms  p99 {pct(values, 99):8.1f} ms  (n={len(values)})"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def up_synchronous() -> str:
    """The SQLite ``synchronous=`` value ``up`` runs the dev server with."""
    return next(a.split("=", 1)[1] for a in tuning_args() if a.startswith("synchronous="))


def sqlite_tuning(synchronous: str) -> list[str]:
    """``up``'s server flags (``api.runtime.devserver.tuning_args``) with ``synchronous`` set."""
    out = []
    for arg in tuning_args():
        out.append(f"synchronous={synchronous}" if arg.startswith("synchronous=") else arg)
    return out


# ---------------------------------------------------------------------------
# /proc


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _stat(pid: int, tid: int | None = None) -> list[str]:
    """The fields of ``pid``'s ``stat`` after its name (of its thread ``tid`` if given)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    return Path(path).read_text().rsplit(")", 1)[1].split()


def cpu_s(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of ``pid`` (threads included), or of its thread ``tid``."""
    fields = _stat(pid, tid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


#: The threads of the Temporal client's core (its Rust runtime) are named so.
CORE_THREAD = "tokio-"
#: How a process's live threads are grouped (``_threads``).
THREAD_GROUPS = ("main", "core", "other")


def _threads(pid: int, core: str) -> Iterator[tuple[str, int]]:
    """``(group, tid)`` of each live thread of ``pid``: ``main``, ``core`` (its name
    starts with ``core``) or ``other``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        if task.name == str(pid):
            yield "main", pid
            continue
        try:
            comm = (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue
        yield "core" if comm.startswith(core) else "other", int(task.name)


def thread_cpu_s(pid: int, core: str = CORE_THREAD) -> dict[str, float]:
    """User + system CPU seconds of ``pid``'s main thread (``main``) and of its live
    threads whose name starts with ``core`` (``core``: by default the Temporal client's
    Rust runtime); the rest of :func:`cpu_s` is its other threads, those that ended
    included."""
    out = {"main": 0.0, "core": 0.0}
    for group, tid in _threads(pid, core):
        if group in out:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                out[group] += cpu_s(pid, tid)
    return out


def thread_switches(pid: int, core: str = CORE_THREAD) -> dict[str, int]:
    """Context switches (voluntary + involuntary: a thread going to sleep or being
    preempted) of ``pid``'s live threads, by :func:`thread_cpu_s`'s groups and
    ``other`` (threads that ended are not counted)."""
    out = dict.fromkeys(THREAD_GROUPS, 0)
    for group, tid in _threads(pid, core):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        out[group] += sum(int(line.split()[1]) for line in status.splitlines()
                          if line.startswith(("voluntary_ctxt_switches",
                                              "nonvoluntary_ctxt_switches")))
    return out


def reaped_children_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid``'s children that ended and that it waited for
    (``cutime`` + ``cstime``: a child's CPU is there once it is reaped, not before)."""
    fields = _stat(pid)
    return (int(fields[13]) + int(fields[14])) / CLK_TCK


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s live children (every thread's)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # the thread ended meanwhile
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s live children, their children, and so on."""
    out, todo = [], children(pid)
    while todo:
        child = todo.pop()
        out.append(child)
        with contextlib.suppress(FileNotFoundError):  # it ended meanwhile
            todo += children(child)
    return out


async def cpu_share(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU used by each pid over ``seconds``, as a fraction of one core."""
    before = {k: cpu_s(p) for k, p in pids.items()}
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    wall = time.perf_counter() - t0
    return {k: (cpu_s(p) - before[k]) / wall for k, p in pids.items()}


# ---------------------------------------------------------------------------
# hitlflow up


def api_headers() -> dict[str, str]:
    """What the benchmark's clients send: the API token of its stacks. One for the run,
    in the environment (set at import, before any process starts): ``up`` and every
    client process share it (the API requires one: docs/security.md)."""
    return {"authorization": f"Bearer {os.environ['HITLFLOW_API_TOKEN']}"}


os.environ.setdefault("HITLFLOW_API_TOKEN", secrets.token_urlsafe(32))


def up_env() -> dict[str, str]:
    """As a user runs it: bytecode is cached. (Some CI images set PYTHONDONTWRITEBYTECODE;
    the workflow sandbox re-imports the workflow module per session, so without the
    cache every new session compiles it from source.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONUNBUFFERED": "1"}


WORKER_MODULE = re.compile(rb"\bapi\.(runtime\.)?worker_process\b")


@dataclass
class Up:
    """A running ``hitlflow up``: its process, the API's URL, Temporal's address."""

    proc: asyncio.subprocess.Process
    url: str
    temporal: str
    data: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def server_pid(self) -> int:
        """The Temporal dev server's pid (``up`` writes it into the data dir)."""
        return int((self.data / PID_FILENAME).read_text().strip())

    @property
    def worker_pid(self) -> int:
        """The session worker's pid: ``up`` runs it in a child process (the module is
        ``api.runtime.worker_process``; ``api.worker_process`` before the API was split
        in three, so older baselines can be measured)."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        return next(int(pid) for pid in children
                    if WORKER_MODULE.search(Path(f"/proc/{pid}/cmdline").read_bytes()))

    @property
    def stderr_path(self) -> Path:
        return self.data / "up.stderr.log"

    async def stop(self) -> int:
        """Ctrl-C; its exit code. Says how much ``up`` wrote on stderr (kept in a file:
        a loaded stack can log a line per session)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGINT)
        code = await self.proc.wait()
        lines = self.stderr_path.read_text(errors="replace").splitlines()
        if lines:
            print(f"`hitlflow up` wrote {len(lines)} line(s) on stderr "
                  f"({self.stderr_path.name}); the most frequent kinds:", file=sys.stderr)
            for kind, n in line_kinds(lines).most_common(5):
                print(f"  {n:6} x {kind[:160]}", file=sys.stderr)
        return code


def line_kinds(lines: list[str]) -> Counter[str]:
    """Lines counted by kind: ids and numbers replaced by ``#``."""
    return Counter(re.sub(r"[\w.-]*\d[\w.-]*", "#", line) for line in lines)


async def start_up(data: Path, *args: str, env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> Up:
    """``hitlflow up`` on free ports in ``data`` (``env``: variables to set for it; ``cwd``:
    its working directory, this one's if None); return once it says it is up."""
    temporal, ui, api = free_port(), free_port(), free_port()
    with open(data / "up.stderr.log", "wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "api.cli", "up", "--data-dir", str(data),
            "--temporal-port", str(temporal), "--ui-port", str(ui), "--api-port", str(api),
            *args, stdout=asyncio.subprocess.PIPE, stderr=stderr, env={**up_env(), **(env or {})},
            cwd=cwd)
    assert proc.stdout is not None
    while READY_LINE not in (line := await asyncio.wait_for(proc.stdout.readline(), 120)):
        if not line:
            raise SystemExit(f"hitlflow up exited with {await proc.wait()}")
    asyncio.get_running_loop().create_task(_drain(proc.stdout))
    return Up(proc, f"http://127.0.0.1:{api}", f"127.0.0.1:{temporal}", data)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def start_cli_worker(temporal: str, task_queue: str) -> asyncio.subprocess.Process:
    """``hitlflow worker`` as a user starts it."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "api.cli", "worker", "--temporal-address", temporal,
        "--task-queue", task_queue, stdout=asyncio.subprocess.DEVNULL, env=up_env())


# ---------------------------------------------------------------------------
# Worker processes (the benchmark's clients stay out of the measured process)

#: ``hitlflow``: the worker exactly as ``api.runtime.worker.build_worker`` builds it (what ``up``
#: runs, its sandboxed runner). ``bare``: ``bare_workflow``'s workflows with the same
#: activities and the same runner (its own module passed through, as build_worker's).
WORKER_KINDS = ("hitlflow", "bare")


def _worker_main(kind: str, address: str, task_queue: str, ready: multiprocessing.Event
                 ) -> None:
    # As a user runs it (``up_env``): bytecode is cached. A spawned process inherits
    # PYTHONDONTWRITEBYTECODE; with it, the sandbox compiles the workflow module from
    # source for every new workflow (measured: 10% of the hitlflow worker's CPU at -n 200).
    sys.dont_write_bytecode = False
    asyncio.run(_run_worker(kind, address, task_queue, ready))


async def _run_worker(kind: str, address: str, task_queue: str,
                      ready: multiprocessing.Event) -> None:
    from temporalio.worker import Worker

    from activities.commands import run_command
    from activities.llm.activity import LlmActivities
    from activities.mcp.pool import McpClientPool
    from activities.mcp.tools import McpToolActivities
    from api.runtime.process import connect
    from api.runtime.sandbox import sandbox_runner
    from api.runtime.worker import build_worker
    from api.settings import HitlflowSettings

    client = await connect(HitlflowSettings(temporal_address=address))
    pool = McpClientPool()
    if kind == "hitlflow":
        worker = build_worker(client, task_queue, pool)
    else:
        from bare_workflow import BareSession, UpdateLoop

        tools = McpToolActivities(pool)  # the activities build_worker registers
        runner = sandbox_runner("bare_workflow")  # build_worker's, for this module
        worker = Worker(client, task_queue=task_queue, workflows=[BareSession, UpdateLoop],
                        activities=[LlmActivities().llm_call, tools.list_tools,
                                    tools.call_tool, run_command], workflow_runner=runner)
    async with worker:
        ready.set()
        await asyncio.Event().wait()


@dataclass
class WorkerProcess:
    """A worker of ``kind`` in its own process (``with``: started, then terminated)."""

    kind: str
    address: str
    task_queue: str
    proc: multiprocessing.Process | None = field(default=None, init=False)

    def __enter__(self) -> WorkerProcess:
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        self.proc = ctx.Process(target=_worker_main, daemon=True,
                                args=(self.kind, self.address, self.task_queue, ready))
        self.proc.start()
        if not ready.wait(120):
            raise SystemExit(f"the {self.kind} worker did not start")
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None and self.proc.pid is not None
        return self.proc.pid

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.kill()  # no clean shutdown needed: the benchmark is over
        self.proc.join(10)


# ---------------------------------------------------------------------------
# Following a workflow's history (a long-poll, no queries)


_CLOSED = {EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
           EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
           EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
           EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
           EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
           EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW}


def _ts(ev: HistoryEvent) -> float:
    return ev.event_time.seconds + ev.event_time.nanos / 1e9


class StepFollower:
    """Follows one workflow's history and sees, for any workflow that runs ``llm_call``
    and then waits for the person:

    * ``started(i)``: when the i-th ``llm_call`` started (the server's event time of
      its ActivityTaskStarted, wall clock of this machine);
    * ``next_wait()``: the next time a workflow task completed after an ``llm_call``
      completed, i.e. the workflow processed the answer and now waits.

    ``follow()`` long-polls the history (``wait_new_event``: no query, no polling).
    A long-poll counts against the namespace's concurrent poller limit, which a stack
    holding a long-poll per session can exhaust: ``catch_up()`` reads the history
    without waiting instead (``poll_s`` apart). Either way a failure of the reading
    is raised by ``started``/``next_wait`` rather than waited on for ever.
    """

    def __init__(self, handle: WorkflowHandle, *, long_poll: bool = True,
                 poll_s: float = 0.02) -> None:
        self.handle = handle
        self.events = 0
        self._waits: asyncio.Queue[float] = asyncio.Queue()
        self._llm: set[int] = set()
        self._starts: dict[int, asyncio.Future[float]] = {}
        self._after_llm = False
        self._task = asyncio.create_task(self.follow() if long_poll else self._poll(poll_s))

    def _slot(self, i: int) -> asyncio.Future[float]:
        return self._starts.setdefault(i, asyncio.get_running_loop().create_future())

    async def started(self, i: int) -> float:
        return await self._unless_failed(self._slot(i))

    async def next_wait(self) -> float:
        return await self._unless_failed(self._waits.get())

    async def done(self) -> int:
        """Until the workflow closes; its history length."""
        return await self._task

    def stop(self) -> None:
        self._task.cancel()

    async def _unless_failed(self, aw: Awaitable[float]) -> float:
        waiter = asyncio.ensure_future(aw)
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            return waiter.result()
        waiter.cancel()
        self._task.result()  # raises what stopped the reading
        raise RuntimeError(f"{self.handle.id} closed before the awaited step")

    async def follow(self) -> int:
        async for ev in self.handle.fetch_history_events(wait_new_event=True):
            self.events += 1
            self._see(ev)
        return self.events

    async def catch_up(self) -> bool:
        """Read the history without waiting; whether the workflow has closed."""
        seen, closed = 0, False
        async for ev in self.handle.fetch_history_events():
            seen += 1
            if seen > self.events:
                self.events = seen
                self._see(ev)
            closed = ev.event_type in _CLOSED
        return closed

    async def _poll(self, poll_s: float) -> int:
        while not await self.catch_up():
            await asyncio.sleep(poll_s)
        return self.events

    def _see(self, ev: HistoryEvent) -> None:
        t = ev.event_type
        if t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if ev.activity_task_scheduled_event_attributes.activity_type.name == "llm_call":
                self._llm.add(ev.event_id)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sched = ev.activity_task_started_event_attributes.scheduled_event_id
            if sched in self._llm:
                slot = self._slot(sorted(self._llm).index(sched))
                if not slot.done():
                    slot.set_result(_ts(ev))
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if ev.activity_task_completed_event_attributes.scheduled_event_id in self._llm:
                self._after_llm = True
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and self._after_llm:
            self._after_llm = False
            self._waits.put_nowait(_ts(ev))
