"""The stack options every client command takes, the same way ``hitlflow up`` does.

``@stack_options`` adds ``--data-dir``, ``--api-port``, ``--api-url`` and ``--token``
(and, hidden, up's ``--temporal-port`` and ``--ui-port``) to a command and hands it one
:class:`Stack`. So the flags a person gave ``up`` work for ``session``, ``log`` and
``telemetry`` as they are. Where the API is: ``--api-url`` (env ``HITLFLOW_API_URL``),
else ``--api-port`` (env ``HITLFLOW_API_PORT``) on ``HITLFLOW_API_HOST``, else the
address ``up`` recorded in the data directory while it runs (``api-url``), else
``http://127.0.0.1:8000``. The credential: ``--token`` (env ``HITLFLOW_API_TOKEN``), else
the one ``hitlflow login`` kept for that address (``api.cli.credentials``), else what
``up`` keeps in the data directory (its admin's key ``cli-key``, else ``api-token``:
``api.cli.api_auth``), unless ``--api-url`` names another API than the one ``up``
recorded there.
"""

from __future__ import annotations

import functools
import inspect
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:  # the client and the settings load when a command runs, not for --help
    from api.cli.client import ApiClient
    from api.settings import HitlflowSettings

#: The file ``up`` writes into its data directory while it serves the API.
API_URL_FILE = "api-url"

DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", help="The stack's data directory, as given to `up` (env HITLFLOW_DATA_DIR; "
    "default ./.hitlflow).")]
ApiPort = Annotated[int | None, typer.Option(
    "--api-port", min=1, max=65535, help="The API port, as given to `up` (env "
    "HITLFLOW_API_PORT; default 8000).")]
ApiUrl = Annotated[str | None, typer.Option(  # the environment is read in Stack.url()
    "--api-url", help="The API's base URL (env HITLFLOW_API_URL); wins over --api-port.")]
Token = Annotated[str | None, typer.Option(
    "--token", envvar="HITLFLOW_API_TOKEN", show_envvar=False,
    help="Bearer token (env HITLFLOW_API_TOKEN).")]
TemporalPort = Annotated[int | None, typer.Option(
    "--temporal-port", min=1, max=65535, hidden=True,
    help="Accepted as `up` takes it; the client commands talk to the API.")]
UiPort = Annotated[int | None, typer.Option(
    "--ui-port", min=1, max=65535, hidden=True, help="Accepted as `up` takes it.")]
#: The process commands' (``worker``, ``api``, ``exporter``, ``log export``) Temporal.
TemporalAddress = Annotated[str | None, typer.Option(
    "--temporal-address", help="host:port of the Temporal frontend (env "
    "HITLFLOW_TEMPORAL_ADDRESS; default 127.0.0.1:<HITLFLOW_TEMPORAL_PORT>, as `up` serves it)")]

_OPTIONS: dict[str, Any] = {"data_dir": DataDir, "api_port": ApiPort, "api_url": ApiUrl,
                            "token": Token, "temporal_port": TemporalPort, "ui_port": UiPort}


