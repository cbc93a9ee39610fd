"""``hitlflow session show``'s pending request names the wait's steps taken (issue 26):
reminded, and escalated to whom, each with its time; none before they happen."""

from __future__ import annotations

from rich.console import Console

from api.cli import session_view

PENDING = {"request_id": "r-1", "kind": "approval", "prompt": "Delete a?", "execution_id": None,
           "approvers": ["ann", "carol"]}


def shown(pending: dict, monkeypatch) -> str:
    out = Console(record=True, width=120, highlight=False)
    monkeypatch.setattr(session_view, "console", out)
    session_view.render_pending("s-1", pending)
    return out.export_text()


def test_no_steps_before_they_happen(monkeypatch):
    text = shown(PENDING, monkeypatch)
    assert "reminded" not in text and "escalated" not in text


def test_reminded_and_escalated_with_whom_and_when(monkeypatch):
    text = shown({**PENDING, "reminded_at": "2026-11-26T10:00:00Z",
                  "escalated_at": "2026-11-26T11:00:00Z",
                  "escalated_to": ["carol", "group:oncall"]}, monkeypatch)
    lines = [line.strip() for line in text.splitlines()]
    assert "reminded at 2026-11-26T10:00:00Z" in lines
    assert "escalated to carol, group:oncall at 2026-11-26T11:00:00Z" in lines
