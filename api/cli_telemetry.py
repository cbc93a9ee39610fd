"""``hitlflow telemetry``: the telemetry runs of sessions (seed 003, central telemetry).

``runs`` reads ``<data_dir>/telemetry.sqlite`` (written by the exporter of
``hitlflow up``) read-only; ``rebuild`` makes that store again from the logs under
``<data_dir>/runs/`` alone. Neither needs Temporal.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from api.settings import HitlflowSettings
from observation.telemetry import JOB_TYPES, STATUSES, STORE_NAME, TelemetryStore
from observation.telemetry.store import TelemetryStoreError

telemetry_app = typer.Typer(help="Telemetry runs (parent/child per session): list, rebuild.",
                            no_args_is_help=True)

DATA_DIR = typer.Option(None, "--data-dir", help="The stack's data directory "
                        "(env HITLFLOW_DATA_DIR; default ./.hitlflow)")


def _data_dir(data_dir: Path | None) -> Path:
    return data_dir if data_dir is not None else HitlflowSettings().data_dir


def _fail(message: str) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(1)


def _choice(value: str | None, allowed: tuple[str, ...], what: str) -> str | None:
    if value is not None and value not in allowed:
        raise typer.BadParameter(f"{what} must be one of {', '.join(allowed)}")
    return value


@telemetry_app.command("runs")
def runs_command(
    session: str | None = typer.Option(None, "--session", help="Only this session's runs."),
    job_type: str | None = typer.Option(
        None, "--job-type", help=f"Only runs of this job type ({', '.join(JOB_TYPES)})."),
    status: str | None = typer.Option(
        None, "--status", help=f"Only runs in this status ({', '.join(STATUSES)})."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
    data_dir: Path | None = DATA_DIR,
) -> None:
    """List telemetry runs: parents (job_type session) and their children, by session
    then in log order, with trace_id/span_id as in the NDJSON events."""
    _choice(job_type, JOB_TYPES, "--job-type")
    _choice(status, STATUSES, "--status")
    path = _data_dir(data_dir) / STORE_NAME
    try:
        with TelemetryStore.open(path, readonly=True) as store:
            runs = store.runs(session_id=session, job_type=job_type, status=status,
                              limit=limit)
    except TelemetryStoreError as err:
        hint = (" (the exporter of `hitlflow up` writes it; `hitlflow telemetry rebuild` "
                "makes it from the logs)") if not path.exists() else ""
        _fail(f"error: {err}{hint}")
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in runs], indent=2))
        return
    table = Table(title=f"telemetry runs ({len(runs)})", show_lines=False)
    for col in ("run", "job_type", "status", "started_at", "ended_at", "span_id", "name"):
        table.add_column(col, overflow="fold")
    for r in runs:
        depth = {"session": 0, "llm_call": 2, "gate": 2}.get(r.job_type, 1)
        label = r.session_id if r.job_type == "session" else r.run_id.split("/", 1)[1]
        table.add_row("  " * depth + label, r.job_type, r.status,
                      r.started_at or "", r.ended_at or "", r.span_id, r.name)
    Console().print(table)


@telemetry_app.command("rebuild")
def rebuild_command(data_dir: Path | None = DATA_DIR) -> None:
    """Make telemetry.sqlite again from the logs under runs/ (stop `hitlflow up`
    first): the same runs the exporter wrote, a corrupt store replaced."""
    from observation.telemetry.hook import rebuild_store

    d = _data_dir(data_dir)
    if not (d / "runs").is_dir():
        _fail(f"error: no logs under {d / 'runs'}")
    try:
        synced, errors = rebuild_store(d)
    except TelemetryStoreError as err:
        _fail(f"error: {err}")
    for sid, err in errors.items():
        typer.echo(f"{sid}: not projected: {err}", err=True)
    typer.echo(f"{d / STORE_NAME}: {synced} sessions projected from {d / 'runs'}")
    if errors:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(telemetry_app, name="telemetry")
