"""schemathesis against the API's own OpenAPI schema, over real HTTP: no 5xx, no
response that breaks the schema, invalid input rejected with a 4xx.

The API runs in a thread of its own (schemathesis calls it synchronously) with a
worker whose every activity refuses: fuzzed session configs name MCP server
commands, and nothing here may run them. Fuzzed ids mostly name no session, so
the cases also get real ones: two sessions run by a real worker on a queue of their
own (one waits for the person, one has finished) and their contracts' execution
ids, exported (logs, signed checkpoints, telemetry) into the read model the API
reads, so the handlers past the 404 are reached too. Page tokens and cursors are
fuzzed as well (one the API never gave out is a 400).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (pip install 'schemathesis>=4.32'):"
    " the OpenAPI fuzz test needs it")

import httpx  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.common import RawValue  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from api.http.app import ApiServer, create_app  # noqa: E402
from api.http.deps import ApiTuning  # noqa: E402
from api.http.doors import STATE_CHANGING  # noqa: E402
from api.settings import HitlflowSettings  # noqa: E402
from observation.exporter.keys import load_or_create_signer  # noqa: E402
from observation.telemetry import STORE_NAME, TelemetryStore  # noqa: E402
from observation.telemetry.hook import sync_store  # noqa: E402
from tests.api.http_support import AUTH, TOKEN, confirm_body, session_until, waiting  # noqa: E402
from tests.support.sessions import (  # noqa: E402
    running_exporter,
    running_worker,
    start_session,
)
from workflows.config import SessionConfig  # noqa: E402
from workflows.journal_carrier import INTERCEPTORS  # noqa: E402
from workflows.session import SessionWorkflow  # noqa: E402

START_TIMEOUT_S = 60


@activity.defn(dynamic=True)
async def refuse(args: Sequence[RawValue]) -> None:
    raise ApplicationError(f"fuzzing: activity {activity.info().activity_type} refused",
                           non_retryable=True)


class ThreadedApi:
    """The API, a refusing worker, and real sessions (a real worker and the exporter on
    a queue of their own) in a thread with its own event loop."""

    def __init__(self, target: str, port: int, data_dir: Path) -> None:
        self.settings = HitlflowSettings(temporal_address=target, api_token=TOKEN,
                                         task_queue=f"tq-fuzz-{uuid.uuid4().hex[:8]}",
                                         data_dir=data_dir)
        self.real_queue = f"tq-fuzz-real-{uuid.uuid4().hex[:8]}"
        #: [waiting, finished] session ids, and their contracts' execution ids.
        self.session_ids: list[str] = []
        self.execution_ids: list[str] = []
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
                          interceptors=INTERCEPTORS), \
                running_worker(client, self.real_queue), \
                running_exporter(client, self.settings.data_dir, self.real_queue,
                                 signer=load_or_create_signer(self.settings.data_dir)):
            # freshness_wait_s: a fuzzed `min_seq` would wait 2 s for a line never written.
            app = create_app(self.settings, client, tuning=ApiTuning(
                query_timeout_s=10, update_timeout_s=10, freshness_wait_s=0.05))
            server = ApiServer(app, "127.0.0.1", self.port)
            await server.start()
            await self._real_sessions(client)
            self._ready.set()
            await asyncio.get_running_loop().run_in_executor(None, self._stop.wait)
            await server.stop()

    async def _real_sessions(self, client: Client) -> None:
        """One session waiting for the person, one finished, both in the read model."""
        config = SessionConfig.model_validate(confirm_body())
        sids = [(await start_session(client, config, self.real_queue)).id for _ in range(2)]
        async with httpx.AsyncClient(base_url=self.url, timeout=30, headers=AUTH) as http:
            views = [await session_until(http, sid, waiting("confirm")) for sid in sids]
            r = await http.post(f"/api/sessions/{sids[1]}/reply", json={
                "request_id": views[1]["pending"]["request_id"], "approve": True})
            assert r.status_code == 202, r.text
            views[1] = await session_until(http, sids[1], lambda s: s["status"] == "succeeded")
        self.session_ids = sids
        self.execution_ids = [c["execution_id"] for v in views for c in v["contracts"]]
        assert len(self.execution_ids) == 2, views
        # Their telemetry runs, as the exporter of `up` keeps them (GET /api/telemetry/runs).
        store = TelemetryStore.open(self.settings.data_dir / STORE_NAME)
        try:
            sync_store(store, self.settings.data_dir / "runs")
        finally:
            store.close()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(START_TIMEOUT_S), "the fuzz API did not start"
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(START_TIMEOUT_S)


@pytest.fixture(scope="module")
def fuzz_api(dev_env, free_port: Callable[[], int],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedApi]:
    api = ThreadedApi(dev_env.client.service_client.config.target_host, free_port(),
                      tmp_path_factory.mktemp("fuzz-data"))
    api.start()
    try:
        yield api
    finally:
        api.stop()


#: The SSE stream stays open while its session runs: fuzzed on the finished session
#: only (its stream ends), with fuzzed `Last-Event-ID` and `after`.
STREAMING = "/api/sessions/{session_id}/events"
EXAMPLES = 25
#: The session config has rules across fields that its JSON Schema does not state
#: (exactly one driver; `scripted` needs responses, `openai` a base_url; an MCP server
#: has a command or a url; ...): pydantic enforces them with a 422 that says which.
#: So a schema-valid config may be refused; everything else is still checked.
CROSS_FIELD_RULES = [schemathesis.checks.positive_data_acceptance]
#: Opaque values: a page token, cursor or event id the API did not give out (or past
#: the stream's end) is a 400 however well it fits the schema's string.
OPAQUE_QUERY, OPAQUE_HEADERS = {"page_token", "cursor", "after"}, {"Last-Event-ID"}
#: The operations whose schema-valid bodies may be refused: a session config (above),
#: and an action link's token (opaque: one the API did not sign is a 400 or a 403).
CROSS_FIELD_OPERATIONS = {"POST /api/sessions", "POST /api/act/inspect",
                          "POST /api/act/decide"}
#: Every call carries the token as a header of the test's, which schemathesis' check
#: that a call without authentication is refused cannot take off (it replays it with
#: the token and sees a 200); tests/security/test_http_doors.py checks every route.
TOKEN_SENT_BY_THE_TEST = [schemathesis.checks.ignored_auth]


def test_the_api_keeps_its_openapi_contract(fuzz_api: ThreadedApi) -> None:
    """Every operation, EXAMPLES generated cases each, every schemathesis check.

    (Driven through hypothesis directly: schemathesis' pytest integration does not
    run on pytest 9 yet.)"""
    schema = schemathesis.openapi.from_url(f"{fuzz_api.url}/openapi.json", headers=AUTH)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:
        fuzz(operation, fuzz_api,
             CROSS_FIELD_RULES if operation.label in CROSS_FIELD_OPERATIONS else [])


def fuzz(operation, api: ThreadedApi, excluded: list) -> None:
    streaming = operation.path == STREAMING
    # Which real session (and contract) a case names: None keeps the fuzzed id.
    picks = st.just(1) if streaming else st.sampled_from([None, 0, 1])

    @given(case=operation.as_strategy(), real=picks)
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case, real: int | None) -> None:
        params = case.path_parameters or {}
        if real is not None and "session_id" in params:
            params["session_id"] = api.session_ids[real]
        if real is not None and "execution_id" in params:
            params["execution_id"] = api.execution_ids[real]
        if real is not None and "session_id" in (case.query or {}):
            case.query["session_id"] = api.session_ids[real]
        opaque = OPAQUE_QUERY & set(case.query or {}) or OPAQUE_HEADERS & set(case.headers or {})
        # As every client does: the token, and JSON whenever it may change something
        # (a POST, a DELETE: `{}` when empty).
        headers = {**AUTH, "content-type": "application/json"} \
            if case.method in STATE_CHANGING else AUTH
        skipped = excluded or (CROSS_FIELD_RULES if opaque else [])
        case.call_and_validate(headers=headers, excluded_checks=[*skipped,
                                                                 *TOKEN_SENT_BY_THE_TEST])

    check()
