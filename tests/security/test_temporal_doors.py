"""Temporal's own doors on the dev server ``hitlflow up`` starts (issue 25, item 2;
docs/security.md, "Temporal's own doors").

The dev server always serves Temporal's HTTP API next to gRPC, without
authentication. These tests replay what a web page could send it — the issue's
``StartWorkflowExecution`` of a session whose plan runs ``id > pwned.txt``, a signal
that answers a pending request, a request through a DNS name rebound to 127.0.0.1 —
against the real server, started the way ``up`` starts it (``DevServer``), with the
HTTP API on a port the test chooses so it knows where to knock. Each must be refused,
and nothing may have started or been signalled. Also: the Web UI's own API refuses a
cross-origin simple POST, and what ``up`` needs (gRPC, the Web UI) still answers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.runtime.devserver import DevServer
from api.settings import TASK_QUEUE

pytestmark = pytest.mark.slow

ATTACKER = "http://evil.example"


@dataclass
class Doors:
    server: DevServer
    http_port: int
    client: Client

    @property
    def http_api(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@pytest.fixture(scope="module")
async def doors(tmp_path_factory: pytest.TempPathFactory,
                free_port: Callable[[], int]) -> AsyncIterator[Doors]:
    http_port = free_port()
    server = DevServer(tmp_path_factory.mktemp("doors"), port=free_port(), ui_port=free_port(),
                       in_memory=True, extra_args=["--http-port", str(http_port)])
    await server.start()
    try:
        yield Doors(server, http_port, await server.connect())
    finally:
        await server.stop()


def the_issues_start(workflow_id: str, cwd: Path) -> str:
    """The issue's replay: a session on hitlflow's task queue whose plan runs a command."""
    return json.dumps({
        "workflowId": workflow_id,
        "workflowType": {"name": "SessionWorkflow"},
        "taskQueue": {"name": TASK_QUEUE},
        "input": [{"session_id": workflow_id, "behaviour": 5, "config": {
            "mode": "auto", "plan": {"steps": [{"run": f"id > {cwd / 'pwned.txt'}"}]}}}],
    })


async def assert_not_started(client: Client, workflow_id: str) -> None:
    with pytest.raises(RPCError) as err:
        await client.get_workflow_handle(workflow_id).describe()
    assert err.value.status == RPCStatusCode.NOT_FOUND, f"{workflow_id} exists: it got in"


def assert_refused_by_host_check(resp: httpx.Response, tried: str) -> None:
    """403 with Temporal's own message: the HTTP API listens there and said no."""
    assert resp.status_code == 403, f"{tried}: answered {resp.status_code} {resp.text}"
    assert resp.json() == {"code": 7, "message": "Host not allowed"}, tried


async def test_a_page_of_another_origin_cannot_start_a_session_through_the_http_api(
        doors: Doors, tmp_path: Path) -> None:
    """Tried: the issue's text/plain POST (no CORS preflight) of StartWorkflowExecution,
    sent as a browser sends it from another origin (Origin set, Host the server's)."""
    wid = f"doors-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{doors.http_api}/api/v1/namespaces/default/workflows/{wid}",
                               content=the_issues_start(wid, tmp_path),
                               headers={"content-type": "text/plain", "origin": ATTACKER})
    assert_refused_by_host_check(resp, "a cross-origin StartWorkflowExecution")
    await assert_not_started(doors.client, wid)
    assert not (tmp_path / "pwned.txt").exists()


async def test_a_page_that_rebinds_a_name_to_127_0_0_1_cannot_read_or_start(
        doors: Doors, tmp_path: Path) -> None:
    """Tried: what a DNS-rebinding page sends (its own name in Host, same-origin to the
    browser): list the namespaces, then the issue's start."""
    wid = f"doors-{uuid.uuid4().hex[:8]}"
    host = {"host": f"evil.example:{doors.http_port}"}
    async with httpx.AsyncClient() as http:
        listed = await http.get(f"{doors.http_api}/api/v1/namespaces", headers=host)
        started = await http.post(
            f"{doors.http_api}/api/v1/namespaces/default/workflows/{wid}",
            content=the_issues_start(wid, tmp_path),
            headers={**host, "content-type": "application/json"})
    assert_refused_by_host_check(listed, "ListNamespaces under a rebound name")
    assert_refused_by_host_check(started, "StartWorkflowExecution under a rebound name")
    await assert_not_started(doors.client, wid)


async def test_a_page_cannot_answer_a_pending_request_through_the_http_api(
        doors: Doors) -> None:
    """Tried: a cross-origin text/plain POST of the ``submit_reply`` signal (the issue's
    approval of a pending request) to a workflow that exists (started over gRPC)."""
    wid = f"doors-{uuid.uuid4().hex[:8]}"
    await doors.client.start_workflow("SessionWorkflow", id=wid, task_queue="nobody-polls")
    reply = {"input": [{"request_id": "r1", "approve": True}]}
    async with httpx.AsyncClient() as http:
        resp = await http.post(
            f"{doors.http_api}/api/v1/namespaces/default/workflows/{wid}/signal/submit_reply",
            content=json.dumps(reply), headers={"content-type": "text/plain", "origin": ATTACKER})
    assert_refused_by_host_check(resp, "a cross-origin SignalWorkflowExecution")
    events = [e.event_type async for e in doors.client.get_workflow_handle(wid)
              .fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in events


async def test_the_web_ui_refuses_a_cross_origin_simple_post(doors: Doors,
                                                               tmp_path: Path) -> None:
    """Tried: the issue's start as a text/plain POST from another origin to the Web
    UI's own API (it proxies to gRPC): its CSRF check wants a header no simple
    cross-origin request can carry."""
    wid = f"doors-{uuid.uuid4().hex[:8]}"
    assert doors.server.ui_url is not None
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{doors.server.ui_url}/api/v1/namespaces/default/workflows/{wid}",
                               content=the_issues_start(wid, tmp_path),
                               headers={"content-type": "text/plain", "origin": ATTACKER})
    assert resp.status_code == 400, resp.text
    assert "csrf" in resp.text.lower()
    await assert_not_started(doors.client, wid)


async def test_what_up_needs_still_answers(doors: Doors) -> None:
    """gRPC (the worker, the API, the exporter) and the Web UI are untouched."""
    desc = await doors.client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace="default"))
    assert desc.namespace_info.name == "default"
    assert doors.server.ui_url is not None
    async with httpx.AsyncClient() as http:
        assert (await http.get(doors.server.ui_url + "/")).status_code == 200
