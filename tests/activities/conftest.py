"""Fixtures for the activity tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture(scope="session")
def _fake_openai_server() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake_openai(_fake_openai_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI-compatible server (one per test session), reset for each test."""
    _fake_openai_server.reset()
    yield _fake_openai_server
    _fake_openai_server.reset()
