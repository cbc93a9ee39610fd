"""What a command the worker starts may see, and what of its output may be shown
(docs/security.md, "Who may run code").

The rule, in one place, for a plan step's commands (``activities.commands``) and a
tool server's process (``activities.mcp.connection``):

* **Environment**: never the worker's. A command gets the variables of ``BASE_VARS``
  (and every ``LC_*``) that the worker has, then the variables the config names in
  ``pass_env`` (taken from the worker; unset ones are left out), then a tool
  server's literal ``env`` over all of them.
* **Output**: every secret the worker knows is replaced by ``[redacted]`` in what a
  command prints, before the activity returns it (so before history and the log):
  the values of the worker's variables whose names look secret (``SECRET_NAME``:
  ``*_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, ...), the password of a URL
  in such a variable or in ``HITLFLOW_READ_MODEL_URL``, the keys the LLM activity
  read, and what the worker registered at its start (``remember_secret``,
  ``remember_secret_file``: the API token, the checkpoint key). Values shorter than
  ``MIN_SECRET_LEN`` are left alone (they would mangle ordinary output).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: What every command gets from the worker's environment (when the worker has it).
BASE_VARS = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ",
             "TMPDIR")
BASE_PREFIXES = ("LC_",)

#: Names whose values are secrets (case-insensitive).
SECRET_NAME = re.compile(
    r"(^|_)(KEY|TOKEN|SECRET|SECRETS|CREDENTIALS?)$|_PWD$|PASSWORD|PASSWD|PASSPHRASE|APIKEY"
    r"|^HITLFLOW_(API_TOKEN|CHECKPOINT_KEY|READ_MODEL_URL)$",
    re.IGNORECASE)
#: Variables that hold a URL whose password is a secret (any variable's URL counts).
URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*@")
REDACTED = "[redacted]"
MIN_SECRET_LEN = 8
#: A signer key's text (the checkpoint key): its seed alone is a secret too.
PRIVATE_KEY_PREFIX = "PRIVATE+KEY+"
SECRET_FILE_LIMIT = 64 * 1024

_remembered: set[str] = set()
_files: set[Path] = set()


def command_env(pass_env: Iterable[str] = (), overrides: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a command: ``BASE_VARS`` and ``LC_*`` from ``environ`` (the
    worker's), the variables named in ``pass_env``, then ``overrides`` (literal)."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items()
           if k in BASE_VARS or k.startswith(BASE_PREFIXES)}
    env.update({k: environ[k] for k in pass_env if k in environ})
    env.update(overrides or {})
    return env


def remember_secret(value: str | None) -> None:
    """A secret the worker holds outside its environment (an option, a key it read)."""
    if value:
        _remembered.add(value)


def remember_secret_file(path: Path) -> None:
    """A file holding a secret (the checkpoint key): read at each redaction, so a file
    created after the worker started counts too."""
    _files.add(path)


def _url_password(url: str) -> str | None:
    try:
        return urlsplit(url.strip()).password
    except ValueError:
        return None


def _forms(value: str) -> set[str]:
    """A secret and the parts of it that are secrets on their own."""
    value = value.strip()
    forms = {value}
    if URL_RE.match(value) and (password := _url_password(value)):
        forms |= {password, unquote(password)}
    if value.startswith(PRIVATE_KEY_PREFIX):
        forms.add(value.rsplit("+", 1)[-1])
    return forms


def _file_secrets(path: Path) -> list[str]:
    try:
        with path.open("rb") as f:
            text = f.read(SECRET_FILE_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret the worker knows now, longest first (a secret that contains
    another is replaced whole)."""
    environ = os.environ if environ is None else environ
    found: set[str] = set(_remembered)
    for name, value in environ.items():
        if name == "HITLFLOW_CHECKPOINT_KEY" and not value.strip().startswith(
                PRIVATE_KEY_PREFIX):
            continue  # a file's name: its content is the secret (below)
        if SECRET_NAME.search(name):
            found.add(value)
        elif URL_RE.match(value.strip()):  # only the password of a URL is secret
            password = _url_password(value)
            found |= {password, unquote(password)} if password else set()
    given = environ.get("HITLFLOW_CHECKPOINT_KEY", "").strip()
    files = _files | ({Path(given)} if given and not given.startswith(PRIVATE_KEY_PREFIX)
                      else set())
    for path in files:
        found.update(_file_secrets(path))
    secrets = {form for value in found for form in _forms(value)}
    return sorted((s for s in secrets if len(s) >= MIN_SECRET_LEN), key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every secret (default: ``secret_values()``) replaced by ``[redacted]``."""
    ordered = secret_values() if secrets is None else sorted(secrets, key=len, reverse=True)
    for secret in ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
