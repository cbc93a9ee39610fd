"""``hitlflow up`` (the whole stack on one machine) and ``hitlflow worker``.

``up`` starts the Temporal dev server (``api.runtime.devserver``), a session worker in a
child process (``api.runtime.worker_process``), the exporter and the HTTP service in this
process, prints where they listen once the worker polls, and on
Ctrl-C / SIGTERM stops them in reverse order: API, worker, server. ``worker``
runs a session worker alone against any Temporal frontend.

Every option also comes from ``HITLFLOW_*`` environment variables (``api.settings``);
a command-line option wins over the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from activities.deltas import DeltaBus, InProcessDeltaBus
from api.runtime.devserver import DevServer, DevServerError
from api.runtime.heap import freeze_startup
from api.runtime.signing_keys import exporter_signer
from api.settings import HitlflowSettings
from observation.exporter import LogFeed, Wakeups, run_exporter
from observation.exporter.note import NoteKeyError, Signer

#: How long a worker may take to finish its in-flight tasks after Ctrl-C.
WORKER_STOP_TIMEOUT_S = 30.0
#: The line `up` prints once everything runs (tests and scripts wait for it).
READY_LINE = "hitlflow is up"

RunWorker = Callable[..., Awaitable[None]]  # (settings, stop, *, deltas=None, on_ready=None)


class _Usage(Exception):
    """Invalid input: reported with exit code 2 before anything starts."""


# ---------------------------------------------------------------------------
# Settings from options + environment


def _settings(**options: Any) -> HitlflowSettings:
    """HitlflowSettings from HITLFLOW_* with the given (non-None) options on top."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return HitlflowSettings(**given)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            source = (f"--{field.replace('_', '-')}" if field in given
                      else f"HITLFLOW_{field.upper()}")
            problems.append(f"{source}: {err['msg']} (got {err.get('input')!r})")
        raise _Usage("; ".join(problems)) from None


def _fail_usage(message: str) -> None:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(2)


def _load_run_worker(*, process: bool = False) -> RunWorker:
    """The session worker in this process, or (``up``) in a child process
    (``api.runtime.worker_process``: the worker's CPU and heap apart from the API's)."""
    try:
        from api.runtime.worker import run_worker
        from api.runtime.worker_process import run_worker_process
    except ImportError as e:
        raise DevServerError(
            f"the session worker (api.runtime.worker.run_worker) is not available: {e}") from None
    return run_worker_process if process else run_worker


# ---------------------------------------------------------------------------
# The HTTP service


async def _start_api(settings: HitlflowSettings, stop: asyncio.Event,
                     on_change: Callable[[str], None] | None = None,
                     feed: LogFeed | None = None, deltas: DeltaBus | None = None
                     ) -> asyncio.Task[None] | None:
    """Start the HTTP service on settings.api_host:settings.api_port until ``stop`` is set.

    Return its task, or None while there is no HTTP service yet. ``up`` stops it first.
    The API listens before this returns; a port it cannot bind makes the task fail.
    ``on_change(session_id)`` is called for every write the API accepted; SSE streams
    read ``feed`` (the exporter's committed lines) instead of following history, and
    merge in the model's text as it is written from ``deltas`` (the worker's bus).
    """
    from api.http.app import ApiServer, ApiStartError, create_app

    provider = (lambda _client, sid, after: feed.events(sid, after)) if feed else None
    head = (lambda _client, sid: feed.head(sid)) if feed else None
    server = ApiServer(create_app(settings, on_change=on_change, event_provider=provider,
                                  stream_head=head, delta_bus=deltas),
                       settings.api_host, settings.api_port)
    try:
        await server.start()
    except ApiStartError as err:
        failure = err

        async def failed() -> None:
            raise failure

        return asyncio.create_task(failed(), name="api")
    return asyncio.create_task(server.serve_until(stop), name="api")


# ---------------------------------------------------------------------------
# Signals and exit


class _Signals:
    """SIGINT/SIGTERM → ``stop``; a second one → ``force`` (do not wait for the worker)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stop = asyncio.Event()
        self.force = asyncio.Event()
        self._loop = loop
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)

    def _on_signal(self) -> None:
        if self.stop.is_set():
            self.force.set()
            typer.echo("stopping now", err=True)
        else:
            self.stop.set()
            typer.echo("stopping... (Ctrl-C again to force)", err=True)

    def close(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)


def _exit(code: int) -> None:
    """Exit without interpreter teardown once the Temporal client has been used.

    The SDK's Rust runtime threads can crash CPython finalization (SIGSEGV/SIGABRT
    at exit, temporalio/sdk-python#300), which would turn a clean stop into a
    non-zero exit code. Everything is stopped and flushed by now.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait until the first of ``aws`` completes; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _stop_task(task: asyncio.Task[None], stop: asyncio.Event, force: asyncio.Event,
                     what: str, timeout: float) -> str | None:
    """Set ``stop``, wait for ``task`` (bounded, cut short by ``force``); return its error."""
    stop.set()
    if not task.done():
        await _first(asyncio.shield(task), force.wait(), asyncio.sleep(timeout))
    if not task.done():
        typer.echo(f"{what} did not stop in time; cancelling it", err=True)
        task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return None
    except Exception as e:
        return f"{what} failed: {type(e).__name__}: {e}"
    return None


