"""The ``hitlflow`` command line. Each command group lives in its own module."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from workflows.tables import statecharts_markdown, topology

app = typer.Typer(
    name="hitlflow",
    help="Durable, observable, human-in-the-loop agent sessions on Temporal.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """Durable, observable, human-in-the-loop agent sessions on Temporal."""


@app.command("topology")
def topology_command(
    session: bool = typer.Option(False, "--session", help="The session statechart instead."),
    as_json: bool = typer.Option(False, "--json", help="Print the topology as JSON."),
    markdown: bool = typer.Option(False, "--markdown", help="Print docs/statecharts.md."),
) -> None:
    """Print the contract FSM topology (or, with --session, the session statechart)."""
    if markdown:
        typer.echo(statecharts_markdown(), nl=False)
        return
    topo = topology("session" if session else "contract")
    if as_json:
        typer.echo(json.dumps(topo.model_dump(mode="json"), indent=2))
        return
    nodes = Table(title=f"{topo.machine}: states")
    for col in ("status", "initial", "terminal", "stable", "resumable"):
        nodes.add_column(col)
    mark = {True: "✓", False: ""}
    for n in topo.nodes:
        nodes.add_row(n.status, mark[n.is_initial], mark[n.is_terminal], mark[n.is_stable],
                      mark[n.is_resumable])
    edges = Table(title=f"{topo.machine}: transitions")
    for col in ("from", "trigger", "to", "guard"):
        edges.add_column(col)
    for e in topo.edges:
        edges.add_row(e.from_status, e.trigger, e.to_status, e.guard or "")
    console.print(nodes)
    console.print(edges)
    console.print(
        f"{len(topo.forbidden_transitions)} forbidden transitions "
        "(--json lists them with their reasons)"
    )


def _register_commands() -> None:
    from api.cli import demo as cli_demo

    cli_demo.register(app)
    from api.cli import stack as cli_stack  # up, worker

    cli_stack.register(app)
    from api.cli import log as cli_log  # log verify/replay/export

    cli_log.register(app)
    from api.cli import session as cli_session  # session ..., api

    cli_session.register(app)
    from api.cli import telemetry as cli_telemetry  # telemetry runs/rebuild

    cli_telemetry.register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
