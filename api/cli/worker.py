"""``hitlflow worker``: a session worker alone, against any Temporal frontend, until
Ctrl-C (``up`` runs one too, in a process of its own)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import typer

from api.cli.options import TemporalAddress, UsageError, fail, settings_of

if TYPE_CHECKING:
    from api.settings import HitlflowSettings

RunWorker = Callable[..., Awaitable[None]]  # (settings, stop, *, deltas=None, on_ready=None)


def load_run_worker(*, process: bool = False) -> RunWorker:
    """The session worker in this process, or (``up``) in a child process
    (``api.runtime.worker_process``: the worker's CPU and heap apart from the API's)."""
    from api.runtime.devserver import DevServerError

    try:
        from api.runtime.worker import run_worker
        from api.runtime.worker_process import run_worker_process
    except ImportError as e:
        raise DevServerError(
            f"the session worker (api.runtime.worker.run_worker) is not available: {e}") from None
    return run_worker_process if process else run_worker


async def _worker(settings: HitlflowSettings, run_worker: RunWorker) -> int:
    import asyncio

    from api.runtime.heap import freeze_startup
    from api.runtime.process import Signals, connect_args, describe_connection, first, stop_task

    signals = Signals(asyncio.get_running_loop())
    try:
        task = asyncio.create_task(run_worker(settings, signals.stop,
                                              on_ready=lambda _id: freeze_startup()),
                                   name="worker")
        typer.echo(f"worker: Temporal {describe_connection(connect_args(settings))}, "
                   f"task queue {settings.task_queue}; press Ctrl-C to stop.")
        await first(asyncio.shield(task), signals.stop.wait())
        stopped_by_signal = signals.stop.is_set()
        err = await stop_task(task, signals.stop, signals.force, "the worker")
        if err:
            typer.echo(f"Error: {err}", err=True)
            return 1
        if not stopped_by_signal:
            typer.echo("Error: the worker stopped on its own", err=True)
            return 1
        return 0
    finally:
        signals.close()


def worker_command(
    temporal_address: TemporalAddress = None,
    namespace: str | None = typer.Option(
        None, "--namespace", help="Temporal namespace (env HITLFLOW_NAMESPACE; default default)"),
    task_queue: str | None = typer.Option(
        None, "--task-queue", help="Task queue (env HITLFLOW_TASK_QUEUE)"),
) -> None:
    """Run a session worker against a Temporal frontend until Ctrl-C."""
    try:
        settings = settings_of(temporal_address=temporal_address, namespace=namespace,
                               task_queue=task_queue)
    except UsageError as e:
        fail(f"Error: {e}", 2)
    from api.runtime.devserver import DevServerError
    from api.runtime.process import TemporalConnectError, connect_args, run

    try:
        connect_args(settings)  # the TEMPORAL_* configuration can be used
        run_worker = load_run_worker()
    except (DevServerError, TemporalConnectError) as e:
        fail(f"Error: {e}")
    run(_worker(settings, run_worker))


def register(app: typer.Typer) -> None:
    app.command("worker")(worker_command)
