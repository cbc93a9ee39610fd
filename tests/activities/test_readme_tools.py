"""The README's "Tool servers" and "What the model sees" against the code: the
function-name examples are what ``ToolNames`` gives, the option table lists exactly
the fields of ``McpServerConfig``, and the sharing rule is the pool's key. No
servers: it reads the README and calls pure functions."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

import pytest
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

from activities.command_env import BASE_VARS
from activities.llm.wire import (
    ASK_USER,
    ASK_USER_FUNCTION,
    END_CONVERSATION,
    END_CONVERSATION_FUNCTION,
    ToolNames,
    openai_tools,
)
from activities.mcp.pool import McpClientPool
from workflows.config import McpServerConfig, SafetyOverride
from workflows.io import ToolSpec

README = Path(__file__).resolve().parents[2] / "docs" / "session-config.md"
FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n### {title}\n")
    end = text.find("\n#", start + 1)
    return text[start:end]


def tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in ``text``: rows of cells, header first, rule left out."""
    found, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= {"-", " "} for c in cells):
                rows.append(cells)
        elif rows:
            found.append(rows)
            rows = []
    return found


def table(title: str, header: list[str]) -> list[list[str]]:
    (rows,) = [t[1:] for t in tables(section(title)) if t[0] == header]
    return rows


def code(cell: str) -> str:
    (value,) = re.findall(r"`([^`]+)`", cell)
    return value


def test_the_function_name_examples_are_what_the_model_is_offered():
    rows = table("What the model sees", ["server", "tool", "function"])
    assert len(rows) >= 4
    specs = [ToolSpec(server=code(server), name=code(tool)) for server, tool, _ in rows]
    names = ToolNames.build(specs)
    offered = [t["function"]["name"] for t in openai_tools(specs, names)]
    for spec, (_, _, function) in zip(specs, rows, strict=True):
        documented = code(function)
        assert names.function_name(spec.server, spec.name) == documented, spec
        assert names.resolve(documented) == (spec.server, spec.name)
        assert FUNCTION_NAME.fullmatch(documented)
    assert offered == [code(f) for _, _, f in rows] + [ASK_USER, END_CONVERSATION]
    # The examples show each case of the rule: as is, made safe, a clash.
    functions = [code(f) for _, _, f in rows]
    assert any(f == f"{s.server}__{s.name}" for f, s in zip(functions, specs, strict=True))
    assert any(re.search(r"_[0-9a-f]{8}$", f) and "." in s.server
               for f, s in zip(functions, specs, strict=True))
    assert len({f"{s.server}__{s.name}" for s in specs}) < len(specs)  # two would clash


def test_the_pseudo_tools_are_documented_with_their_parameters():
    rows = {code(r[0]): r[1] for r in table("What the model sees", ["function",
                                                                     "what a call does"])}
    assert set(rows) == {"<server>__<tool>", ASK_USER, END_CONVERSATION}
    params = ASK_USER_FUNCTION["function"]["parameters"]
    fields = params["properties"]["fields"]["items"]["properties"]
    for word in [*params["properties"], *params["properties"]["kind"]["enum"], *fields,
                 *fields["type"]["enum"]]:
        assert f"`{word}`" in rows[ASK_USER] or f'"{word}"' in rows[ASK_USER], word
    for word in END_CONVERSATION_FUNCTION["function"]["parameters"]["properties"]:
        assert f"`{word}`" in rows[END_CONVERSATION], word


def test_the_option_table_lists_exactly_the_fields_of_a_tool_server():
    rows = {code(r[0]): r[1] for r in table("Tool servers", ["field", "what"])}
    assert list(rows) == list(McpServerConfig.model_fields)
    for value in typing.get_args(SafetyOverride):
        assert f"`{value}`" in rows["tool_overrides"], value


@pytest.mark.skipif(sys.platform == "win32", reason="the README gives the POSIX list")
def test_the_variables_a_server_gets_from_the_worker_are_the_rules():
    """The documented list is activities.command_env's, which holds the SDK's own set."""
    text = " ".join(section("Tool servers").split())
    listed = re.search(r"it is ((?:`[A-Z_]+`,? (?:and )?)+)taken from the worker", text)
    assert listed is not None
    assert re.findall(r"`([A-Z_]+)`", listed.group(1)) == list(BASE_VARS)
    assert set(DEFAULT_INHERITED_ENV_VARS) <= set(BASE_VARS)


def test_sessions_share_a_server_when_their_entries_are_equal_but_for_overrides():
    one = McpServerConfig(name="notes", command=["srv"], env={"A": "1", "B": "2"})
    same = McpServerConfig(name="notes", command=["srv"], env={"B": "2", "A": "1"},
                           tool_overrides={"write": "irreversible"})
    assert McpClientPool._key(one) == McpClientPool._key(same)
    for other in (one.model_copy(update={"name": "notes2"}),
                  one.model_copy(update={"env": {"A": "1"}}),
                  one.model_copy(update={"cwd": "/tmp"}),
                  one.model_copy(update={"roots": []})):
        assert McpClientPool._key(other) != McpClientPool._key(one)
