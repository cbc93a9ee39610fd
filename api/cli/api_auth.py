"""The API's token on one machine: ``up`` makes one when none is configured and keeps it
in the data directory (``api-token``, readable by its owner only, kept across
restarts); the client commands and the demo read it from there, as they read the
API's address (``api.cli.options``). And the warning of an API that runs without
authentication (docs/security.md, "The HTTP API")."""

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


class TokenFileError(Exception):
    pass


def read_token(data_dir: Path) -> str | None:
    """The token kept in ``data_dir``, or None when there is none (or it cannot be read)."""
    try:
        token = (data_dir / TOKEN_FILE).read_text().strip()
    except OSError:
        return None
    return token or None


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


def sign_in_link(api_url: str, token: str) -> str:
    """The inbox with the token in the URL's fragment: a browser never sends a fragment
    to the server, and the inbox removes it from the address bar once read."""
    return f"{api_url}/#token={token}"


def warn_auth_off(api_url: str) -> None:
    """Say loudly, on stderr, that the API at ``api_url`` takes requests from anyone."""
    rule = "!" * 78
    typer.echo("\n".join([
        rule,
        "WARNING: the HTTP API runs WITHOUT AUTHENTICATION (HITLFLOW_API_AUTH=off).",
        f"Anyone who can reach {api_url} (any user or program on this machine,",
        "or more, depending on HITLFLOW_API_HOST) can start sessions, which run commands",
        "as this user, and answer what sessions wait for. Unset HITLFLOW_API_AUTH to",
        "require a token (docs/security.md).",
        rule]), err=True)


@dataclass(frozen=True)
class UpAuth:
    """How ``up``'s API authenticates: ``token`` (None: ``HITLFLOW_API_AUTH=off``) and
    where it came from: ``env`` (HITLFLOW_API_TOKEN), ``made`` now or ``kept`` in the
    data directory, or ``off``."""

    token: str | None
    source: Literal["env", "made", "kept", "off"]


def up_auth(settings: HitlflowSettings) -> UpAuth:
    """The token ``up``'s API requires: HITLFLOW_API_TOKEN, else the one kept in the data
    directory (made at the first start); none with ``HITLFLOW_API_AUTH=off``. Raises
    :class:`TokenFileError` or ``api.http.doors.AuthConfigError``."""
    from api.http.doors import required_token

    if settings.api_auth == "off":
        required_token(settings)  # both set: refused
        return UpAuth(None, "off")
    if settings.api_token:
        return UpAuth(settings.api_token, "env")
    token, made = load_or_create_token(settings.data_dir)
    return UpAuth(token, "made" if made else "kept")
