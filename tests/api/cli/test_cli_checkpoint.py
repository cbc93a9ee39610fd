"""``hitlflow log verify --key/--since``, ``log checkpoint|key|keygen`` and where the
exporter's key comes from (``api.runtime.signing_keys``)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from api.runtime.signing_keys import exporter_signer, verifier_key
from api.settings import HitlflowSettings
from observation.exporter import export_history
from observation.exporter.checkpoint import CHECKPOINT_NAME
from observation.exporter.decode import load_history
from observation.exporter.keys import KEY_NAME, VERIFIER_NAME, load_or_create_signer
from observation.exporter.note import NoteKeyError, Signer
from tests.support.cli import log_app
from tests.support.logs import forged, rewrite

HISTORIES = Path(__file__).parents[2] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())
runner = CliRunner()


@pytest.fixture
def app() -> typer.Typer:
    return log_app()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory as the exporter leaves it: its key, one signed log."""
    export_history(SID, EVENTS, tmp_path / "runs", signer=load_or_create_signer(tmp_path))
    return tmp_path


def run(app: typer.Typer, *args: str, env: dict[str, str] | None = None):
    r = runner.invoke(app, ["log", *args], env={"HITLFLOW_CHECKPOINT_KEY": "", **(env or {})})
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception  # no traceback
    return r


def test_verify_with_the_key_catches_a_full_rewrite(app, data_dir, tmp_path):
    key = run(app, "key", "--data-dir", str(data_dir)).output.strip()
    d = data_dir / "runs" / SID
    r = run(app, "verify", SID, "--data-dir", str(data_dir), "--key", key)
    assert r.exit_code == 0 and "checkpoint signed by hitlflow.local" in r.output
    assert "covers all 89 lines" in r.output
    rewrite(d, forged(d))
    r = run(app, "verify", SID, "--data-dir", str(data_dir))
    assert r.exit_code == 0, r.output  # without the key the rewrite passes
    (tmp_path / "key.pub").write_text(key + "\n")
    r = run(app, "verify", str(d), "--key", str(tmp_path / "key.pub"))
    assert r.exit_code == 1 and "CHECKPOINT_MISMATCH: line 89" in r.output


def test_verify_since_an_older_checkpoint(app, tmp_path):
    signer = load_or_create_signer(tmp_path)
    export_history(SID, EVENTS[:40], tmp_path / "runs", signer=signer)
    old = tmp_path / "old.checkpoint"
    r = run(app, "checkpoint", SID, "--data-dir", str(tmp_path))
    assert r.exit_code == 0 and r.output.startswith(f"hitlflow.local/{SID}\n")
    old.write_text(r.output)
    export_history(SID, EVENTS, tmp_path / "runs", signer=signer)
    key = signer.verifier().text()
    args = ("verify", SID, "--data-dir", str(tmp_path), "--key", key, "--since", str(old))
    r = run(app, *args)
    assert r.exit_code == 0 and "only grew since the --since checkpoint" in r.output
    d = tmp_path / "runs" / SID
    rewrite(d, forged(d), signer)  # rewritten and re-signed by the key holder
    assert run(app, *args[:-2]).exit_code == 0
    r = run(app, *args)
    assert r.exit_code == 1 and "did not only grow" in r.output


@pytest.mark.parametrize("extra, code, message", [
    (["--key", "garbage"], 2, "not a verifier key"),
    (["--key", "PRIVATE+KEY+x+00000000+AA=="], 2, "signer (private) key"),
    (["--since", "x"], 2, "needs --key"),
    (["--key", "@KEY", "--since", "/nonexistent/old"], 2, "No such file"),
    (["--key", "@KEY", "--since", "@GARBAGE"], 1, "CHECKPOINT_INVALID: the --since checkpoint"),
    (["--key", Signer.generate("hitlflow.local").verifier().text()], 1,
     "CHECKPOINT_INVALID: the checkpoint is not signed by the key hitlflow.local"),
])
def test_broken_key_and_checkpoint_input_is_a_clear_error(app, data_dir, extra, code,
                                                          message):
    garbage = data_dir / "garbage"
    garbage.write_bytes(b"not\na checkpoint\n")
    key = load_or_create_signer(data_dir).verifier().text()
    extra = [key if a == "@KEY" else str(garbage) if a == "@GARBAGE" else a for a in extra]
    before = (data_dir / "runs" / SID / CHECKPOINT_NAME).read_bytes()
    r = run(app, "verify", SID, "--data-dir", str(data_dir), *extra)
    assert r.exit_code == code and message in " ".join(r.output.split()), r.output
    assert (data_dir / "runs" / SID / CHECKPOINT_NAME).read_bytes() == before


def test_checkpoint_and_key_commands_without_either(app, tmp_path):
    export_history(SID, EVENTS, tmp_path / "runs")  # no signer: no checkpoint
    r = run(app, "checkpoint", SID, "--data-dir", str(tmp_path))
    assert r.exit_code == 1 and "no checkpoint" in r.output
    r = run(app, "key", "--data-dir", str(tmp_path))
    assert r.exit_code == 1 and "no checkpoint key" in r.output
    (tmp_path / VERIFIER_NAME).write_text("damaged\n")
    r = run(app, "key", "--data-dir", str(tmp_path))
    assert r.exit_code == 1 and "not a verifier key" in r.output


def test_keygen_writes_an_operator_key_the_exporter_uses(app, tmp_path):
    out = tmp_path / "secret" / "audit.key"
    out.parent.mkdir()
    r = run(app, "keygen", "audit.example.com/hitlflow", "--out", str(out))
    assert r.exit_code == 0 and r.output.startswith("audit.example.com/hitlflow+")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    verifier = r.output.strip()
    assert run(app, "keygen", "other", "--out", str(out)).exit_code == 1  # never overwritten
    assert run(app, "keygen", "bad name", "--out", str(tmp_path / "k")).exit_code == 2
    # HITLFLOW_CHECKPOINT_KEY: a file, or the key itself; the data directory gets none.
    data = tmp_path / "data"
    for given in (str(out), out.read_text()):
        settings = HitlflowSettings(data_dir=data, checkpoint_key=given)
        assert exporter_signer(settings).verifier().text() == verifier
        assert verifier_key(settings).text() == verifier
    assert not (data / KEY_NAME).exists()
    r = run(app, "key", "--data-dir", str(data), env={"HITLFLOW_CHECKPOINT_KEY": str(out)})
    assert r.output.strip() == verifier


def test_the_exporters_key_created_at_first_start_or_refused_when_broken(tmp_path):
    settings = HitlflowSettings(data_dir=tmp_path / "data")
    assert exporter_signer(settings, create=False) is None
    signer = exporter_signer(settings)
    assert stat.S_IMODE((tmp_path / "data" / KEY_NAME).stat().st_mode) == 0o600
    assert exporter_signer(settings).text() == signer.text()  # the same key at every start
    for broken in (str(tmp_path / "missing.key"), "PRIVATE+KEY+x+00000000+AA=="):
        with pytest.raises(NoteKeyError):
            exporter_signer(settings.model_copy(update={"checkpoint_key": broken}))
    (tmp_path / "data" / KEY_NAME).write_text(json.dumps({"not": "a key"}))
    with pytest.raises(NoteKeyError, match="not a signer key"):
        exporter_signer(settings)
