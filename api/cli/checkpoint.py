"""``hitlflow log checkpoint|key|keygen`` and ``log verify --key/--since``: the signed
checkpoints of the logs (``observation.exporter.checkpoint``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from api.cli.options import Stack, fail, stack_options
from api.cli.runs import run_dir

if TYPE_CHECKING:
    from observation.exporter.verify import Verified

Check = Callable[[Path, "Verified"], str]


def checkpoint_check(key: str | None, since: Path | None) -> Check | None:
    """What ``log verify`` checks after the chain (None: no --key); broken --key or
    --since input is a usage error before anything is read."""
    from observation.exporter.checkpoint import verify_checkpoint
    from observation.exporter.keys import read_verifier
    from observation.exporter.note import NoteKeyError

    if key is None:
        if since is not None:
            raise typer.BadParameter("needs --key (the key that signed it)", param_hint="--since")
        return None
    try:
        verifier = read_verifier(key)
    except NoteKeyError as err:
        raise typer.BadParameter(str(err), param_hint="--key") from None
    old = None
    if since is not None:
        try:
            old = since.read_bytes()
        except OSError as err:
            raise typer.BadParameter(f"{since}: {err.strerror or err}",
                                     param_hint="--since") from None

    def check(d: Path, verified: Verified) -> str:
        cp = verify_checkpoint(d, verified, verifier, old)
        grown = ", and it only grew since the --since checkpoint" if old is not None else ""
        return (f"OK: the checkpoint signed by {verifier.name} ({verifier.key_id.hex()}) "
                f"covers all {cp.size} lines{grown}")

    return check


@stack_options
def checkpoint_command(
    target: str = typer.Argument(..., help="A session id or a run directory."),
    *, stack: Stack,
) -> None:
    """Print the session's signed checkpoint (to publish or keep elsewhere)."""
    from observation.exporter.checkpoint import CHECKPOINT_NAME

    path = run_dir(target, stack.data_dir) / CHECKPOINT_NAME
    try:
        data = path.read_bytes()
    except OSError as err:
        fail(f"no checkpoint: {path}: {err.strerror or err} (the exporter signs each log "
              "as it writes it; a log finished before checkpoints: `hitlflow log export`)")
    typer.echo(data.decode(errors="replace"), nl=False)


@stack_options
def key_command(*, stack: Stack) -> None:
    """Print the verifier key of the checkpoints (for `log verify --key`)."""
    from api.runtime.signing_keys import verifier_key
    from observation.exporter.note import NoteKeyError

    try:
        typer.echo(verifier_key(stack.settings()).text())
    except NoteKeyError as err:
        fail(f"error: {err}")


def keygen_command(
    name: str = typer.Argument(..., help="The key's name, e.g. audit.example.com/hitlflow "
                               "(no spaces, no +); checkpoints name their log NAME/<session>."),
    out: Path = typer.Option(..., "--out", help="The signer key file to write (mode 0600); "
                             "point HITLFLOW_CHECKPOINT_KEY at it."),
) -> None:
    """Make a new checkpoint signing key (an operator's, e.g. for a cluster) and print
    its verifier key."""
    from observation.exporter.keys import write_signer
    from observation.exporter.note import NoteKeyError, Signer

    try:
        signer = Signer.generate(name)
        if not write_signer(out, signer):
            fail(f"error: {out} exists; not overwritten")
    except NoteKeyError as err:
        raise typer.BadParameter(str(err), param_hint="NAME") from None
    except OSError as err:
        fail(f"error: {out}: {err.strerror or err}")
    typer.echo(signer.verifier().text())


def register(log_app: typer.Typer) -> None:
    log_app.command("checkpoint")(checkpoint_command)
    log_app.command("key")(key_command)
    log_app.command("keygen")(keygen_command)
