"""The registry of every declared table: topology, docs and the CLI read it."""

from __future__ import annotations

from workflows.contract import CONTRACT_TABLE
from workflows.fsm import StateMachineTopology, TransitionTable, derive_topology, render_markdown
from workflows.statechart import SESSION_TABLE

TABLES: dict[str, TransitionTable] = {"contract": CONTRACT_TABLE, "session": SESSION_TABLE}


def topology(name: str = "contract") -> StateMachineTopology:
    return derive_topology(TABLES[name])


def statecharts_markdown() -> str:
    """docs/statecharts.md, generated from the tables (a test keeps it in sync)."""
    head = (
        "# State machines\n\n"
        "Generated from the tables in `workflows/` by `hitlflow topology --markdown`;"
        " do not edit by hand.\n\n"
    )
    return head + "\n".join(render_markdown(t) for t in TABLES.values())
