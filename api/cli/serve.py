"""``hitlflow api``: the HTTP service alone, against a Temporal frontend, until Ctrl-C
(more API processes may serve the same sessions)."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.options import TemporalAddress, UsageError, fail, settings_of


def api_command(
    host: Annotated[str | None, typer.Option("--host", help="env HITLFLOW_API_HOST")] = None,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535,
                                             help="env HITLFLOW_API_PORT")] = None,
    temporal_address: TemporalAddress = None,
) -> None:
    """Serve the HTTP API alone against a Temporal frontend until Ctrl-C (more API
    processes may serve the same sessions)."""
    try:
        settings = settings_of(api_host=host, api_port=port, temporal_address=temporal_address)
    except UsageError as e:
        fail(f"Error: {e}", 2)
    import asyncio

    from api.http.app import ApiStartError, run_api
    from api.runtime.heap import freeze_startup
    from api.runtime.process import Signals, run

    async def main() -> int:
        signals = Signals(asyncio.get_running_loop(), announce=False)
        try:
            typer.echo(f"API: http://{settings.api_host}:{settings.api_port} "
                       f"(Temporal {settings.target}); press Ctrl-C to stop.")
            await run_api(settings, signals.stop, on_serving=freeze_startup)
        except ApiStartError as err:
            typer.echo(f"Error: {err}", err=True)
            return 1
        finally:
            signals.close()
        return 0

    run(main())


def register(app: typer.Typer) -> None:
    app.command("api")(api_command)
