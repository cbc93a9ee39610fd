"""Fixtures for the HTTP tests: the API over real HTTP, the real dev server, a worker."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from api.http.command_policy import SHELL
from api.settings import DEMO_COMMAND, HitlflowSettings
from tests.api.http_support import HttpStack, running_stack


@pytest.fixture(scope="module")
async def http_stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                     tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpStack]:
    """The API (its lifespan connects its own Temporal client), a session worker on
    a task queue of this module's own, and the exporter keeping the read model the
    API reads (in a data directory of the module's own). Its operator lets plan
    sessions run their shell commands (docs/security.md, "Who may run code")."""
    settings = HitlflowSettings(
        temporal_address=dev_env.client.service_client.config.target_host,
        task_queue=f"tq-http-{uuid.uuid4().hex[:8]}", api_token=None,
        data_dir=tmp_path_factory.mktemp("http-data"),
        api_allowed_commands=[SHELL, DEMO_COMMAND])
    async with running_stack(dev_env.client, settings, free_port()) as stack:
        yield stack


@pytest.fixture
def http_notes_dir(tmp_path: Path) -> Path:
    d = tmp_path / "notes"
    d.mkdir()
    return d
