"""``hitlflow session tail`` on an interrupt (issue 27): the cut call's text is marked
as cut and never completed, and a line says what was cut and by whom."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from api.cli import session_view
from api.cli.sse_client import SseMessage
from api.cli.text import AgentText


def event(kind: str, data: dict) -> SseMessage:
    return SseMessage(event=kind, data=json.dumps(data), id=None if kind == "text.delta"
                      else "7")


def test_tail_marks_the_cut_text_and_says_what_was_cut(monkeypatch: pytest.MonkeyPatch):
    out = io.StringIO()
    console = Console(file=out, highlight=False, width=200, color_system=None)
    monkeypatch.setattr(session_view, "console", console)
    text = AgentText(console, "agent: ")
    for msg in [
        event("text.delta", {"call_id": "s-llm-0", "delta": "Once upon"}),
        event("TURN_INTERRUPTED", {"reason": "interrupt", "by": "ann", "turn": 2,
                                   "cut": {"kind": "llm_call", "id": "s-llm-0"}}),
        event("text.delta", {"call_id": "s-llm-0", "delta": " a time"}),  # late: not shown
        event("TURN_INTERRUPTED", {
            "reason": "interrupt", "by": "bob", "turn": 3, "cut": None,
            "waited_for": {"kind": "tool_call", "id": "s.e1", "tool": "delete",
                           "server": "files", "safety": "irreversible"},
            "dropped": [{"tool_call_id": "c2", "tool": "put"}]}),
    ]:
        session_view.render_event("s", msg, text)
    assert out.getvalue().splitlines() == [
        "agent: Once upon [cut]",
        "  interrupted by ann: cut the model's answer (s-llm-0)",
        "  interrupted by bob: ended the turn between two steps; after the tool call "
        "files.delete finished (never cut); 1 action of the old turn not run",
    ]
