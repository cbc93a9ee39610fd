"""``hitlflow people ...``: the people of ``local`` mode and their keys, in the data
directory's ``people.json`` (``api.identity.people_store``), changed on disk directly
(like ``up``), not over HTTP: a running API sees a change at its next request.

A key is printed once, when it is made (``add``, ``rotate``), on stdout alone so a
script can capture it; it is kept only hashed. ``list`` never shows keys, only their
ids. A broken people file is refused, and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from api.cli.options import DataDir, UsageError, fail, settings_of
from workflows.people import ROLES

people_app = typer.Typer(help="The people who may sign in (local mode) and their keys.",
                         no_args_is_help=True)

RoleOption = Annotated[str, typer.Option(
    "--role", help=f"One of {', '.join(ROLES)}.", show_default=False)]


def _data_dir(data_dir: Path | None) -> Path:
    try:
        return settings_of(data_dir=data_dir).data_dir
    except UsageError as e:
        fail(f"Error: {e}", 2)


def _role(role: str) -> str:
    if role not in ROLES:
        fail(f"Error: unknown role {role!r}: one of {', '.join(ROLES)}", 2)
    return role


def _store(data_dir: Path | None):
    from api.identity.people_store import PeopleStore

    return PeopleStore(_data_dir(data_dir))


def _run(action):
    """``action()``, with the store's refusals as messages: a broken file exits 1,
    a change that cannot be made exits 2."""
    from api.identity.people_store import PeopleFileError, PersonError

    try:
        return action()
    except PersonError as e:
        fail(f"Error: {e}", 2)
    except PeopleFileError as e:
        fail(f"Error: {e}")
    except OSError as e:
        fail(f"Error: {e}")


def _key_out(key: str, what: str) -> None:
    typer.echo(f"{what}; the key is shown only now (keep it to yourself; it signs in with "
               "`hitlflow login` or the inbox):", err=True)
    typer.echo(key)


@people_app.command("add")
def add_command(
    name: Annotated[str, typer.Argument(help="Their name: the subject sessions name them by.")],
    role: RoleOption,
    group: Annotated[list[str] | None, typer.Option(
        "--group", help="A group they are in (repeat for more).")] = None,
    email: Annotated[str | None, typer.Option("--email", help="Their e-mail address.")] = None,
    data_dir: DataDir = None,
) -> None:
    """Add a person with a new key (printed once)."""
    store = _store(data_dir)
    key = _run(lambda: store.add(name, _role(role), list(group or []), email))  # type: ignore[arg-type]
    _key_out(key, f"added {name} ({role}) to {store.path}")


@people_app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    data_dir: DataDir = None,
) -> None:
    """The people, their roles, groups and key ids (never keys)."""
    store = _store(data_dir)
    doc = _run(store.read)
    rows = [{"name": p.name, "role": p.role, "groups": p.groups, "email": p.email,
             "keys": [{"key_id": k.key_id, "created_at": k.created_at.isoformat()}
                      for k in p.keys]} for p in doc.people]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo(f"nobody in {store.path} (hitlflow people add NAME --role ROLE)")
        return
    for row in rows:
        extra = [f"groups {','.join(row['groups'])}"] if row["groups"] else []
        extra += [row["email"]] if row["email"] else []
        keys = ", ".join(k["key_id"] for k in row["keys"]) or "no key"
        typer.echo(f"{row['name']:<24} {row['role']:<9} keys {keys}"
                   + (f"  ({'; '.join(extra)})" if extra else ""))


def _cli_key_of(data_dir: Path, name: str) -> bool:
    """Whether ``up``'s ``cli-key`` is a key of ``name`` (a rotation replaces it)."""
    from api.cli.api_auth import read_cli_key
    from api.identity.people_store import PeopleStore

    key = read_cli_key(data_dir)
    try:
        principal = PeopleStore(data_dir).principal_of(key) if key else None
    except Exception:  # asked before the change: the change reports it
        return False
    return principal is not None and principal.subject == name


@people_app.command("remove")
def remove_command(
    name: Annotated[str, typer.Argument(help="Who to remove; their keys stop working.")],
    data_dir: DataDir = None,
) -> None:
    """Remove a person: their keys stop working at once (a running API included)."""
    from api.cli.api_auth import CLI_KEY_FILE

    store = _store(data_dir)
    was_cli = _cli_key_of(store.data_dir, name)
    _run(lambda: store.remove(name))
    if was_cli:
        (store.data_dir / CLI_KEY_FILE).unlink(missing_ok=True)
    typer.echo(f"removed {name} from {store.path}")


@people_app.command("rotate")
def rotate_command(
    name: Annotated[str, typer.Argument(help="Whose key to replace.")],
    keep_old: Annotated[bool, typer.Option(
        "--keep-old", help="Keep their other keys working too.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Give a person a new key (printed once); their old keys stop working unless
    --keep-old. When `up`'s cli-key was theirs, it is replaced too."""
    from api.cli.api_auth import write_cli_key

    store = _store(data_dir)
    was_cli = _cli_key_of(store.data_dir, name)
    key = _run(lambda: store.rotate(name, keep_old))
    if was_cli:
        write_cli_key(store.data_dir, key)
    _key_out(key, f"a new key for {name}" + ("" if keep_old else "; their old keys are "
                                              "revoked") + (" (and in cli-key)" if was_cli
                                                            else ""))


@people_app.command("set-role")
def set_role_command(
    name: Annotated[str, typer.Argument(help="Whose role to change.")],
    role: Annotated[str, typer.Argument(help=f"One of {', '.join(ROLES)}.")],
    data_dir: DataDir = None,
) -> None:
    """Change a person's role (effective at their next request)."""
    store = _store(data_dir)
    _run(lambda: store.set_role(name, _role(role)))  # type: ignore[arg-type]
    typer.echo(f"{name} is now {role}")


def register(app: typer.Typer) -> None:
    app.add_typer(people_app, name="people")
