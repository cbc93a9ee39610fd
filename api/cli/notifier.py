"""``hitlflow notifier``: the notifier alone, until Ctrl-C: new notices of the read
model into the outbox, and the outbox to its channels (``api.notify.service``;
docs/notifications.md). ``up`` runs it as a child process when
``HITLFLOW_NOTIFY_CONFIG`` is set.

A notify config that cannot be used (missing, not valid, a secret's variable not
set) is a clear message on stderr and exit code 2, before anything starts.
"""

from __future__ import annotations

from pathlib import Path

import typer

from api.cli.options import fail

CONFIG_EXIT = 2


def notifier_command(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="env HITLFLOW_DATA_DIR"),
    read_model_url: str | None = typer.Option(
        None, "--read-model-url", help="postgresql://... (env HITLFLOW_READ_MODEL_URL)"),
    config: Path | None = typer.Option(
        None, "--config", help="the notify config file (env HITLFLOW_NOTIFY_CONFIG)"),
    stop_on_stdin_eof: bool = typer.Option(False, "--stop-on-stdin-eof", hidden=True),
) -> None:
    """Deliver notifications (webhooks, e-mail, Slack) until Ctrl-C."""
    import asyncio
    import logging
    import sys

    from pydantic import ValidationError

    from api.cli.client import default_api_url
    from api.identity.people_store import PeopleStore
    from api.notify.service import Notifier, build_channels
    from api.notify.settings import NotifyConfigError, NotifySettings
    from api.runtime.process import serve
    from api.settings import HitlflowSettings
    from observation.read_model import ReadModelError, open_store

    overrides = {k: v for k, v in {"data_dir": data_dir,
                                   "read_model_url": read_model_url}.items() if v}
    settings = HitlflowSettings(**overrides)
    try:
        notify = NotifySettings(**({"config": config} if config else {}))
    except ValidationError as err:
        fail(f"error: HITLFLOW_NOTIFY_*: {err.errors()[0]['loc'][0]}: "
             f"{err.errors()[0]['msg']}", CONFIG_EXIT)
    if notify.config is None:
        fail("error: no notify config: set HITLFLOW_NOTIFY_CONFIG (or --config) to its file",
             CONFIG_EXIT)
    try:
        notify_config = notify.load()
        assert notify_config is not None
        channels = build_channels(notify_config)  # its secrets, before anything starts
        store = open_store(settings.data_dir, settings.read_model_url)
        notifier = Notifier(store, notify_config, notify, data_dir=settings.data_dir,
                            base_url=default_api_url(settings), channels=channels,
                            people=PeopleStore(settings.data_dir))
    except NotifyConfigError as err:
        fail(f"error: {err}", CONFIG_EXIT)
    except ReadModelError as err:
        fail(f"error: {err}")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def body(stop: asyncio.Event) -> None:
        if stop_on_stdin_eof:  # up's child: stop when up closes our stdin (or dies)
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                         sys.stdin)

            async def watch() -> None:
                while await reader.read(4096):
                    pass
                stop.set()

            watcher = asyncio.create_task(watch())
        typer.echo(f"notifier: {len(notify_config.channels)} channel(s), "
                   f"{len(notify_config.routes)} route(s), outbox in {store.where}",
                   err=True)
        try:
            await notifier.run(stop)
        finally:
            if stop_on_stdin_eof:
                watcher.cancel()
            store.close()

    serve(body, fails_with=(ReadModelError,))


def register(app: typer.Typer) -> None:
    app.command("notifier")(notifier_command)
