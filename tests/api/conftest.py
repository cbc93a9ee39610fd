"""Fixtures for the HTTP tests: the API over real HTTP, the real dev server, a worker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from api.http.command_policy import SHELL
from api.settings import DEMO_COMMAND
from tests.api.http_support import HttpStack, running_stack, stack_settings
from tests.support.inbox_browser import Pages, kept_pages, launched_chromium


@pytest.fixture(scope="module")
async def http_stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                     tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpStack]:
    """The API (its lifespan connects its own Temporal client), a session worker on
    a task queue of this module's own, and the exporter keeping the read model the
    API reads (in a data directory of the module's own); the API requires ``TOKEN``,
    which ``http_stack.http`` sends. Its operator lets plan sessions run their shell
    commands (docs/security.md, "Who may run code")."""
    settings = stack_settings(dev_env.client, tmp_path_factory.mktemp("http-data"), "http",
                              commands=[SHELL, DEMO_COMMAND])
    async with running_stack(dev_env.client, settings, free_port()) as stack:
        yield stack


@pytest.fixture
def http_notes_dir(tmp_path: Path) -> Path:
    d = tmp_path / "notes"
    d.mkdir()
    return d


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[object]:
    """One chromium for the module's inbox tests."""
    async with launched_chromium() as launched:
        yield launched


@pytest.fixture
async def pages(browser, request: pytest.FixtureRequest) -> AsyncIterator[Pages]:
    """A fresh browser context (its pages saved on a failure); a module may set
    ``INBOX_VIEWPORT_HEIGHT``."""
    async with kept_pages(browser, getattr(request.module, "INBOX_VIEWPORT_HEIGHT", 720)
                          ) as kept:
        yield kept