# ---------------------------------------------------------------------------
# up


async def _up(settings: HitlflowSettings, run_worker: RunWorker | None,
              signer: Signer | None = None) -> int:
    signals = _Signals(asyncio.get_running_loop())
    server = DevServer(
        settings.data_dir,
        port=settings.temporal_port,
        ui_port=settings.ui_port,
        namespace=settings.namespace,
    )
    try:
        starting = asyncio.ensure_future(server.start())
        await _first(asyncio.shield(starting), signals.stop.wait())
        if not starting.done():  # Ctrl-C while starting
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, DevServerError):
                await starting
            await server.stop()
            return 0
        try:
            starting.result()
        except DevServerError as e:
            typer.echo(f"Error: {e}", err=True)
            return 1

        # The worker and the API talk to this server, whatever HITLFLOW_TEMPORAL_ADDRESS says.
        stack = settings.model_copy(update={"temporal_address": server.address})
        worker_stop, api_stop = asyncio.Event(), asyncio.Event()
        # The worker's LLM activity streams the model's text to the API's SSE streams
        # (text.delta) through this bus: the worker process's pipe is replayed into it.
        deltas = InProcessDeltaBus()
        worker_ready = asyncio.Event()
        worker = (asyncio.create_task(
            run_worker(stack, worker_stop, deltas=deltas,
                       on_ready=lambda _identity: worker_ready.set()),
            name="worker") if run_worker else None)
        # The exporter mirrors every session's history into <data_dir>/runs/ as it runs;
        # the API wakes a parked session's follower as soon as it accepted a write, and
        # its SSE streams take the exporter's lines (one follower per session, not two).
        wakeups, feed = Wakeups(), LogFeed(stack.data_dir / "runs")
        api = await _start_api(stack, api_stop, wakeups, feed, deltas)
        from api.runtime.worker import connect

        exporter_stop = asyncio.Event()
        exporter = asyncio.create_task(
            run_exporter(await connect(stack), stack.data_dir, exporter_stop, wakeups=wakeups,
                         read_model_url=stack.read_model_url, park=stack.exporter_park,
                         max_followers=stack.exporter_max_followers,
                         sweep_every_s=stack.exporter_sweep_s, feed=feed, signer=signer),
            name="exporter")
        if worker is not None:  # "up" once it polls; a worker that cannot start fails here
            await _first(worker_ready.wait(), asyncio.shield(worker), signals.stop.wait(),
                         server.wait())
        recorded = None
        if worker is None or worker_ready.is_set():
            _print_where(settings, server, api, worker)
            # The client commands find this API from the data directory (api.cli.options).
            recorded = _record_api_url(server.data_dir, stack) if api is not None else None
            typer.echo(f"{READY_LINE}; press Ctrl-C to stop.")
            freeze_startup()

            watched: list[Awaitable[Any]] = [signals.stop.wait(), server.wait()]
            watched += [asyncio.shield(t) for t in (worker, api, exporter) if t is not None]
            await _first(*watched)

        errors: list[str] = []
        if not server.running:
            errors.append(f"the Temporal dev server exited (code {server.returncode}); its log "
                          f"ends with:\n{server.log_tail()}")
        if api is not None:
            err = await _stop_task(api, api_stop, signals.force, "the API", WORKER_STOP_TIMEOUT_S)
            errors += [err] if err else []
        if worker is not None:
            err = await _stop_task(worker, worker_stop, signals.force, "the worker",
                                   WORKER_STOP_TIMEOUT_S)
            errors += [err] if err else []
        err = await _stop_task(exporter, exporter_stop, signals.force, "the exporter",
                               WORKER_STOP_TIMEOUT_S)
        errors += [err] if err else []
        if not signals.stop.is_set() and not errors:
            errors.append("a component stopped on its own")
        if recorded is not None:
            recorded.unlink(missing_ok=True)
        await server.stop()
        for err in errors:
            typer.echo(f"Error: {err}", err=True)
        typer.echo("stopped" if not errors else "stopped after an error", err=True)
        return 1 if errors else 0
    finally:
        await server.stop()
        signals.close()


