"""Fixtures for the HTTP tests: the API over real HTTP, the real dev server, a worker."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from api.app import create_app
from api.settings import HitlflowSettings
from observation.exporter.keys import load_or_create_signer
from tests.api.http_support import HttpStack, serve
from tests.support.sessions import running_exporter, running_worker


@pytest.fixture(scope="module")
async def http_stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                     tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpStack]:
    """The API (its lifespan connects its own Temporal client), a session worker on
    a task queue of this module's own, and the exporter keeping the read model the
    API reads (in a data directory of the module's own)."""
    settings = HitlflowSettings(
        temporal_address=dev_env.client.service_client.config.target_host,
        task_queue=f"tq-http-{uuid.uuid4().hex[:8]}", api_token=None,
        data_dir=tmp_path_factory.mktemp("http-data"))
    signer = load_or_create_signer(settings.data_dir)  # as `up` does at its first start
    async with running_worker(dev_env.client, settings.task_queue), \
            running_exporter(dev_env.client, settings.data_dir, settings.task_queue,
                             signer=signer), \
            serve(create_app(settings), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield HttpStack(http=http, url=server.url, client=dev_env.client, settings=settings)


@pytest.fixture
def http_notes_dir(tmp_path: Path) -> Path:
    d = tmp_path / "notes"
    d.mkdir()
    return d
