"""``hitlflow notify ...``: the notifier's channels and dead letters, through the HTTP API
(operators; docs/notifications.md).

* ``notify test CHANNEL`` sends a test message through a channel of the API's notify
  config now and prints what the receiver answered; exit 1 with why when it failed.
* ``notify dead-letters`` lists the messages that could not be delivered;
  ``--resend ID`` sends one again, ``--resend-all`` all of them (the notifier delivers
  them, with the same message ids, for a new window).

Like the ``session`` commands: the stack's options (``--api-url``, ``--api-port``,
``--data-dir``, ``--token``); an API error prints ``error: <code>: <message>`` and
exits 1; bad arguments exit 2.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from api.cli.options import Stack, stack_options
from api.cli.session_reply import api_of, error, print_json

notify_app = typer.Typer(name="notify", no_args_is_help=True, help=(
    "Notification channels and dead letters: send a test message, list and resend "
    "dead letters (HTTP; operators)."))

AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
PAGE = 500


@notify_app.command("test")
@stack_options
def test_command(
    channel: Annotated[str, typer.Argument(help="A channel of the notify config, by name.")],
    to: Annotated[str | None, typer.Option(
        "--to", help="E-mail channels: the address (default: yours).")] = None,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """Send a test message through CHANNEL now and print what its receiver answered."""
    body: dict[str, Any] = {"channel": channel, **({"to": to} if to else {})}
    with api_of(stack) as api:
        sent = api.post("/api/notifications/test", body)
    if as_json:
        print_json(sent)
        return
    to_whom = f" to {sent['recipient']}" if sent.get("recipient") else ""
    typer.echo(f"{sent['channel']} ({sent['type']}){to_whom} answered: {sent['answer']}")
    typer.echo(f"message id: {sent['message_id']}")


@notify_app.command("dead-letters")
@stack_options
def dead_letters_command(
    resend: Annotated[str | None, typer.Option(
        "--resend", metavar="ID", help="Send this dead letter again (its message_id).")
    ] = None,
    resend_all: Annotated[bool, typer.Option(
        "--resend-all", help="Send every dead letter again.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000,
                                       help="List at most this many.")] = 1000,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """List the dead letters (newest first), or send them again."""
    if resend is not None and resend_all:
        error("give --resend ID or --resend-all, not both", 2)
    with api_of(stack) as api:
        if resend is not None:
            done = api.post(f"/api/notifications/dead-letters/{_path_part(resend)}/resend")
            if as_json:
                print_json(done)
            else:
                typer.echo(f"{done['message_id']} goes out again")
            return
        if resend_all:
            done = api.post("/api/notifications/dead-letters/resend")
            if as_json:
                print_json(done)
            else:
                n = done["resent"]
                typer.echo(f"{n} dead letter{'' if n == 1 else 's'} go{'es' if n == 1 else ''} "
                           "out again")
            return
        letters, more = _listed(api, limit)
    if as_json:
        print_json({"dead_letters": letters, "more": more})
        return
    if not letters:
        typer.echo("no dead letters")
        return
    for d in letters:
        what = d["kind"] + (f" {d['request_id']}" if d.get("request_id") else "")
        to = f" to {d['recipient']}" if d.get("recipient") else ""
        typer.echo(f"{d['message_id']}  {d['channel']}{to}  {what} in {d['session_id']}  "
                   f"dead since {d.get('dead_at') or '?'} after {d['attempts']} "
                   f"attempt{'' if d['attempts'] == 1 else 's'}")
        if d.get("last_error"):
            typer.echo(f"    {d['last_error']}")
    shown = f"{len(letters)}{'+' if more else ''}"
    typer.echo(f"{shown} dead letter{'' if len(letters) == 1 and not more else 's'}; send "
               "again with --resend ID or --resend-all")


def _path_part(message_id: str) -> str:
    if not message_id or any(c in message_id for c in "/?#%") or len(message_id) > 200:
        error(f"{message_id!r} is not a message id", 2)
    return message_id


def _listed(api: Any, limit: int) -> tuple[list[dict[str, Any]], bool]:
    out: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None and len(out) < limit:
        page = api.get("/api/notifications/dead-letters",
                       params={"limit": min(PAGE, limit - len(out)), "offset": offset})
        out += page["dead_letters"]
        offset = page["next_offset"]
    return out, offset is not None


def register(app: typer.Typer) -> None:
    app.add_typer(notify_app)
