"""``hitlflow exporter``: the exporter alone (e.g. next to a Temporal cluster), until
Ctrl-C: every session's history into ``<data_dir>/runs/``, the read model, the
telemetry store (``observation.exporter``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from api.cli.options import TemporalAddress, fail

if TYPE_CHECKING:
    import asyncio


def exporter_command(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="env HITLFLOW_DATA_DIR"),
    temporal_address: TemporalAddress = None,
    read_model_url: str | None = typer.Option(
        None, "--read-model-url", help="postgresql://... (env HITLFLOW_READ_MODEL_URL)"),
) -> None:
    """Run the exporter alone (e.g. next to a Temporal cluster) until Ctrl-C."""
    from api.runtime.heap import freeze_startup
    from api.runtime.process import (
        TemporalConnectError,
        connect,
        connect_args,
        describe_connection,
        serve,
    )
    from api.runtime.signing_keys import exporter_signer
    from api.settings import HitlflowSettings
    from observation.exporter import run_exporter
    from observation.exporter.note import NoteKeyError

    overrides = {k: v for k, v in {"data_dir": data_dir, "temporal_address": temporal_address,
                                   "read_model_url": read_model_url}.items() if v}
    settings = HitlflowSettings(**overrides)
    try:
        signer = exporter_signer(settings)  # the operator's, or created at the first start
    except (NoteKeyError, OSError) as err:
        fail(f"error: {err}")

    try:
        temporal = describe_connection(connect_args(settings))
    except TemporalConnectError as err:
        fail(f"Error: {err}")

    async def body(stop: asyncio.Event) -> None:
        typer.echo(f"exporting sessions of {temporal} into {settings.data_dir / 'runs'}")
        client = await connect(settings)  # TemporalConnectError: unreachable, refused
        freeze_startup()
        await run_exporter(client, settings.data_dir, stop,
                           read_model_url=settings.read_model_url, park=settings.exporter_park,
                           max_followers=settings.exporter_max_followers,
                           sweep_every_s=settings.exporter_sweep_s, signer=signer)

    serve(body, fails_with=(RuntimeError,))


def register(app: typer.Typer) -> None:
    app.command("exporter")(exporter_command)
