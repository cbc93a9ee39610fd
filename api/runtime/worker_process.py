"""``hitlflow up``'s session worker, in a process of its own.

Why a process: the worker's activations (the sandbox, payload conversion, its
cache of up to ``HITLFLOW_WORKER_MAX_CACHED_WORKFLOWS`` sessions) are CPU and
heap that would otherwise share one interpreter, one GIL and one garbage
collector with the API's reads, the exporter and every SSE stream.

``up`` calls :func:`run_worker_process` (the shape of ``api.runtime.worker.run_worker``);
it starts ``python -m api.runtime.worker_process <fd>`` in a session of its own, writes
the stack's settings as one JSON line to its stdin and keeps stdin open: the
child stops when stdin ends, whether ``up`` closed it (stopping) or died. The
child writes the model's text as it is written, and one ``ready`` line, to the
pipe ``fd`` (``activities.deltas.pipe``); ``up`` replays them into its bus.
Its log lines go to ``up``'s stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable

from activities.deltas import InProcessDeltaBus
from activities.deltas.pipe import PipeDeltaBus, replay_line
from api.runtime.heap import freeze_startup
from api.runtime.process import exit_now
from api.settings import HitlflowSettings

#: A line of the pipe is at most a piece (``activities.deltas.pipe.PIECE_CHARS``) as JSON.
LINE_LIMIT = 1 << 20


class WorkerProcessError(RuntimeError):
    """The worker process ended on its own."""


async def run_worker_process(settings: HitlflowSettings, stop: asyncio.Event, *,
                             deltas: InProcessDeltaBus | None = None,
                             on_ready: Callable[[str], None] | None = None) -> None:
    """Run the worker in a child process until ``stop`` is set (then let it finish
    its tasks; cancelling this kills it). ``deltas`` gets the model's text as the
    child's LLM activity writes it; ``on_ready(identity)`` once the worker polls.
    Raises :class:`WorkerProcessError` when the child exits by itself."""
    read_fd, write_fd = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "api.runtime.worker_process", str(write_fd),
            stdin=asyncio.subprocess.PIPE, pass_fds=(write_fd,),
            start_new_session=True)  # up forwards Ctrl-C: the child never sees it twice
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    assert proc.stdin is not None
    pump = asyncio.create_task(_pump(read_fd, deltas or InProcessDeltaBus(), on_ready))
    try:
        proc.stdin.write(settings.model_dump_json().encode() + b"\n")
        with contextlib.suppress(ConnectionError):  # it died at once: proc.wait() says
            await proc.stdin.drain()
        exited = asyncio.ensure_future(proc.wait())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not exited.done():
            proc.stdin.close()  # the child's stop
            await exited
        if proc.returncode or not stop.is_set():  # failed, or ended unasked
            raise WorkerProcessError(f"the worker process exited with code {proc.returncode}")
    finally:
        if proc.returncode is None:  # cancelled (a forced stop): do not wait for it
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(pump), 5)  # the pipe's last lines
        pump.cancel()


async def _pump(fd: int, bus: InProcessDeltaBus,
                on_ready: Callable[[str], None] | None) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    try:
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # longer than any line we write: skip it
                continue
            if not line:
                return
            replay_line(line, bus, on_ready)
    finally:
        transport.close()


# ---------------------------------------------------------------------------
# The child


async def _child(fd: int) -> int:
    from api.runtime.worker import run_worker

    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    settings = HitlflowSettings.model_validate_json(await stdin.readline())
    bus = PipeDeltaBus(fd)
    stop = asyncio.Event()

    async def stop_at_eof() -> None:
        while await stdin.read(4096):
            pass
        stop.set()

    watcher = asyncio.create_task(stop_at_eof())
    try:
        await run_worker(settings, stop, deltas=bus,
                         on_ready=lambda identity: (bus.ready(identity), freeze_startup()))
    finally:
        watcher.cancel()
        await asyncio.to_thread(bus.close)
    return 0


def main(argv: list[str]) -> None:
    if len(argv) != 1 or not argv[0].isdigit():
        sys.exit("usage: python -m api.runtime.worker_process <fd> (hitlflow up starts it)")
    code = 1
    try:
        code = asyncio.run(_child(int(argv[0])))
    except Exception as err:
        print(f"Error: the worker failed: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        exit_now(code)  # everything is stopped: no interpreter teardown


if __name__ == "__main__":
    main(sys.argv[1:])
