"""The ``hitlflow`` command line. Each command group lives in its own module."""

from __future__ import annotations

import importlib
import json
from typing import Any

import typer
from typer.core import TyperGroup

#: Command groups whose module loads only when the group is named, with what
#: ``hitlflow --help`` says of them: ``telemetry``'s options list the store's job types
#: and statuses, and ``observation.telemetry`` loads the exporter with them.
LAZY_GROUPS = {
    "telemetry": ("api.cli.telemetry", "Telemetry runs (parent/child per session): list, rebuild."),
}


class _LazyGroups(TyperGroup):
    """The root group: :data:`LAZY_GROUPS` are listed by their help line, and built from
    their module's ``register(app, help)`` once a command line names them."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in LAZY_GROUPS if n not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in LAZY_GROUPS and cmd_name not in self.commands:
            return TyperGroup(name=cmd_name, help=LAZY_GROUPS[cmd_name][1])  # for the listing
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] in LAZY_GROUPS and args[0] not in self.commands:
            module, help_line = LAZY_GROUPS[args[0]]
            built = typer.Typer()
            built.callback()(lambda: None)  # a group, so the command keeps its name
            importlib.import_module(module).register(built, help_line)
            group = typer.main.get_command(built)
            assert isinstance(group, TyperGroup)
            self.add_command(group.commands[args[0]], args[0])
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_LazyGroups,
    name="hitlflow",
    help="Durable, observable, human-in-the-loop agent sessions on Temporal.",
    no_args_is_help=True,
    add_completion=False,
)


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
    from rich.console import Console
    from rich.table import Table

    from workflows.tables import statecharts_markdown, topology

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
    console = Console()
    console.print(nodes)
    console.print(edges)
    console.print(
        f"{len(topo.forbidden_transitions)} forbidden transitions "
        "(--json lists them with their reasons)"
    )


def _register_commands() -> None:
    """Each command group's module registers its commands; the modules are light (a
    command imports what it runs when it runs), so ``hitlflow --help`` starts at once."""
    from api.cli import (
        demo,
        exporter,
        log,  # log verify/replay/export/rebuild-read-model, and its checkpoint commands
        login,  # login, logout, whoami
        notifier,
        notify,  # notify test, notify dead-letters
        people,
        serve,  # api
        session,
        up,
        worker,
    )

    for group in (demo, up, worker, log, exporter, notifier, session, serve, people, login,
                  notify):
        group.register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
