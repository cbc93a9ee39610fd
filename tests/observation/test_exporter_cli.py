"""``hitlflow log verify|replay|export``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from observation.exporter import export_history
from observation.exporter.decode import load_history
from observation.exporter.keys import write_signer
from observation.exporter.note import Signer
from tests.support.cli import log_app
from tests.support.sessions import running_worker, start_session
from workflows.config import SessionConfig

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())
runner = CliRunner()
# The real command line, in its own process (exit codes as a shell sees them).
CLI = ("import typer; from api.cli import log as cli_log; app = typer.Typer(); "
       "app.callback()(lambda: None); cli_log.register(app); app()")
#: A command line that has not exited by then hangs (e.g. at its exit, waiting on a
#: call of the Temporal client's core): the test fails instead of the suite hanging.
CLI_LIMIT_S = 120


async def communicate(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    try:
        return await asyncio.wait_for(proc.communicate(), CLI_LIMIT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the command did not exit within {CLI_LIMIT_S} s") from None


@pytest.fixture
def app() -> typer.Typer:
    return log_app()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    export_history(SID, EVENTS, tmp_path / "runs")
    return tmp_path


def test_verify_by_session_id_and_by_directory(app, data_dir):
    r = runner.invoke(app, ["log", "verify", SID, "--data-dir", str(data_dir)])
    assert r.exit_code == 0 and "OK: 89 events" in r.output
    r = runner.invoke(app, ["log", "verify", str(data_dir / "runs" / SID)])
    assert r.exit_code == 0


def test_verify_prints_event_chain_broken_with_the_line(app, data_dir):
    log = data_dir / "runs" / SID / "events.ndjson"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:6] + lines[7:]))
    r = runner.invoke(app, ["log", "verify", SID, "--data-dir", str(data_dir)])
    assert r.exit_code == 1 and "EVENT_CHAIN_BROKEN: line 7" in r.output


def test_unknown_targets_are_usage_errors(app, data_dir):
    r = runner.invoke(app, ["log", "verify", "s-nope", "--data-dir", str(data_dir)])
    assert r.exit_code == 2 and "no log for session s-nope" in r.output
    r = runner.invoke(app, ["log", "verify", "../x/y"])
    assert r.exit_code == 2


def test_replay_prints_the_snapshot_when_it_matches(app, data_dir):
    d = data_dir / "runs" / SID
    r = runner.invoke(app, ["log", "replay", str(d)])
    assert r.exit_code == 0
    assert r.stdout.encode() == (d / "snapshot.json").read_bytes()


def test_replay_shows_a_diff_when_snapshot_json_differs(app, data_dir):
    d = data_dir / "runs" / SID
    snap = json.loads((d / "snapshot.json").read_text())
    snap["run_state"] = "running"
    (d / "snapshot.json").write_text(json.dumps(snap, indent=2, sort_keys=True) + "\n")
    r = runner.invoke(app, ["log", "replay", str(d)])
    assert r.exit_code == 1 and "SNAPSHOT_MISMATCH" in r.output
    assert '-  "run_state": "running"' in r.output and '+  "run_state": "succeeded"' in r.output
    r = runner.invoke(app, ["log", "replay", str(d), "--write", "-q"])  # forced replay
    assert r.exit_code == 0
    assert runner.invoke(app, ["log", "verify", str(d)]).exit_code == 0


def test_replay_refuses_a_broken_log(app, data_dir):
    d = data_dir / "runs" / SID
    (d / "events.ndjson").write_bytes(b"{}\n")
    r = runner.invoke(app, ["log", "replay", str(d)])
    assert r.exit_code == 1 and "EVENT_CHAIN_BROKEN: line 1" in r.output


def test_export_needs_one_target(app):
    assert runner.invoke(app, ["log", "export"]).exit_code == 2
    assert runner.invoke(app, ["log", "export", SID, "--all"]).exit_code == 2


async def test_export_writes_the_same_bytes_again(app, dev_env, tmp_path):
    """``log export`` against the dev server, twice: byte-identical logs that verify."""
    tq = f"tq-cli-{uuid.uuid4().hex[:8]}"
    cfg = SessionConfig.model_validate({"initial_message": "hi", "mode": "auto", "agent": {
        "llm": {"provider": "scripted", "responses": [{"text": "hello", "end": True}]}}})
    async with running_worker(dev_env.client, tq):
        h = await start_session(dev_env.client, cfg, tq)
        await h.result()
    address = dev_env.client.service_client.config.target_host
    key = tmp_path / "operator.key"  # one operator key: the checkpoints are equal too
    write_signer(key, signer := Signer.generate("test.example"))
    outputs = []
    for name in ("a", "b"):
        args = ["log", "export", h.id, "--data-dir", str(tmp_path / name),
                "--temporal-address", address]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLI, *args, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "HITLFLOW_CHECKPOINT_KEY": str(key)})
        out, _ = await communicate(proc)
        assert proc.returncode == 0, out.decode()
        assert b"complete" in out
        d = tmp_path / name / "runs" / h.id
        outputs.append({p.name: p.read_bytes() for p in d.iterdir() if p.is_file()})
        r = runner.invoke(app, ["log", "verify", h.id, "--data-dir", str(tmp_path / name),
                                "--key", signer.verifier().text()])
        assert r.exit_code == 0, r.output
    assert "checkpoint" in outputs[0] and outputs[0] == outputs[1]


async def test_export_all_skips_a_log_that_a_live_exporter_holds(app, tmp_path, free_port):
    """`log export --all` while `hitlflow up` runs: the log its exporter holds is
    skipped (one line on stderr), the others are exported, exit 0. Its own server, so
    --all lists only these sessions."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from api.runtime.devserver import DevServer
    from observation.exporter import LogWriter, verify_dir

    cfg = SessionConfig.model_validate({"initial_message": "hi", "mode": "auto", "agent": {
        "llm": {"provider": "scripted", "responses": [{"text": "hello", "end": True}]}}})
    async with DevServer(tmp_path / "temporal", port=free_port(), ui_port=None,
                         in_memory=True) as server:
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        tq = f"tq-cli-{uuid.uuid4().hex[:8]}"
        async with running_worker(client, tq):
            held, free = [await start_session(client, cfg, tq) for _ in range(2)]
            await held.result()
            await free.result()
        data = tmp_path / "data"
        live = LogWriter(data / "runs" / held.id).open()  # the flock `up`'s exporter takes
        try:
            results = []
            for target in (["--all"], [held.id]):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", CLI, "log", "export", *target, "--data-dir",
                    str(data), "--temporal-address", server.address,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                out, err = await communicate(proc)
                results.append((proc.returncode, out.decode(), err.decode()))
        finally:
            live.close()
    (code, out, err), (code_one, _, err_one) = results
    assert code == 0, (out, err)
    assert err.splitlines() == [f"{held.id}: skipped: {data / 'runs' / held.id} is being "
                                f"written by another exporter (it holds the lock on "
                                f"{data / 'runs' / held.id / '.lock'})"]
    assert f"{free.id}: " in out and "complete" in out and held.id not in out
    assert verify_dir(data / "runs" / free.id).events > 0
    assert (data / "runs" / held.id / "events.ndjson").read_bytes() == b""  # untouched
    # Asked for that one session by name, it is an error (exit 1) that says why.
    assert code_one == 1 and f"{held.id}: not exported: " in err_one
