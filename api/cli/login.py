"""``hitlflow login``, ``logout`` and ``whoami``: the credential the commands sign in with.

``login`` reads a person's key or a token from stdin (``--key-stdin``) or a prompt that
does not echo it (never from the command line, where other users' ``ps`` and the shell's
history would see it), checks it with the API (``GET /api/whoami``) and keeps it for
that API's address in ``$XDG_CONFIG_HOME/hitlflow/credentials.json``
(``api.cli.credentials``). ``login --print-token`` prints the credential the commands
would send (for ``curl``); ``logout`` forgets the kept one; ``whoami`` shows who the
API takes you for.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from api.cli.options import Stack, fail, stack_options


def _check(url: str, credential: str) -> dict:
    from api.cli.client import ApiClient, ApiClientError

    with ApiClient(url, credential) as api:
        try:
            return api.get("/api/whoami")
        except ApiClientError as err:
            if err.status == 401:
                fail(f"Error: {url} does not accept it ({err.message}); nothing was stored")
            fail(f"Error: {err.code}: {err.message}")


def _who(me: dict) -> str:
    groups = f", groups {','.join(me['groups'])}" if me.get("groups") else ""
    return f"{me['name'] or me['subject']} ({me['role']}; {me['issuer']}:{me['subject']}{groups})"


def login_command(
    *, stack: Stack,
    key_stdin: Annotated[bool, typer.Option(
        "--key-stdin", help="Read the key or token from standard input (else a prompt "
        "asks for it, without echoing it).")] = False,
    print_token: Annotated[bool, typer.Option(
        "--print-token", help="Print the credential the commands send to this API "
        "(e.g. for curl) and stop.")] = False,
) -> None:
    """Sign the commands in to an API with a person's key (or a token), kept for its
    address in ~/.config/hitlflow/credentials.json (mode 0600)."""
    from api.cli.credentials import CredentialsError, store_credential

    url = stack.url()
    if print_token:
        credential, source = stack.credential()
        if credential is None:
            fail(f"Error: no credential for {url}: hitlflow login, --token or "
                 "HITLFLOW_API_TOKEN")
        typer.echo(f"(from {source})", err=True)
        typer.echo(credential)
        return
    if key_stdin:
        credential = sys.stdin.readline().strip()
    else:
        credential = typer.prompt(f"Key or token for {url}", hide_input=True,
                                  default="", show_default=False).strip()
    if not credential or any(c.isspace() for c in credential) or len(credential) > 8192:
        fail("Error: no key or token given (one line, no spaces)", 2)
    me = _check(url, credential)
    try:
        path = store_credential(url, credential)
    except (CredentialsError, OSError) as err:
        fail(f"Error: {err}")
    typer.echo(f"logged in to {url} as {_who(me)}; kept in {path}")


def logout_command(*, stack: Stack) -> None:
    """Forget the credential `hitlflow login` kept for this API."""
    from api.cli.credentials import CredentialsError, forget_credential

    url = stack.url()
    try:
        forgot = forget_credential(url)
    except (CredentialsError, OSError) as err:
        fail(f"Error: {err}")
    typer.echo(f"logged out of {url}" if forgot else f"no credential kept for {url}")


def whoami_command(
    *, stack: Stack,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Who the API takes you for: your principal (issuer, subject, name, groups, role)."""
    from api.cli.client import ApiClientError

    credential, source = stack.credential()
    with stack.client() as api:
        try:
            me = api.get("/api/whoami")
        except ApiClientError as err:
            fail(f"error: {err.code}: {err.message}")
    if as_json:
        typer.echo(json.dumps(me, indent=2))
        return
    typer.echo(f"{_who(me)} at {stack.url()}")
    typer.echo(f"signed in with: {source}" if credential else "signed in with: nothing "
               "(the API runs without authentication)")


def register(app: typer.Typer) -> None:
    app.command("login")(stack_options(login_command))
    app.command("logout")(stack_options(logout_command))
    app.command("whoami")(stack_options(whoami_command))
