"""The credentials ``hitlflow login`` keeps: ``$XDG_CONFIG_HOME/hitlflow/credentials.json``
(default ``~/.config``), the directory 0700 and the file 0600, one credential (a
person's key or a token) per API address. A file that others may read, that is a
symbolic link, not this user's or not the shape below is refused with the fix in the
message; it is replaced whole (written, then renamed)::

    {"version": 1, "apis": {"http://127.0.0.1:8000": {"credential": "hfk_..."}}}
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

from api.identity.private_file import PrivateFileError, read_private

CREDENTIALS_FILE = "credentials.json"


class CredentialsError(Exception):
    pass


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hitlflow"


def credentials_path() -> Path:
    return config_dir() / CREDENTIALS_FILE


def api_key_of(url: str) -> str:
    """The address a credential is kept under: the URL without a trailing slash."""
    return url.strip().rstrip("/")


def _read(path: Path) -> dict[str, dict[str, str]]:
    try:
        raw = read_private(path, what="the credentials file", limit=1024 * 1024)
    except PrivateFileError as err:
        raise CredentialsError(f"{err} (or remove it and log in again)") from None
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
        apis = data["apis"]
        if data.get("version") != 1 or not isinstance(apis, dict) or not all(
                isinstance(v, dict) and isinstance(v.get("credential"), str)
                for v in apis.values()):
            raise ValueError("not the shape of a credentials file")
    except (ValueError, KeyError, TypeError) as err:
        raise CredentialsError(f"{path} is not a hitlflow credentials file ({err}): "
                               "remove it and log in again") from None
    return apis


def stored_credential(url: str) -> str | None:
    """The credential ``hitlflow login`` kept for the API at ``url``, if any."""
    entry = _read(credentials_path()).get(api_key_of(url))
    return entry["credential"] if entry else None


def _write(apis: dict[str, dict[str, str]]) -> None:
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise CredentialsError(f"{folder} is not a directory of yours")
    os.chmod(folder, 0o700)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".credentials.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"version": 1, "apis": apis}, f, indent=2)
            f.write("\n")
        os.replace(tmp, folder / CREDENTIALS_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store_credential(url: str, credential: str) -> Path:
    apis = _read(credentials_path())
    apis[api_key_of(url)] = {"credential": credential}
    _write(apis)
    return credentials_path()


def forget_credential(url: str) -> bool:
    """Remove the credential kept for ``url``; whether there was one."""
    apis = _read(credentials_path())
    if apis.pop(api_key_of(url), None) is None:
        return False
    _write(apis)
    return True
