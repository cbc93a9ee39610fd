"""``hitlflow log``: verify, replay and export the audit log of a session.

``verify`` and ``replay`` read files only (no Temporal); ``export`` maps a
session's history into ``<data_dir>/runs/<session_id>/`` (the same bytes as the
exporter of ``hitlflow up``). A session can be named by its id (looked up under
the data directory) or by its run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.options import Stack, TemporalAddress, fail, stack_options
from api.cli.runs import run_dir

if TYPE_CHECKING:  # what a command reads or writes loads when it runs
    from api.settings import HitlflowSettings
    from observation.exporter.note import Signer

#: ``log verify --jobs`` at most (observation.exporter.verify.MAX_JOBS).
JOBS_MAX = 64
#: The session a log command reads: its id (found under the data directory) or its run dir.
RunTarget = Annotated[str, typer.Argument(help="A session id or a run directory.")]

log_app = typer.Typer(help="The audit log of sessions: verify, replay, export, checkpoints.",
                      no_args_is_help=True)


def _settings(data_dir: Path | None, **more: object) -> HitlflowSettings:
    from api.settings import HitlflowSettings

    given = {k: v for k, v in {"data_dir": data_dir, **more}.items() if v is not None}
    return HitlflowSettings(**given)


@log_app.command("verify")
@stack_options
def verify_command(
    target: RunTarget,
    live: bool = typer.Option(False, "--live", help="The log may still be written: check "
                              "it up to its head (read first), not beyond."),
    key: str | None = typer.Option(None, "--key", help="Also check the signed checkpoint "
                                   "with this verifier key (or a file holding it)."),
    since: Path | None = typer.Option(None, "--since", help="With --key: an older "
                                      "checkpoint file; check the log only grew from it."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, max=JOBS_MAX, help=(
        "Processes to verify a big log (32 MiB or more) with, each a range of its lines "
        "(default: the cores, at most 8; 1: one process). The answer is the same.")),
    *, stack: Stack,
) -> None:
    """Check every hash, prev_hash, seq, every field, the head and the artifacts (a
    fork's log: its link to its parent's, next to it, too); EVENT_CHAIN_BROKEN with the
    line number (exit 1) on the first failure. With --key,
    the signed checkpoint too (CHECKPOINT_MISSING/INVALID/MISMATCH)."""
    # Only the verifier loads (observation.exporter.verify: no Temporal, no server side,
    # no settings for a run directory given as a path), so verify starts at once.
    from observation.exporter.verify import ChainBrokenError, default_jobs, verify_dir

    if live and key is not None:
        raise typer.BadParameter("a checkpoint is checked on a log at rest, not with --live",
                                 param_hint="--key")
    signed = None
    if key is not None or since is not None:
        from api.cli.checkpoint import checkpoint_check

        signed = checkpoint_check(key, since)
    d = Path(target) if Path(target).is_dir() else run_dir(target, stack.data_dir)
    try:
        v = verify_dir(d, live=live, jobs=default_jobs() if jobs is None else jobs)
        note = signed(d, v) if signed else None
    except ChainBrokenError as err:
        fail(f"{err} ({d})")
    version = f"log format v{v.log_version}, " if v.log_version else ""
    upto = " up to the head" if live else ""
    typer.echo(f"OK: {v.events} events{upto}, {version}chain head {v.last_hash} ({d})")
    if v.forked_from is not None:
        parent, seq = v.forked_from
        typer.echo(f"forked from {parent} at line {seq}: the parent's log verifies up to "
                   "it and has the recorded line hash")
    if note:
        typer.echo(note)


@log_app.command("replay")
@stack_options
def replay_command(
    target: RunTarget,
    write: bool = typer.Option(False, "--write", help="Rewrite snapshot.json and head "
                               "from the log (seed 003's forced replay); takes the lock."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the snapshot."),
    *, stack: Stack,
) -> None:
    """Rebuild the snapshot from the log alone and check it equals snapshot.json byte
    for byte: print it, or a diff (exit 1)."""
    import difflib

    from observation.exporter import (
        ChainBrokenError,
        LogError,
        LogSnapshot,
        LogWriter,
        ReplayError,
    )
    from observation.exporter.verify import LOG_NAME, SNAPSHOT_NAME, read_lines, verify_lines

    d = run_dir(target, stack.data_dir)
    if write:
        try:
            LogWriter(d).open().close()
        except LogError as err:
            fail(str(err))
    try:
        rebuilt = LogSnapshot.replay(d.name, verify_lines(read_lines(d / LOG_NAME))).to_bytes()
    except (ChainBrokenError, ReplayError, OSError) as err:
        fail(f"{err} ({d})")
    stored_path = d / SNAPSHOT_NAME
    stored = stored_path.read_bytes() if stored_path.is_file() else None
    if stored == rebuilt:
        if not quiet:
            typer.echo(rebuilt.decode(), nl=False)
        typer.echo(f"OK: the replayed snapshot equals {stored_path}", err=True)
        return
    if stored is None:
        typer.echo(rebuilt.decode(), nl=False)
        fail(f"SNAPSHOT_MISMATCH: {stored_path} is missing")
    diff = difflib.unified_diff(stored.decode(errors="replace").splitlines(True),
                                rebuilt.decode().splitlines(True),
                                str(stored_path), "replayed from events.ndjson")
    typer.echo("".join(diff), nl=False)
    fail(f"SNAPSHOT_MISMATCH: {stored_path} differs from the replay of the log")


async def _export(settings: HitlflowSettings, session_id: str | None,
                  signer: Signer | None = None) -> int:
    from api.runtime.process import connect
    from observation.exporter import LogLockedError, export_session
    from observation.exporter.follower import SESSION_QUERY

    client = await connect(settings)
    runs = settings.data_dir / "runs"
    ids = [session_id] if session_id else sorted(
        {wf.id async for wf in client.list_workflows(SESSION_QUERY)})
    failed = 0
    for sid in ids:
        try:
            r = await export_session(client, sid, runs, signer=signer)
        except LogLockedError as err:  # `hitlflow up`'s exporter writes this one live
            failed += session_id is not None
            typer.echo(f"{sid}: {'not exported' if session_id else 'skipped'}: {err}",
                       err=True)
            continue
        except Exception as err:
            failed += 1
            typer.echo(f"{sid}: {type(err).__name__}: {err}", err=True)
            continue
        state = "complete" if r.finished else "open (exported so far)"
        typer.echo(f"{sid}: {r.last_seq} events ({r.written} new), {state} -> {runs / sid}")
    return 1 if failed else 0


@log_app.command("export")
@stack_options
def export_command(
    session_id: str | None = typer.Argument(None, help="The session to export."),
    all_sessions: bool = typer.Option(False, "--all", help="Every session."),
    temporal_address: TemporalAddress = None,
    *, stack: Stack,
) -> None:
    """Write the log of one session (or of all) from history: the same bytes again.
    With --all, a log another exporter holds (a running `hitlflow up`) is skipped,
    one line each on stderr; the exit code is 0 if every other one was exported."""
    import asyncio

    from api.runtime.signing_keys import exporter_signer
    from observation.exporter.note import NoteKeyError
    from workflows.config import valid_session_id

    if (session_id is None) == (not all_sessions):
        raise typer.BadParameter("give a session id or --all (not both)")
    if session_id is not None and not valid_session_id(session_id):
        raise typer.BadParameter(f"{session_id!r} is not a session id")
    settings = _settings(stack.data_dir, temporal_address=temporal_address,
                         temporal_port=stack.temporal_port)
    try:
        signer = exporter_signer(settings)
    except (NoteKeyError, OSError) as err:
        fail(f"error: {err}")
    try:
        code = asyncio.run(_export(settings, session_id, signer))
    except RuntimeError as err:  # Temporal unreachable
        fail(f"error: {err} (Temporal at {settings.target})")
    raise typer.Exit(code)


@log_app.command("rebuild-read-model")
@stack_options
def rebuild_read_model_command(
    read_model_url: str | None = typer.Option(
        None, "--read-model-url", help="postgresql://... (env HITLFLOW_READ_MODEL_URL; "
        "default: <data-dir>/read_model.sqlite)"),
    *, stack: Stack,
) -> None:
    """Drop the read model and rebuild it from every runs/*/events.ndjson alone (each
    log verified first; a broken one is reported and skipped, exit 1). Stop the
    exporter first, or restart it after."""
    from observation.read_model import ReadModelError, open_store
    from observation.read_model.sync import rebuild

    settings = _settings(stack.data_dir, read_model_url=read_model_url)
    try:
        store = open_store(settings.data_dir, settings.read_model_url)
        try:
            result = rebuild(store, settings.data_dir / "runs")
        finally:
            store.close()
    except ReadModelError as err:
        fail(f"error: {err}")
    for sid, why in sorted(result.errors.items()):
        typer.echo(f"{sid}: skipped: {why}", err=True)
    typer.echo(f"read model rebuilt in {store.where}: {len(result.synced)} sessions"
               + (f", {len(result.errors)} logs skipped" if result.errors else ""))
    raise typer.Exit(1 if result.errors else 0)


def register(app: typer.Typer) -> None:
    from api.cli import checkpoint as cli_checkpoint

    cli_checkpoint.register(log_app)
    app.add_typer(log_app, name="log")
