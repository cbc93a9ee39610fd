"""``hitlflow api``: the HTTP service alone, against a Temporal frontend, until Ctrl-C
(more API processes may serve the same sessions). It needs someone who can sign in
(``HITLFLOW_API_TOKEN``, people with keys, a trusted proxy, an OIDC issuer) or,
explicitly, ``HITLFLOW_API_AUTH=off``: without, it refuses to start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.options import TemporalAddress, UsageError, fail, settings_of

if TYPE_CHECKING:
    import asyncio


def api_command(
    host: Annotated[str | None, typer.Option("--host", help="env HITLFLOW_API_HOST")] = None,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535,
                                             help="env HITLFLOW_API_PORT")] = None,
    temporal_address: TemporalAddress = None,
) -> None:
    """Serve the HTTP API alone against a Temporal frontend until Ctrl-C (more API
    processes may serve the same sessions). Needs someone who can sign in (people with
    keys, HITLFLOW_API_TOKEN, a trusted proxy or OIDC; or, explicitly,
    HITLFLOW_API_AUTH=off): docs/security.md."""
    try:
        settings = settings_of(api_host=host, api_port=port, temporal_address=temporal_address)
    except UsageError as e:
        fail(f"Error: {e}", 2)
    from api.cli.api_auth import warn_auth_off
    from api.cli.client import default_api_url
    from api.http.app import ApiStartError, run_api
    from api.http.doors import AuthConfigError, check_auth

    try:
        chain = check_auth(settings)
    except AuthConfigError as e:
        fail(f"Error: {e}", 2)
    if chain is None:
        warn_auth_off(default_api_url(settings))
    from api.runtime.heap import freeze_startup
    from api.runtime.process import TemporalConnectError, connect_args, describe_connection, serve

    try:
        temporal = describe_connection(connect_args(settings))
    except TemporalConnectError as e:
        fail(f"Error: {e}")

    async def body(stop: asyncio.Event) -> None:
        typer.echo(f"API: http://{settings.api_host}:{settings.api_port} "
                   f"(Temporal {temporal}); press Ctrl-C to stop.")
        await run_api(settings, stop, on_serving=freeze_startup)

    serve(body, fails_with=(ApiStartError,))


def register(app: typer.Typer) -> None:
    app.command("api")(api_command)
