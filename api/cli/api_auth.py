"""The API's credentials on one machine. ``up`` makes a token when none is configured and
keeps it in the data directory (``api-token``, readable by its owner only, kept across
restarts): the service principal, for automation. In ``local`` mode it also adds the
first person, ``admin``, when ``people.json`` has nobody, and keeps admin's key in
``cli-key`` (0600). The client commands and the demo read them from there, as they read
the API's address (``api.cli.options``); the inbox's sign-in link carries the key. And
the warning of an API that runs without authentication (docs/security.md, "Identity")."""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer

if TYPE_CHECKING:
    from api.settings import HitlflowSettings

#: The file in the data directory that holds the API token ``up`` made.
TOKEN_FILE = "api-token"
#: The file in the data directory that holds the key of the admin ``up`` made.
CLI_KEY_FILE = "cli-key"
#: The name of the first person ``up`` adds (role admin).
FIRST_ADMIN = "admin"


class TokenFileError(Exception):
    pass


def read_token(data_dir: Path, name: str = TOKEN_FILE) -> str | None:
    """The token (or, ``name=CLI_KEY_FILE``, the key) kept in ``data_dir``, or None when
    there is none (or it cannot be read)."""
    try:
        token = (data_dir / name).read_text().strip()
    except OSError:
        return None
    return token or None


def read_cli_key(data_dir: Path) -> str | None:
    return read_token(data_dir, CLI_KEY_FILE)


def write_cli_key(data_dir: Path, key: str) -> None:
    """Keep ``key`` in ``<data_dir>/cli-key`` (0600; written whole, then renamed)."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=".cli-key.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        os.replace(tmp, data_dir / CLI_KEY_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def first_admin(data_dir: Path) -> tuple[str | None, bool]:
    """The key ``up`` signs the CLI and the inbox in with, and whether it was made now:
    with nobody in ``people.json``, a new person ``admin`` (role admin) whose key is
    kept in ``cli-key``; else the key in ``cli-key`` while it still works (one that no
    longer does, its person removed or rotated, is removed: the commands then use the
    API token). Raises ``PeopleFileError`` for a people file that cannot be used."""
    from api.identity.people_store import PeopleStore

    store = PeopleStore(data_dir)
    if not store.read().people:
        key = store.add(FIRST_ADMIN, "admin")
        write_cli_key(data_dir, key)
        return key, True
    key = read_cli_key(data_dir)
    if key is None:
        return None, False
    if store.principal_of(key) is None:
        (data_dir / CLI_KEY_FILE).unlink(missing_ok=True)
        return None, False
    return key, False


def load_or_create_token(data_dir: Path) -> tuple[str, bool]:
    """The token kept in ``data_dir`` and whether it was made now: a new one
    (``secrets.token_urlsafe``) is written with mode 0600 at the first start. A file
    that others may read, or an empty one, is refused with the fix in the message."""
    path = data_dir / TOKEN_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise TokenFileError(f"{path} is not a file of yours: delete it for a new "
                                 "token") from None
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise TokenFileError(f"{path} may be read by others (mode {mode:o}): "
                                 f"chmod 600 {path}, or delete it for a new token") from None
        token = read_token(data_dir)
        if token is None:
            raise TokenFileError(f"{path} holds no token: delete it for a new one") from None
        return token, False
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, True


def sign_in_link(api_url: str, credential: str) -> str:
    """The inbox with a person's key (``#key=``) or the token (``#token=``) in the URL's
    fragment: a browser never sends a fragment to the server, and the inbox removes it
    from the address bar once read."""
    from api.identity.people_store import is_key

    return f"{api_url}/#{'key' if is_key(credential) else 'token'}={credential}"


def warn_auth_off(api_url: str) -> None:
    """Say loudly, on stderr, that the API at ``api_url`` takes requests from anyone."""
    rule = "!" * 78
    typer.echo("\n".join([
        rule,
        "WARNING: the HTTP API runs WITHOUT AUTHENTICATION (auth off).",
        f"Anyone who can reach {api_url} (any user or program on this machine,",
        "or more, depending on HITLFLOW_API_HOST) can start sessions, which run commands",
        "as this user, and answer what sessions wait for. Unset HITLFLOW_API_AUTH and",
        "HITLFLOW_AUTH_MODE to require sign-in (docs/security.md).",
        rule]), err=True)


@dataclass(frozen=True)
class UpAuth:
    """How ``up``'s API authenticates: ``token`` (None: authentication off) and where it
    came from: ``env`` (HITLFLOW_API_TOKEN), ``made`` now or ``kept`` in the data
    directory, or ``off``; in local mode, ``key``: the admin's key in ``cli-key``
    (``key_made`` now), None when there is none that works."""

    token: str | None
    source: Literal["env", "made", "kept", "off"]
    key: str | None = None
    key_made: bool = False


def up_auth(settings: HitlflowSettings) -> UpAuth:
    """The token ``up``'s API requires: HITLFLOW_API_TOKEN, else the one kept in the data
    directory (made at the first start); none with authentication off. In local mode,
    the first admin's key too (:func:`first_admin`). Raises :class:`TokenFileError`,
    ``PeopleFileError`` or ``api.http.doors.AuthConfigError``."""
    from api.http.doors import check_auth

    if settings.effective_auth_mode == "off":
        check_auth(settings)  # both set: refused
        return UpAuth(None, "off")
    if settings.api_token:
        token, source = settings.api_token, "env"
    else:
        token, made = load_or_create_token(settings.data_dir)
        source = "made" if made else "kept"
    # Refused here, before anything starts: a proxy mode with no trusted proxy, an oidc
    # mode with no issuer (local mode always has the token).
    check_auth(settings.model_copy(update={"api_token": token}))
    key, key_made = (first_admin(settings.data_dir) if settings.effective_auth_mode == "local"
                     else (None, False))
    return UpAuth(token, source, key, key_made)  # type: ignore[arg-type]