def _print_where(settings: HitlflowSettings, server: DevServer, api: Any, worker: Any) -> None:
    typer.echo(f"Temporal frontend: {server.address} (namespace {settings.namespace})")
    typer.echo(f"Temporal UI:       {server.ui_url}")
    if api is not None:
        typer.echo(f"API:               http://{settings.api_host}:{settings.api_port}")
        typer.echo(f"Inbox:             http://{settings.api_host}:{settings.api_port}/ "
                   "(answer waiting sessions in a browser)")
    else:
        typer.echo("API:               (not started: the HTTP service is not wired in yet)")
    where = (f"task queue {settings.task_queue} (a process of its own)" if worker
             else "not started (--no-worker)")
    typer.echo(f"Worker:            {where}")
    typer.echo(f"Data:              {server.data_dir} (server log {server.log_path.name})")
    typer.echo(f"Audit logs:        {server.data_dir / 'runs'} (hitlflow log verify <id>)")


def _record_api_url(data_dir: Path, settings: HitlflowSettings) -> Path | None:
    from api.cli.client import default_api_url
    from api.cli.options import API_URL_FILE

    path = data_dir / API_URL_FILE
    try:
        path.write_text(default_api_url(settings) + "\n")
    except OSError:
        return None
    return path


def up_command(
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Where the Temporal database and logs live "
        "(env HITLFLOW_DATA_DIR; default ./.hitlflow)"),
    temporal_port: int | None = typer.Option(
        None, "--temporal-port", min=1, max=65535,
        help="Temporal frontend (gRPC) port (env HITLFLOW_TEMPORAL_PORT; default 7233)"),
    ui_port: int | None = typer.Option(
        None, "--ui-port", min=1, max=65535,
        help="Temporal Web UI port (env HITLFLOW_UI_PORT; default Temporal port + 1000)"),
    api_port: int | None = typer.Option(
        None, "--api-port", min=1, max=65535,
        help="HTTP API port (env HITLFLOW_API_PORT; default 8000)"),
    worker: bool = typer.Option(
        True, "--worker/--no-worker", help="Start a session worker (default) or only Temporal."),
) -> None:
    """Run Temporal (with its Web UI), a worker and the API on this machine until Ctrl-C."""
    try:
        settings = _settings(data_dir=data_dir, temporal_port=temporal_port, ui_port=ui_port,
                             api_port=api_port)
        if "ui_port" not in settings.model_fields_set:
            # Temporal's own convention, so `--temporal-port` alone moves the UI too.
            derived = settings.temporal_port + 1000
            if derived > 65535:
                raise _Usage(f"--temporal-port {settings.temporal_port} leaves no default UI "
                             "port (port + 1000); give --ui-port")
            settings = settings.model_copy(update={"ui_port": derived})
        ports = {"--temporal-port": settings.temporal_port, "--ui-port": settings.ui_port,
                 "--api-port": settings.api_port}
        if len(set(ports.values())) < len(ports):
            raise _Usage("the ports must differ: "
                         + ", ".join(f"{k} {v}" for k, v in ports.items()))
    except _Usage as e:
        _fail_usage(str(e))
    try:
        run_worker = _load_run_worker(process=True) if worker else None
        signer = exporter_signer(settings)  # created at the first start
    except (DevServerError, NoteKeyError, OSError) as e:
        typer.echo(f"Error: {e}", err=True)
        raise typer.Exit(1) from None
    _exit(asyncio.run(_up(settings, run_worker, signer)))


# ---------------------------------------------------------------------------
# worker


async def _worker(settings: HitlflowSettings, run_worker: RunWorker) -> int:
    signals = _Signals(asyncio.get_running_loop())
    try:
        task = asyncio.create_task(run_worker(settings, signals.stop,
                                              on_ready=lambda _id: freeze_startup()),
                                   name="worker")
        typer.echo(f"worker: Temporal {settings.target}, namespace {settings.namespace}, "
                   f"task queue {settings.task_queue}; press Ctrl-C to stop.")
        await _first(asyncio.shield(task), signals.stop.wait())
        stopped_by_signal = signals.stop.is_set()
        err = await _stop_task(task, signals.stop, signals.force, "the worker",
                               WORKER_STOP_TIMEOUT_S)
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
    temporal_address: str | None = typer.Option(
        None, "--temporal-address",
        help="host:port of the Temporal frontend (env HITLFLOW_TEMPORAL_ADDRESS; "
        "default 127.0.0.1:<HITLFLOW_TEMPORAL_PORT>)"),
    namespace: str | None = typer.Option(
        None, "--namespace", help="Temporal namespace (env HITLFLOW_NAMESPACE; default default)"),
    task_queue: str | None = typer.Option(
        None, "--task-queue", help="Task queue (env HITLFLOW_TASK_QUEUE)"),
) -> None:
    """Run a session worker against a Temporal frontend until Ctrl-C."""
    try:
        settings = _settings(temporal_address=temporal_address, namespace=namespace,
                             task_queue=task_queue)
    except _Usage as e:
        _fail_usage(str(e))
    try:
        run_worker = _load_run_worker()
    except DevServerError as e:
        typer.echo(f"Error: {e}", err=True)
        raise typer.Exit(1) from None
    _exit(asyncio.run(_worker(settings, run_worker)))


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)
    app.command("worker")(worker_command)
