"""The MCP servers the activity tests run for real, and what they leave on disk."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from workflows.config import McpServerConfig

REPO = Path(__file__).resolve().parents[2]


def notes_server(notes_dir: Path, **extra) -> McpServerConfig:
    """The demo notes server over stdio; ``--dir`` makes each folder a distinct server."""
    return McpServerConfig(
        name="notes",
        command=[sys.executable, "-m", "activities.demo_notes_server", "--dir", str(notes_dir)],
        cwd=str(REPO),
        **extra,
    )


def hanging_server(launch_dir: Path) -> McpServerConfig:
    """A server whose ``launch`` tool never returns: a call that stays in flight."""
    return McpServerConfig(
        name="hanging",
        command=[sys.executable, "-m", "tests.fakes.hanging_mcp_server", "--dir", str(launch_dir)],
        cwd=str(REPO),
    )


def server_pid(notes_dir: Path) -> int:
    return int((notes_dir / ".server.pid").read_text())


def executions(notes_dir: Path) -> list[dict]:
    log = notes_dir / ".calls.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def recording_server(folder: Path) -> McpServerConfig:
    """A server whose irreversible ``delete`` records every call it receives in
    ``<folder>/calls.log``; flag files make it hang at start or mid-call, or die
    mid-call (tests/fakes/recording_mcp_server.py)."""
    return McpServerConfig(
        name="recorder",
        command=[sys.executable, "-m", "tests.fakes.recording_mcp_server", "--dir", str(folder)],
        cwd=str(REPO),
    )


def received(folder: Path) -> list[dict]:
    """The calls the recording server received, in order."""
    log = folder / "calls.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
