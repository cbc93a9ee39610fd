"""schemathesis against the API's own OpenAPI schema, over real HTTP: no 5xx, no
response that breaks the schema, invalid input rejected with a 4xx.

The API runs in a thread of its own (schemathesis calls it synchronously) with a
worker whose every activity refuses: fuzzed session configs name MCP server
commands, and nothing here may run them.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (pip install 'schemathesis>=4.32'):"
    " the OpenAPI fuzz test needs it")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.common import RawValue  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from api.app import ApiServer, create_app  # noqa: E402
from api.deps import ApiTuning  # noqa: E402
from api.settings import HitlflowSettings  # noqa: E402
from workflows.journal_carrier import INTERCEPTORS  # noqa: E402
from workflows.session import SessionWorkflow  # noqa: E402

START_TIMEOUT_S = 60


@activity.defn(dynamic=True)
async def refuse(args: Sequence[RawValue]) -> None:
    raise ApplicationError(f"fuzzing: activity {activity.info().activity_type} refused",
                           non_retryable=True)


class ThreadedApi:
    """The API and a refusing worker in a thread with its own event loop."""

    def __init__(self, target: str, port: int) -> None:
        self.settings = HitlflowSettings(temporal_address=target, api_token=None,
                                         task_queue=f"tq-fuzz-{uuid.uuid4().hex[:8]}")
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self._ready, self._stop = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fuzz-api", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:  # reported by start()
            self._error = err
            self._ready.set()

    async def _main(self) -> None:
        client = await Client.connect(self.settings.target,
                                      data_converter=pydantic_data_converter)
        async with Worker(client, task_queue=self.settings.task_queue,
                          workflows=[SessionWorkflow], activities=[refuse],
                          interceptors=INTERCEPTORS):
            app = create_app(self.settings, client,
                             tuning=ApiTuning(query_timeout_s=10, update_timeout_s=10))
            server = ApiServer(app, "127.0.0.1", self.port)
            await server.start()
            self._ready.set()
            await asyncio.get_running_loop().run_in_executor(None, self._stop.wait)
            await server.stop()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(START_TIMEOUT_S), "the fuzz API did not start"
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(START_TIMEOUT_S)


@pytest.fixture(scope="module")
def fuzz_api(dev_env, free_port: Callable[[], int]) -> Iterator[ThreadedApi]:
    api = ThreadedApi(dev_env.client.service_client.config.target_host, free_port())
    api.start()
    try:
        yield api
    finally:
        api.stop()


#: The SSE stream stays open while its session runs: not a request/response operation.
STREAMING = "/api/sessions/{session_id}/events"
EXAMPLES = 25
#: The session config has rules across fields that its JSON Schema does not state
#: (exactly one driver; `scripted` needs responses, `openai` a base_url; an MCP server
#: has a command or a url; ...): pydantic enforces them with a 422 that says which.
#: So a schema-valid config may be refused; everything else is still checked.
CROSS_FIELD_RULES = [schemathesis.checks.positive_data_acceptance]


def test_the_api_keeps_its_openapi_contract(fuzz_api: ThreadedApi) -> None:
    """Every operation, EXAMPLES generated cases each, every schemathesis check.

    (Driven through hypothesis directly: schemathesis' pytest integration does not
    run on pytest 9 yet.)"""
    schema = schemathesis.openapi.from_url(f"{fuzz_api.url}/openapi.json").exclude(
        path=STREAMING)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:
        fuzz(operation, CROSS_FIELD_RULES if operation.label == "POST /api/sessions" else [])


def fuzz(operation, excluded: list) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case) -> None:
        if case.query:  # opaque: only tokens the API gave out are valid (else a 400)
            case.query.pop("page_token", None)
            case.query.pop("cursor", None)
        case.call_and_validate(excluded_checks=excluded)

    check()
