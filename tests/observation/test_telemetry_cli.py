"""``hitlflow telemetry runs|rebuild``: the CLI view of the store, read-only, with clear
errors for a missing or corrupt store (which it leaves as it is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from api.cli import telemetry as cli_telemetry
from observation.exporter import export_history
from observation.exporter.decode import load_history
from observation.telemetry import STORE_NAME, TelemetryStore
from observation.telemetry.hook import SessionTelemetry
from tests.support.cli import group_app

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
runner = CliRunner()


def cli() -> typer.Typer:
    return group_app(cli_telemetry.register)


def run(*args: str):
    return runner.invoke(cli(), ["telemetry", *args], env={"COLUMNS": "220"})


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    with TelemetryStore.open(d / STORE_NAME) as store:
        for name in ("demo", "rejected"):
            sid, events = load_history((HISTORIES / f"{name}.json").read_text())
            export_history(sid, events, d / "runs", SessionTelemetry(sid, store, None))
    return d


def test_runs_as_json_with_filters(data_dir):
    r = run("runs", "--data-dir", str(data_dir), "--json")
    assert r.exit_code == 0, r.output
    every = json.loads(r.output)
    sessions = [x["session_id"] for x in every if x["job_type"] == "session"]
    assert len(sessions) == 2 and all(x["context_json"]["span_id"] for x in every)
    sid = sessions[0]
    r = run("runs", "--data-dir", str(data_dir), "--json", "--session", sid,
            "--job-type", "llm_call", "--status", "succeeded")
    llm = json.loads(r.output)
    assert llm and {(x["session_id"], x["job_type"], x["status"]) for x in llm} == {
        (sid, "llm_call", "succeeded")}
    assert all(set(x["context_json"]) == {"trace_id", "span_id", "parent_span_id"}
               for x in llm)
    r = run("runs", "--data-dir", str(data_dir), "--json", "--status", "rejected")
    assert [x["job_type"] for x in json.loads(r.output)] == ["work_item"]


def test_runs_as_a_table(data_dir):
    r = run("runs", "--data-dir", str(data_dir), "--job-type", "session")
    assert r.exit_code == 0, r.output
    assert "telemetry runs (2)" in r.output and "succeeded" in r.output


def test_bad_filters_missing_and_corrupt_stores_are_clear_errors(tmp_path):
    r = run("runs", "--data-dir", str(tmp_path), "--job-type", "node")
    assert r.exit_code == 2 and "--job-type must be one of" in r.output
    r = run("runs", "--data-dir", str(tmp_path))
    assert r.exit_code == 1 and "no telemetry store" in r.output
    assert "telemetry rebuild" in r.output and not (tmp_path / STORE_NAME).exists()
    (tmp_path / STORE_NAME).write_bytes(b"not sqlite" * 50)
    r = run("runs", "--data-dir", str(tmp_path))
    assert r.exit_code == 1 and "not a readable telemetry store" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [STORE_NAME]
    assert (tmp_path / STORE_NAME).read_bytes() == b"not sqlite" * 50


def test_rebuild_replaces_a_corrupt_store_from_the_logs(data_dir, tmp_path):
    want = run("runs", "--data-dir", str(data_dir), "--json").output
    d = tmp_path / "copy"
    d.mkdir()
    (d / "runs").symlink_to(data_dir / "runs")
    (d / STORE_NAME).write_bytes(b"garbage" * 100)
    r = run("rebuild", "--data-dir", str(d))
    assert r.exit_code == 0 and "2 sessions projected" in r.output, r.output
    assert run("runs", "--data-dir", str(d), "--json").output == want
    r = run("rebuild", "--data-dir", str(tmp_path / "nothing"))
    assert r.exit_code == 1 and "no logs" in r.output


def test_runs_in_a_narrow_terminal_keep_one_line_each_with_tokens(data_dir):
    """80 columns: every run on one line of at most 80, LLM calls with their tokens;
    the stack options `up` takes are accepted (the API ones are not needed here)."""
    r = runner.invoke(cli(), ["telemetry", "runs", "--data-dir", str(data_dir),
                              "--api-port", "8123", "--temporal-port", "7999"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    every = json.loads(run("runs", "--data-dir", str(data_dir), "--json").output)
    llm = [x for x in every if x["job_type"] == "llm_call"]
    lines = r.output.splitlines()
    assert all(len(line) <= 80 for line in lines), r.output
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if "│" in line]
    assert [c[3] for c in cells if c[1] == "llm_call"] == \
        [str(x["attributes"]["total_tokens"]) for x in llm]
    sessions = {x["session_id"]: x for x in every if x["job_type"] == "session"}
    assert {c[0]: c[2] for c in cells if c[1] == "session"} == \
        {sid: x["status"] for sid, x in sessions.items()}
