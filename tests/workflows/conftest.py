"""Fixtures for session tests: a notes directory with the demo MCP server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from api.cli.demo_config import notes_server
from tests.support.sessions import running_worker


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    d = tmp_path / "notes"
    d.mkdir()
    return d


@pytest.fixture
def notes(notes_dir: Path) -> dict:
    return notes_server(notes_dir)


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def ts_worker(time_skipping_env: WorkflowEnvironment, task_queue: str
                    ) -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping server with a session worker on ``task_queue`` for the test."""
    async with running_worker(time_skipping_env.client, task_queue):
        yield time_skipping_env


@pytest.fixture
async def dev_worker(dev_env: WorkflowEnvironment, task_queue: str
                     ) -> AsyncIterator[WorkflowEnvironment]:
    """The real dev server with a session worker on ``task_queue`` for the test."""
    async with running_worker(dev_env.client, task_queue):
        yield dev_env
