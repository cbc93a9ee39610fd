"""``hitlflow topology``: the tables as JSON, as a table, and as the committed docs."""

from __future__ import annotations

import json
import pathlib

import pytest
from click.testing import Result
from typer.testing import CliRunner

from api.cli.main import app
from workflows.contract import CONTRACT_TABLE, ExecutionStatus, Trigger
from workflows.fsm import derive_topology
from workflows.statechart import SESSION_TABLE, SessionEvent, SessionStatus
from workflows.tables import statecharts_markdown

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "statecharts.md"
runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args), terminal_width=200)


def test_topology_json_is_the_contract_table() -> None:
    """Seed 000 topology: ``--json`` is derive_topology(CONTRACT_TABLE)."""
    result = invoke("topology", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == derive_topology(CONTRACT_TABLE).model_dump(mode="json")
    assert data["machine"] == "execution_contract"
    assert data["resumable_statuses"] == ["waiting"]


def test_topology_session_json_is_the_session_table() -> None:
    """Seed 004: ``--session --json`` is derive_topology(SESSION_TABLE)."""
    result = invoke("topology", "--session", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == derive_topology(SESSION_TABLE).model_dump(mode="json")
    assert data["machine"] == "session"
    guarded = {e["trigger"]: e["guard"] for e in data["edges"] if e["guard"]}
    assert guarded == {"interaction.auto_decide.timeout": "auto_decide",
                       "interaction.reply.expired": "strict"}


@pytest.mark.parametrize(
    ("args", "states", "triggers", "forbidden"),
    [
        ((), list(ExecutionStatus), list(Trigger), len(derive_topology(CONTRACT_TABLE)
                                                       .forbidden_transitions)),
        (("--session",), list(SessionStatus), list(SessionEvent),
         len(derive_topology(SESSION_TABLE).forbidden_transitions)),
    ],
    ids=["contract", "session"],
)
def test_topology_plain_output_mentions_every_status(
    args: tuple[str, ...], states: list, triggers: list, forbidden: int
) -> None:
    """The human-readable form lists every state and trigger, and counts the forbidden."""
    result = invoke("topology", *args)
    assert result.exit_code == 0, result.output
    for s in states:
        assert s.value in result.stdout
    for t in triggers:
        assert t.value in result.stdout
    assert f"{forbidden} forbidden transitions" in result.stdout


def test_topology_markdown_equals_committed_docs() -> None:
    """Invariant 2: docs/statecharts.md is generated from the tables and kept in sync."""
    result = invoke("topology", "--markdown")
    assert result.exit_code == 0, result.output
    assert result.stdout == statecharts_markdown()
    assert DOCS.read_text(encoding="utf-8") == result.stdout, (
        "docs/statecharts.md is stale: run `hitlflow topology --markdown > docs/statecharts.md`"
    )


def test_committed_docs_mention_every_edge() -> None:
    """Invariant 2: every row of both tables appears in the docs."""
    text = DOCS.read_text(encoding="utf-8")
    for table in (CONTRACT_TABLE, SESSION_TABLE):
        assert f"## {table.name}" in text
        for e in table.edges:
            assert f"| `{e.source}` | `{e.trigger}` | `{e.target}` |" in text


def test_topology_bad_option_fails_clearly() -> None:
    """A mistyped option exits non-zero and names the option."""
    result = invoke("topology", "--jsn")
    assert result.exit_code == 2
    assert "No such option" in result.output
    assert "--jsn" in result.output
    assert "{" not in result.stdout


def test_unknown_command_fails_clearly() -> None:
    """A mistyped command exits non-zero and names the command."""
    result = invoke("topolgy")
    assert result.exit_code != 0
    assert "topolgy" in result.output
