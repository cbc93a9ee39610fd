"""A command group of ``hitlflow`` on a bare Typer app, for CliRunner tests."""

from __future__ import annotations

from collections.abc import Callable

import typer

from api.cli import log as cli_log


def group_app(register: Callable[[typer.Typer], None]) -> typer.Typer:
    """A root app with one group registered (its callback makes it a group, so the
    commands are named as on the real command line: ``log verify``, ...)."""
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def log_app() -> typer.Typer:
    """``hitlflow log ...``."""
    return group_app(cli_log.register)
