"""A session whose workflow task fails on every attempt is visible as stuck over HTTP.

The worker here runs a workflow interceptor that raises a plain RuntimeError for
sessions whose id carries a marker (a non-Temporal exception fails the workflow
task, and Temporal retries it for ever): on the worker's ``recover`` signal for
``stuckrecover-*`` sessions, on the very first task for ``stuckstart-*`` ones. Both
fail for real, on the real dev server, next to a healthy session on the same worker.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from activities.mcp.pool import McpClientPool
from api.http.app import create_app
from api.http.deps import ApiTuning
from api.runtime.worker import build_worker
from api.settings import HitlflowSettings
from tests.api.http_support import (
    AUTH,
    TOKEN,
    HttpStack,
    confirm_body,
    error_of,
    eventually,
    serve,
    session_until,
    waiting,
)
from tests.support.sessions import running_exporter
from workflows.messages import RecoverInput

BUG = "injected bug"
ON_RECOVER = "stuckrecover-"
ON_START = "stuckstart-"


class _PoisonInbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        if workflow.info().workflow_id.startswith(ON_START):
            raise RuntimeError(f"{BUG} at the first task")
        return await super().execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        if input.signal == "recover" and workflow.info().workflow_id.startswith(ON_RECOVER):
            raise RuntimeError(f"{BUG} in the recover signal")
        await super().handle_signal(input)


class _Poison(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _PoisonInbound


@pytest.fixture(scope="module")
async def stuck_stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                      tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpStack]:
    """The API and a worker as in production (a workflow task that raises is retried,
    not turned into a failed session), with the poisoning interceptor."""
    settings = HitlflowSettings(
        temporal_address=dev_env.client.service_client.config.target_host,
        task_queue=f"tq-stuck-{uuid.uuid4().hex[:8]}", api_token=TOKEN,
        data_dir=tmp_path_factory.mktemp("stuck-data"))
    pool = McpClientPool()
    poisoned: list[str] = []
    try:
        async with build_worker(dev_env.client, settings.task_queue, pool,
                                interceptors=[_Poison()]), \
                running_exporter(dev_env.client, settings.data_dir, settings.task_queue), \
                serve(create_app(settings, tuning=ApiTuning(query_timeout_s=2.0,
                                                            update_timeout_s=3.0)),
                      free_port()) as server, \
                httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH,
                                  params={"consistency": "live"}) as http:
            # Only the live view knows a workflow task keeps failing (the read model
            # shows the last status the session recorded): every read here asks for it.
            stack = HttpStack(http=http, url=server.url, client=dev_env.client,
                              settings=settings)
            stack.poisoned = poisoned  # type: ignore[attr-defined]
            # Started now, so the retries of its first task (the second attempt times
            # out after 10 s) go on while the other test runs.
            stack.stuck_at_start = await _start(stack, ON_START)  # type: ignore[attr-defined]
            yield stack
    finally:
        for sid in poisoned:  # they would retry for ever: end them
            with contextlib.suppress(Exception):
                await dev_env.client.get_workflow_handle(sid).terminate("test over")
        await pool.aclose()


async def _start(stack: HttpStack, prefix: str = "") -> str:
    params = {"session_id": f"{prefix}{uuid.uuid4().hex[:10]}"} if prefix else None
    r = await stack.http.post("/api/sessions", params=params, json=confirm_body())
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    if prefix:
        stack.poisoned.append(sid)  # type: ignore[attr-defined]
    return sid


def _stuck(view: dict) -> bool:
    return view["stuck"] is not None and view["stuck"]["failed_attempts"] >= 1


def _refusing(view: dict) -> bool:
    """Failed twice: from its third attempt on the server refuses updates at once
    (before, an update is held until a task completes: its outcome is not known, 503)."""
    return view["stuck"] is not None and view["stuck"]["failed_attempts"] >= 2


async def _listed_stuck(http: httpx.AsyncClient, sid: str) -> dict:
    async def stuck_list() -> dict[str, dict]:
        r = await http.get("/api/sessions", params={"stuck": "true", "limit": 1000})
        assert r.status_code == 200, r.text
        return {s["session_id"]: s for s in r.json()["sessions"]}
    found = await eventually(stuck_list, lambda sessions: sid in sessions,
                             what=f"{sid} listed as stuck")
    return found[sid]


async def test_stuck_session_is_shown_and_refuses_writes(stuck_stack: HttpStack):
    http = stuck_stack.http
    healthy, sid = await _start(stuck_stack), await _start(stuck_stack, ON_RECOVER)
    for s in (healthy, sid):
        await session_until(http, s, waiting("confirm"))
    rid = (await http.get(f"/api/sessions/{sid}")).json()["pending"]["request_id"]

    # A worker's restart recovery hits the bug: the workflow task fails on every attempt.
    await stuck_stack.client.get_workflow_handle(sid).signal(
        "recover", RecoverInput(worker_identity="test"))
    view = await session_until(http, sid, _refusing, what="the session shown as stuck")
    assert view["status"] == "waiting_user" and view["live"] is False  # its last status
    assert view["execution_status"] == "running"
    stuck = view["stuck"]
    assert BUG in stuck["reason"] and "in the recover signal" in stuck["message"]
    assert stuck["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE"
    assert stuck["since"] is not None

    # A write Temporal takes and holds (it would apply it if the session recovered) is
    # not refused: 503 stuck_request_held, saying why, with Retry-After and its key.
    # One the server refuses (it does once the task has failed a few times) is a 409
    # session_stuck that says why. Either way nothing is recorded (below).
    updates = [("reply", {"request_id": rid, "approve": True}),
               ("reply", {"request_id": "not-the-pending-one", "approve": True}),
               ("messages", {"text": "hello?"}), ("end", {"reason": "done"})]
    for n, (path, body) in enumerate(updates):
        r = await http.post(f"/api/sessions/{sid}/{path}", json=body,
                            headers={"Idempotency-Key": f"held-{n}"})
        err = error_of(r)
        assert (r.status_code, err["code"]) in {(503, "stuck_request_held"),
                                                (409, "session_stuck")}, (path, r.text)
        assert BUG in err["message"] and r.headers["idempotency-key"] == f"held-{n}"
        if r.status_code == 503:
            assert err["idempotency_key"] == f"held-{n}"
            assert int(r.headers["retry-after"]) >= 1
    for path, body in [("cancel", {}), ("steps/0/approve", {})]:
        r = await http.post(f"/api/sessions/{sid}/{path}", json=body)
        assert r.status_code == 409, (path, r.text)
        err = error_of(r)
        assert err["code"] == "session_stuck" and BUG in err["message"], (path, err)
    # Broken input is still refused as such, before it reaches Temporal.
    r = await http.post(f"/api/sessions/{sid}/messages", json={"text": "x"},
                        headers={"Idempotency-Key": "not a key!"})
    assert (r.status_code, error_of(r)["code"]) == (422, "validation_error")
    assert "Idempotency-Key" in error_of(r)["message"]
    for path, body, code in [("reply", {}, "validation_error"),
                             ("reply", {"request_id": rid, "approve": "yes please"},
                              "validation_error"),
                             ("messages", {"text": ""}, "validation_error"),
                             ("end", {"by": ""}, "validation_error")]:
        r = await http.post(f"/api/sessions/{sid}/{path}", json=body)
        assert (r.status_code, error_of(r)["code"]) == (422, code), (path, r.text)
    r = await http.get("/api/sessions", params={"stuck": "maybe"})
    assert (r.status_code, error_of(r)["code"]) == (422, "validation_error")

    # Nothing was recorded: no accepted update, no cancel request.
    kinds = {e.event_type async for e in
             stuck_stack.client.get_workflow_handle(sid).fetch_history_events()}
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED not in kinds
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED not in kinds

    # Listed as stuck (Temporal's TemporalReportedProblems), with its last status.
    summary = await _listed_stuck(http, sid)
    assert summary["stuck"] is True and summary["status"] == "waiting_user"
    assert "category=WorkflowTaskFailed" in summary["problems"]
    # The default read (the read model) says so too, with the same reason.
    view = await session_until(http, sid, _stuck, what="stuck in the read model's view",
                               consistency="read_model")
    assert view["status"] == "waiting_user" and BUG in view["stuck"]["reason"]
    assert (await http.get(f"/api/sessions/{healthy}", params={
        "consistency": "read_model"})).json()["stuck"] is None

    # The healthy session next to it is unaffected: live, never listed as stuck.
    h = (await http.get(f"/api/sessions/{healthy}")).json()
    assert h["live"] is True and h["stuck"] is None
    r = await http.get("/api/sessions", params={"stuck": "true", "limit": 1000})
    assert healthy not in {s["session_id"] for s in r.json()["sessions"]}
    r = await http.get("/api/sessions", params={"stuck": "false", "limit": 1000})
    listed = {s["session_id"]: s for s in r.json()["sessions"]}
    assert sid not in listed and listed[healthy]["stuck"] is False
    r = await http.post(f"/api/sessions/{healthy}/reply",
                        json={"request_id": h["pending"]["request_id"], "approve": True})
    assert r.status_code == 202, r.text
    await session_until(http, healthy, lambda s: s["replies"] == 1,
                        what="the healthy session took the reply")


async def test_session_stuck_on_its_first_task(stuck_stack: HttpStack):
    """No task ever completed: the query waits for one and times out; the view from
    Temporal's record shows the session stuck in the status it was started with."""
    http = stuck_stack.http
    sid = stuck_stack.stuck_at_start  # type: ignore[attr-defined]
    assert sid.startswith(ON_START)
    view = await session_until(http, sid, _refusing, what="the session shown as stuck")
    assert view["status"] == "queued" and view["live"] is False
    assert "at the first task" in view["stuck"]["reason"]
    r = await http.post(f"/api/sessions/{sid}/messages", json={"text": "anyone?"})
    assert (r.status_code, error_of(r)["code"]) in {(503, "stuck_request_held"),
                                                    (409, "session_stuck")}, r.text
    assert "at the first task" in error_of(r)["message"]
    summary = await _listed_stuck(http, sid)
    assert summary["status"] == "queued" and summary["stuck"] is True
