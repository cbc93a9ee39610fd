"""The scripted demo session: a reversible tool call, a destructive one that waits
for approval, a question to the person, and a final answer. No network needed."""

from __future__ import annotations

import sys
from pathlib import Path

from workflows.config import SessionConfig


def notes_server(notes_dir: Path, name: str = "notes") -> dict:
    """The shipped demo MCP server (activities/demo_notes_server.py) over stdio."""
    return {
        "name": name,
        "command": [sys.executable, "-m", "activities.demo_notes_server", "--dir",
                    str(notes_dir)],
    }


# Each answer that follows a decision of the person branches on it (``alternatives``
# with ``when``): a rejected delete is reported as such, never as done.
DEMO_SCRIPT: list[dict] = [
    {"text": "I'll write both notes first.", "tool_calls": [
        {"tool": "write_note", "arguments": {"name": "groceries", "content": "milk, eggs"}},
        {"tool": "write_note", "arguments": {"name": "old-draft", "content": "obsolete"}},
    ]},
    {"text": "Now the old draft goes; deleting cannot be undone, so I ask first.",
     "tool_calls": [{"tool": "delete_note", "arguments": {"name": "old-draft"}}]},
    {"text": "The old draft is deleted.",
     "ecs_request": {"kind": "confirm", "prompt": "Shall I read the groceries list back to you?"},
     "alternatives": [
         {"when": {"previous": "rejected"}, "text": "Understood: I keep the old draft.",
          "ecs_request": {"kind": "confirm",
                          "prompt": "Shall I read the groceries list back to you?"}},
         {"when": {"previous": "failed"}, "text": "Deleting the old draft failed.",
          "ecs_request": {"kind": "confirm",
                          "prompt": "Shall I read the groceries list back to you?"}}]},
    {"tool_calls": [{"tool": "read_note", "arguments": {"name": "groceries"}}],
     "alternatives": [
         {"when": {"previous": "rejected"}, "text": "I won't read it; here are your notes.",
          "tool_calls": [{"tool": "list_notes", "arguments": {}}]}]},
    {"text": "Done: groceries saved, the old draft deleted.", "end": True,
     "alternatives": [
         {"when": {"previous": "rejected", "tool": "delete_note"}, "end": True,
          "text": "Done: groceries saved; the old draft is still there, as you asked."},
         {"when": {"previous": "failed", "tool": "delete_note"}, "end": True,
          "text": "Groceries saved, but deleting the old draft failed: it is still there."},
         {"when": {"previous": "cancelled", "tool": "delete_note"}, "end": True,
          "text": "Groceries saved; the old draft was not deleted (nobody answered)."}]},
]


def demo_config(notes_dir: Path, **overrides) -> SessionConfig:
    return SessionConfig.model_validate({
        "title": "hitlflow demo",
        "mode": "interactive",
        "initial_message": "Tidy up my notes: save the groceries list, drop the old draft.",
        "agent": {
            "llm": {"provider": "scripted", "model": "scripted-demo", "responses": DEMO_SCRIPT},
            "system_prompt": "You keep the person's notes tidy. Ask before deleting.",
            "tools": [notes_server(notes_dir)],
        },
        **overrides,
    })
