"""``hitlflow up``: the whole stack on one machine.

It starts the Temporal dev server (``api.runtime.devserver``), a session worker in a
child process (``api.runtime.worker_process``), the exporter and the HTTP service in
this process, prints where they listen once the worker polls, and on Ctrl-C / SIGTERM
stops them in reverse order: API, worker, server.

Every option also comes from ``HITLFLOW_*`` environment variables (``api.settings``);
a command-line option wins over the environment. What a command runs is imported when
it runs (``hitlflow --help`` loads none of it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from api.cli.api_auth import (
    CLI_KEY_FILE,
    FIRST_ADMIN,
    TOKEN_FILE,
    TokenFileError,
    sign_in_link,
    up_auth,
    warn_auth_off,
)
from api.cli.options import API_URL_FILE, UsageError, fail, settings_of

if TYPE_CHECKING:
    import asyncio

    from activities.deltas import DeltaBus
    from api.cli.api_auth import UpAuth
    from api.cli.worker import RunWorker
    from api.runtime.devserver import DevServer
    from api.settings import HitlflowSettings
    from observation.exporter import LogFeed
    from observation.exporter.note import Signer

#: The line `up` prints once everything runs (tests and scripts wait for it).
READY_LINE = "hitlflow is up"



async def _start_api(settings: HitlflowSettings, stop: asyncio.Event,
                     on_change: Callable[[str], None] | None = None,
                     feed: LogFeed | None = None, deltas: DeltaBus | None = None
                     ) -> asyncio.Task[None]:
    """Start the HTTP service on settings.api_host:settings.api_port until ``stop`` is set.

    Return its task; ``up`` stops it first. The API listens before this returns; a
    port it cannot bind makes the task fail. ``on_change(session_id)`` is called for
    every write the API accepted; SSE streams read ``feed`` (the exporter's committed
    lines) instead of following history, and merge in the model's text as it is
    written from ``deltas`` (the worker's bus).
    """
    import asyncio

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


async def _up(settings: HitlflowSettings, run_worker: RunWorker | None,
              signer: Signer | None = None, auth: UpAuth | None = None,
              notify: bool = False) -> int:
    import asyncio

    from activities.deltas import InProcessDeltaBus
    from api.runtime.devserver import DevServer, DevServerError
    from api.runtime.heap import freeze_startup
    from api.runtime.process import Signals, connect, first, stop_task
    from observation.exporter import LogFeed, Wakeups, run_exporter

    signals = Signals(asyncio.get_running_loop())
    server = DevServer(
        settings.data_dir,
        port=settings.temporal_port,
        ui_port=settings.ui_port,
        namespace=settings.namespace,
    )
    try:
        starting = asyncio.ensure_future(server.start())
        await first(asyncio.shield(starting), signals.stop.wait())
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

        # The worker and the API talk to this server, whatever HITLFLOW_TEMPORAL_ADDRESS
        # and the TEMPORAL_* client configuration say (it takes no TLS, no keys).
        stack = settings.model_copy(update={"temporal_address": server.address,
                                            "temporal_envconfig": False})
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
        # Only the API holds a token `up` made (the worker and the exporter need none).
        api_settings = stack if auth is None or auth.token is None else stack.model_copy(
            update={"api_token": auth.token})
        api = await _start_api(api_settings, api_stop, wakeups, feed, deltas)
        exporter_stop = asyncio.Event()
        exporter = asyncio.create_task(
            run_exporter(await connect(stack), stack.data_dir, exporter_stop, wakeups=wakeups,
                         read_model_url=stack.read_model_url, park=stack.exporter_park,
                         max_followers=stack.exporter_max_followers,
                         sweep_every_s=stack.exporter_sweep_s, feed=feed, signer=signer),
            name="exporter")
        # The notifier (HITLFLOW_NOTIFY_CONFIG): a child process over the read model.
        notifier_stop = asyncio.Event()
        notifier = None
        if notify:
            from api.runtime.notifier_process import run_notifier_process
            notifier = asyncio.create_task(run_notifier_process(stack, notifier_stop),
                                           name="notifier")
        if worker is not None:  # "up" once it polls; a worker that cannot start fails here
            await first(worker_ready.wait(), asyncio.shield(worker), signals.stop.wait(),
                        server.wait())
        recorded = None
        if worker is None or worker_ready.is_set():
            _print_where(settings, server, worker, auth)
            if notifier is not None:
                typer.echo("Notifier:          a process of its own "
                           "(HITLFLOW_NOTIFY_CONFIG; docs/notifications.md)")
            # The client commands find this API from the data directory (api.cli.options).
            recorded = _record_api_url(server.data_dir, stack)
            if auth is not None and auth.token is None:
                from api.cli.client import default_api_url

                warn_auth_off(default_api_url(settings))
            typer.echo(f"{READY_LINE}; press Ctrl-C to stop.")
            freeze_startup()

            watched: list[Awaitable[Any]] = [signals.stop.wait(), server.wait()]
            watched += [asyncio.shield(t) for t in (worker, api, exporter, notifier)
                        if t is not None]
            await first(*watched)

        errors: list[str] = []
        if not server.running:
            errors.append(f"the Temporal dev server exited (code {server.returncode}); its log "
                          f"ends with:\n{server.log_tail()}")
        for task, task_stop, what in [(api, api_stop, "the API"),
                                      (worker, worker_stop, "the worker"),
                                      (notifier, notifier_stop, "the notifier"),
                                      (exporter, exporter_stop, "the exporter")]:
            if task is not None and (err := await stop_task(task, task_stop, signals.force,
                                                            what)):
                errors.append(err)
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


def _print_where(settings: HitlflowSettings, server: DevServer, worker: Any,
                 auth: UpAuth | None) -> None:
    from api.cli.client import default_api_url

    url = default_api_url(settings)
    typer.echo(f"Temporal frontend: {server.address} (namespace {settings.namespace})")
    typer.echo(f"Temporal UI:       {server.ui_url}")
    typer.echo(f"API:               {url}")
    if auth is None or auth.source == "off":
        inbox = f"{url}/ (no sign-in: the API runs without authentication)"
    elif auth.key is not None:  # the admin's key only this user can read: it signs in
        inbox = f"{sign_in_link(url, auth.key)} (signs you in; keep it to yourself)"
    elif auth.source == "env":
        inbox = f"{url}/ (sign in with HITLFLOW_API_TOKEN)"
    else:  # the token only this user can read: the link that signs the browser in
        inbox = f"{sign_in_link(url, auth.token or '')} (signs you in; keep it to yourself)"
    typer.echo(f"Inbox:             {inbox}")
    if auth is not None and auth.key is not None:
        made = "added now; " if auth.key_made else ""
        typer.echo(f"People:            {server.data_dir / 'people.json'} ({made}"
                   f"{FIRST_ADMIN}'s key in {server.data_dir / CLI_KEY_FILE}, which the "
                   "hitlflow commands use; hitlflow people --help)")
    if auth is not None and auth.source in ("made", "kept"):
        typer.echo(f"API token:         {server.data_dir / TOKEN_FILE} (the service "
                   "principal, for automation)")
    where = (f"task queue {settings.task_queue} (a process of its own)" if worker
             else "not started (--no-worker)")
    typer.echo(f"Worker:            {where}")
    typer.echo(f"Data:              {server.data_dir} (server log {server.log_path.name})")
    typer.echo(f"Audit logs:        {server.data_dir / 'runs'} (hitlflow log verify <id>)")


def _record_api_url(data_dir: Path, settings: HitlflowSettings) -> Path | None:
    from api.cli.client import default_api_url

    path = data_dir / API_URL_FILE
    try:
        path.write_text(default_api_url(settings) + "\n")
    except OSError:
        return None
    return path


def _checked(settings: HitlflowSettings) -> HitlflowSettings:
    """The settings with the UI port derived (Temporal's own convention, so
    `--temporal-port` alone moves the UI too) and three different ports."""
    if "ui_port" not in settings.model_fields_set:
        derived = settings.temporal_port + 1000
        if derived > 65535:
            raise UsageError(f"--temporal-port {settings.temporal_port} leaves no default UI "
                             "port (port + 1000); give --ui-port")
        settings = settings.model_copy(update={"ui_port": derived})
    ports = {"--temporal-port": settings.temporal_port, "--ui-port": settings.ui_port,
             "--api-port": settings.api_port}
    if len(set(ports.values())) < len(ports):
        raise UsageError("the ports must differ: "
                         + ", ".join(f"{k} {v}" for k, v in ports.items()))
    return settings


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
        settings = _checked(settings_of(data_dir=data_dir, temporal_port=temporal_port,
                                        ui_port=ui_port, api_port=api_port))
    except UsageError as e:
        fail(f"Error: {e}", 2)
    from api.cli.worker import load_run_worker
    from api.http.doors import AuthConfigError
    from api.identity.people_store import PeopleFileError
    from api.runtime.devserver import DevServerError
    from api.runtime.process import run
    from api.runtime.signing_keys import exporter_signer
    from observation.exporter.note import NoteKeyError

    try:
        run_worker = load_run_worker(process=True) if worker else None
        signer = exporter_signer(settings)  # created at the first start
    except (DevServerError, NoteKeyError, OSError) as e:
        fail(f"Error: {e}")
    try:
        auth = up_auth(settings)  # HITLFLOW_API_TOKEN, or one kept in the data directory
    except AuthConfigError as e:
        fail(f"Error: {e}", 2)
    except PeopleFileError as e:
        fail(f"Error: the people file: {e}")
    except (TokenFileError, OSError) as e:
        fail(f"Error: the API token: {e}")
    run(_up(settings, run_worker, signer, auth, notify=_notify_checked()), serving=True)


def _notify_checked() -> bool:
    """Whether ``up`` runs the notifier (``HITLFLOW_NOTIFY_CONFIG`` set): its config
    and channel secrets are checked first (exit 2 with the problem otherwise)."""
    from pydantic import ValidationError

    from api.notify.service import build_channels
    from api.notify.settings import NotifyConfigError, NotifySettings

    try:
        config = NotifySettings().load()
        if config is None:
            return False
        build_channels(config)
    except NotifyConfigError as e:
        fail(f"Error: {e}", 2)
    except ValidationError as e:
        fail(f"Error: HITLFLOW_NOTIFY_*: {e.errors()[0]['loc'][0]}: {e.errors()[0]['msg']}", 2)
    return True


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)