@dataclass(frozen=True)
class Stack:
    """Where the stack a client command talks to is, as the person named it."""

    data_dir: Path | None = None
    api_port: int | None = None
    api_url: str | None = None
    token: str | None = None
    temporal_port: int | None = None
    ui_port: int | None = None

    def settings(self) -> HitlflowSettings:
        from pydantic import ValidationError

        from api.settings import HitlflowSettings

        given = {k: v for k, v in {"data_dir": self.data_dir, "api_port": self.api_port,
                                   "temporal_port": self.temporal_port}.items()
                 if v is not None}
        try:
            return HitlflowSettings(**given)
        except ValidationError as err:
            raise typer.BadParameter(str(err)) from None

    @property
    def resolved_data_dir(self) -> Path:
        return self.settings().data_dir

    def _recorded_url(self) -> str | None:
        """The address ``up`` recorded in the data directory while it runs; only a
        loopback one (``up`` serves on this machine): a file planted in a directory
        the person runs from cannot send them, or their token, elsewhere."""
        from urllib.parse import urlsplit

        from api.hosts import is_local

        try:
            text = (self.settings().data_dir / API_URL_FILE).read_text().strip()
        except OSError:
            return None
        if not text.startswith(("http://", "https://")):
            return None
        return text if is_local(urlsplit(text).netloc) else None

    def url(self) -> str:
        from api.cli.client import default_api_url

        given = self.api_url or os.environ.get("HITLFLOW_API_URL")
        if given:
            return given
        settings = self.settings()
        if self.api_port is None and "api_port" not in settings.model_fields_set:
            recorded = self._recorded_url()
            if recorded is not None:
                return recorded
        return default_api_url(settings)

    def api_token(self) -> str | None:
        """The bearer credential to send (:meth:`credential`)."""
        return self.credential()[0]

    def credential(self) -> tuple[str | None, str]:
        """The bearer credential to send and where it came from, in this order: the one
        given (``--token``, HITLFLOW_API_TOKEN), the one ``hitlflow login`` kept for this
        API, then what ``up`` keeps in the data directory: its admin's key (``cli-key``),
        its API token; those two never to an API named by an address ``up`` did not
        record."""
        from api.cli.api_auth import TOKEN_FILE, read_cli_key, read_token
        from api.cli.credentials import CredentialsError, credentials_path, stored_credential

        settings = self.settings()
        if self.token or settings.api_token:
            return self.token or settings.api_token, "--token / HITLFLOW_API_TOKEN"
        url = self.url()
        try:
            stored = stored_credential(url)
        except CredentialsError as err:
            fail(f"Error: {err}")
        if stored is not None:
            return stored, f"hitlflow login ({credentials_path()})"
        recorded = self._recorded_url()
        if recorded is None or url.rstrip("/") != recorded.rstrip("/"):
            return None, "none"  # not the API `up` runs (another port, host, or `up` stopped)
        key = read_cli_key(settings.data_dir)
        if key is not None:
            return key, f"up's admin key ({settings.data_dir / 'cli-key'})"
        token = read_token(settings.data_dir)
        return token, (f"up's API token ({settings.data_dir / TOKEN_FILE})" if token
                       else "none")

    def client(self) -> ApiClient:
        from api.cli.client import ApiClient

        return ApiClient(self.url(), self.api_token())

    def flags(self) -> list[str]:
        """The options the person gave on the command line (never the token), for the
        commands we print; what came from the environment is there again for them."""
        out: list[str] = []
        if self.api_url:
            out += ["--api-url", self.api_url]
        if self.api_port is not None:
            out += ["--api-port", str(self.api_port)]
        if self.data_dir is not None:
            out += ["--data-dir", str(self.data_dir)]
        return out


def stack_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give the command the stack options; it receives them as ``stack: Stack``."""
    sig = inspect.signature(fn, eval_str=True)  # typer reads the annotations from it
    own = [p for p in sig.parameters.values() if p.name != "stack"]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                               annotation=annotation)
             for name, annotation in _OPTIONS.items()]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        stack = Stack(**{name: kwargs.pop(name, None) for name in _OPTIONS})
        return fn(*args, stack=stack, **kwargs)

    command.__signature__ = sig.replace(parameters=[*own, *extra])  # type: ignore[attr-defined]
    command.__annotations__ = {**{p.name: p.annotation for p in own
                                  if p.annotation is not inspect.Parameter.empty},
                               **_OPTIONS}
    return command


def prog() -> str:
    """How to call hitlflow again in a command we print: ``hitlflow``, or the path the
    person used (``.venv/bin/hitlflow``) when that is how they ran it."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name == "hitlflow" and "/" in argv0:
        import shutil

        on_path = shutil.which("hitlflow")
        if on_path is None or Path(on_path).resolve() != Path(argv0).resolve():
            return argv0
    return "hitlflow"


def command_line(*words: str, stack: Stack | None = None) -> str:
    """A hitlflow command as a person pastes it: quoted, with their stack options."""
    return " ".join([prog(), *(shlex.quote(w) for w in [*words, *(
        stack.flags() if stack else [])])])


class UsageError(Exception):
    """Invalid input: reported with exit code 2 before anything starts."""


def settings_of(**options: Any) -> HitlflowSettings:
    """HitlflowSettings from HITLFLOW_* with the given (non-None) options on top; a
    value it refuses is a :class:`UsageError` naming the option or the variable."""
    from pydantic import ValidationError

    from api.settings import HitlflowSettings

    given = {k: v for k, v in options.items() if v is not None}
    try:
        return HitlflowSettings(**given)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            source = (f"--{field.replace('_', '-')}" if field in given
                      else f"HITLFLOW_{field.upper()}")
            problems.append(f"{source}: {err['msg']} (got {err.get('input')!r})")
        raise UsageError("; ".join(problems)) from None


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code``."""
    typer.echo(message, err=True)
    raise typer.Exit(code)
