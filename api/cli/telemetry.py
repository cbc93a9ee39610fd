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

from api.cli.options import Stack, stack_options
from api.settings import HitlflowSettings
from observation.telemetry import JOB_TYPES, STATUSES, STORE_NAME, TelemetryStore
from observation.telemetry.model import TelemetryRun
from observation.telemetry.store import TelemetryStoreError

telemetry_app = typer.Typer(no_args_is_help=True)

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
@stack_options
def runs_command(
    session: str | None = typer.Option(None, "--session", help="Only this session's runs."),
    job_type: str | None = typer.Option(
        None, "--job-type", help=f"Only runs of this job type ({', '.join(JOB_TYPES)})."),
    status: str | None = typer.Option(
        None, "--status", help=f"Only runs in this status ({', '.join(STATUSES)})."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
    *, stack: Stack,
) -> None:
    """List telemetry runs: parents (job_type session) and their children, by session
    then in log order, with trace_id/span_id as in the NDJSON events."""
    _choice(job_type, JOB_TYPES, "--job-type")
    _choice(status, STATUSES, "--status")
    path = _data_dir(stack.data_dir) / STORE_NAME
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
    console = Console()
    # A narrow terminal keeps what tells runs apart (and their tokens) on one line each;
    # the times and span ids are in --json.
    wide = console.width >= WIDE_COLUMNS
    table = Table(title=f"telemetry runs ({len(runs)})", show_lines=False)
    columns = ["run", "job_type", "status", "tokens", "name"]
    columns += ["started_at", "ended_at", "span_id"] if wide else []
    rows = []
    for r in runs:
        depth = {"session": 0, "llm_call": 2, "gate": 2}.get(r.job_type, 1)
        label = r.session_id if r.job_type == "session" else r.run_id.split("/", 1)[1]
        if not wide:  # a child's label without its session's id (the parent row has it)
            label = label.replace(f"{r.session_id}-", "").replace(f"{r.session_id}.", "")
            if r.job_type == "work_item":  # as `hitlflow session show` prints contracts
                label = label[:len("work_item/") + 8]
        row = ["  " * depth + label, r.job_type, r.status, tokens_of(r, runs), r.name]
        rows.append(row + ([r.started_at or "", r.ended_at or "", r.span_id] if wide else []))
    widths = [max([len(col), *(len(row[i]) for row in rows)]) for i, col in enumerate(columns)]
    if not wide:  # every column but the name as wide as its widest cell; the name: the rest
        rest = console.width - sum(widths[:-1]) - 3 * len(columns) - 1
        widths[-1] = max(8, min(widths[-1], rest))
    for i, col in enumerate(columns):
        if wide:
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col, no_wrap=True, overflow="ellipsis", width=widths[i],
                             justify="right" if col == "tokens" else "left")
    for row in rows:
        table.add_row(*row)
    console.print(table)

WIDE_COLUMNS = 140


def tokens_of(run: TelemetryRun, runs: list[TelemetryRun]) -> str:
    """An LLM call's total tokens; a session's, the sum of its calls' (listed ones)."""
    if run.job_type == "llm_call":
        total = run.attributes.get("total_tokens")
        return "" if total is None else str(total)
    if run.job_type == "session":
        totals = [r.attributes.get("total_tokens") for r in runs
                  if r.session_id == run.session_id and r.job_type == "llm_call"]
        known = [t for t in totals if isinstance(t, int)]
        return str(sum(known)) if known else ""
    return ""


@telemetry_app.command("rebuild")
@stack_options
def rebuild_command(*, stack: Stack) -> None:
    """Make telemetry.sqlite again from the logs under runs/ (stop `hitlflow up`
    first): the same runs the exporter wrote, a corrupt store replaced."""
    from observation.telemetry.hook import rebuild_store

    d = _data_dir(stack.data_dir)
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


def register(app: typer.Typer, help_line: str | None = None) -> None:
    """``hitlflow telemetry``; its help line is the command line's (``api.cli.main``:
    the group loads only when named)."""
    app.add_typer(telemetry_app, name="telemetry", help=help_line)
