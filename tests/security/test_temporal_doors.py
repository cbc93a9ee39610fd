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

The Web UI's address is served by hitlflow's proxy (api/runtime/ui_proxy.py), which
refuses a foreign ``Host`` on every request of a connection: the replay of a DNS-rebinding
page (get the UI's CSRF cookie under its own name, then start a workflow with it) must
get neither the cookie nor the start, while the UI's pages and API answer under
127.0.0.1, and the same start under 127.0.0.1 does go through (the replay is real).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.hosts import is_local
from api.runtime.devserver import DevServer
from api.runtime.ui_proxy import REFUSED, UiProxyServer
from api.settings import TASK_QUEUE
from tests.support.browser_origin import TEXT, Attempt, described, foreign_page

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



@pytest.mark.browser
async def test_a_page_in_chromium_cannot_start_or_signal_through_the_http_api(
        doors: Doors, tmp_path: Path, free_port: Callable[[], int]) -> None:
    """Tried, from a page of another origin in Chromium: the issue's text/plain
    StartWorkflowExecution (a plan step writing pwned.txt) and a text/plain
    ``submit_reply`` signal approving a pending request, as a browser sends them
    (no preflight); and the same start with a JSON body (preflighted). Nothing
    started, nothing was signalled."""
    started, target = f"doors-{uuid.uuid4().hex[:8]}", f"doors-{uuid.uuid4().hex[:8]}"
    await doors.client.start_workflow("SessionWorkflow", id=target, task_queue="nobody-polls")
    base = f"{doors.http_api}/api/v1/namespaces/default/workflows"
    reply = json.dumps({"input": [{"request_id": "r1", "approve": True}]})
    attempts = [
        Attempt("a text/plain StartWorkflowExecution", f"{base}/{started}",
                content_type=TEXT, body=the_issues_start(started, tmp_path)),
        Attempt("a text/plain submit_reply signal", f"{base}/{target}/signal/submit_reply",
                content_type=TEXT, body=reply),
        Attempt("a JSON StartWorkflowExecution (preflighted)", f"{base}/{started}",
                content_type="application/json", body=the_issues_start(started, tmp_path),
                mode="cors"),
    ]
    async with foreign_page(free_port()) as page:
        outcomes = await page.attempt(*attempts)
    report = described(outcomes)
    assert not any(o.readable and o.status is not None and o.status < 400
                   for o in outcomes), report
    await assert_not_started(doors.client, started)
    assert not (tmp_path / "pwned.txt").exists(), report
    events = [e.event_type async for e in doors.client.get_workflow_handle(target)
              .fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in events, report

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


# ---------------------------------------------------------------------------
# The Web UI behind hitlflow's proxy


def ui_host(doors: Doors, name: str) -> dict[str, str]:
    return {"host": f"{name}:{doors.server.ui_port}"}


def assert_refused_by_the_proxy(resp: httpx.Response, tried: str) -> None:
    assert resp.status_code == 400, f"{tried}: answered {resp.status_code} {resp.text}"
    assert resp.content == REFUSED, tried
    assert "set-cookie" not in resp.headers, f"{tried}: a cookie was handed out"


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:8233", "127.0.0.1", "127.0.0.1:8233",
                                  "[::1]", "[::1]:8233"])
def test_local_hosts_are_allowed(host: str) -> None:
    assert is_local(host)


@pytest.mark.parametrize("host", [None, "", "evil.example", "evil.example:8233",
                                  "localhost.evil.example", "127.0.0.1.nip.io:8233",
                                  "127.0.0.2:8233", "localhost:", "localhost:80:80",
                                  "localhost:x", "[::1]x", "[::1]:", "[::2]:8233", "0.0.0.0:8233"])
def test_other_hosts_are_not(host: str | None) -> None:
    assert not is_local(host)


async def test_the_ui_under_a_rebound_name_hands_out_no_csrf_cookie(doors: Doors) -> None:
    """Tried: what a rebinding page fetches first, its own name in Host: the UI's page
    (which set the readable ``_csrf`` cookie) and its settings."""
    assert doors.server.ui_url is not None
    async with httpx.AsyncClient() as http:
        for path in ("/", "/api/v1/settings", "/api/v1/namespaces"):
            resp = await http.get(doors.server.ui_url + path,
                                  headers=ui_host(doors, "evil.example"))
            assert_refused_by_the_proxy(resp, f"GET {path} under a rebound name")
        assert not http.cookies


async def test_the_ui_works_through_the_proxy(doors: Doors) -> None:
    """Its page, its settings and its API (which needs gRPC behind it) under 127.0.0.1,
    with the CSRF cookie the UI hands out there, Set-Cookie headers and all."""
    assert doors.server.ui_url is not None
    async with httpx.AsyncClient() as http:
        page = await http.get(doors.server.ui_url + "/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "<html" in page.text
        assert http.cookies.get("_csrf")
        settings = await http.get(doors.server.ui_url + "/api/v1/settings")
        assert settings.status_code == 200
        assert "Version" in settings.json()
        listed = await http.get(doors.server.ui_url + "/api/v1/namespaces",
                                headers={"accept-encoding": "gzip"})
        assert listed.status_code == 200
        assert listed.headers["content-encoding"] == "gzip"  # passed through as it came
        names = [n["namespaceInfo"]["name"] for n in listed.json()["namespaces"]]
        assert "default" in names


async def test_every_request_on_a_connection_is_checked(doors: Doors) -> None:
    """Tried: a first request under 127.0.0.1, then one under a rebound name on the same
    kept-alive connection."""
    assert doors.server.ui_url is not None
    answers, ends = [], []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=1)) as http:
        for name in ("127.0.0.1", "evil.example", "localhost"):
            resp = await http.get(doors.server.ui_url + "/api/v1/settings",
                                  headers=ui_host(doors, name))
            answers.append(resp)
            ends.append(resp.extensions["network_stream"].get_extra_info("client_addr"))
    first, second, third = answers
    assert first.status_code == 200 and third.status_code == 200
    assert_refused_by_the_proxy(second, "the second request of a connection, rebound")
    assert ends[0] == ends[1] == ends[2], "the requests did not share a connection"


def ui_start(workflow_id: str, task_queue: str, cwd: Path) -> str:
    """The issue's start as the UI's API takes it (its input as Temporal payloads)."""
    start = json.loads(the_issues_start(workflow_id, cwd))
    data = json.dumps(start.pop("input")[0]).encode()
    start["input"] = {"payloads": [{"metadata": {"encoding": b64("json/plain")},
                                    "data": b64(data)}]}
    start["taskQueue"] = {"name": task_queue}
    return json.dumps(start)


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


async def test_a_rebinding_page_cannot_start_a_workflow_through_the_ui(
        doors: Doors, tmp_path: Path) -> None:
    """Tried: the replay of the rebinding start that went through before the proxy: a
    JSON POST to the UI's API with its CSRF cookie and the X-CSRF-TOKEN header, under a
    rebound name. The cookie is taken from 127.0.0.1 (a page could not even get one).
    The same request under 127.0.0.1 starts the workflow: the replay is a real one."""
    assert doors.server.ui_url is not None
    refused, allowed = f"doors-{uuid.uuid4().hex[:8]}", f"doors-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient() as http:
        await http.get(doors.server.ui_url + "/")
        token = http.cookies["_csrf"]
        url = f"{doors.server.ui_url}/api/v1/namespaces/default/workflows"
        headers = {"content-type": "application/json", "x-csrf-token": token}
        rebound = await http.post(
            f"{url}/{refused}", content=ui_start(refused, TASK_QUEUE, tmp_path),
            headers={**headers, **ui_host(doors, "evil.example"),
                     "origin": f"http://evil.example:{doors.server.ui_port}"})
        local = await http.post(f"{url}/{allowed}", headers=headers,
                                content=ui_start(allowed, "nobody-polls", tmp_path))
    assert_refused_by_the_proxy(rebound, "StartWorkflowExecution through the UI, rebound")
    await assert_not_started(doors.client, refused)
    assert not (tmp_path / "pwned.txt").exists()
    assert local.status_code == 200, local.text
    described = await doors.client.get_workflow_handle(allowed).describe()
    assert described.task_queue == "nobody-polls"


# ---------------------------------------------------------------------------
# The proxy against an upstream of the test's own: what the UI may need of it


@dataclass
class Upstream:
    proxy: str
    release: asyncio.Event  # lets the streamed answer's second half go
    gone: asyncio.Event  # the upstream saw the proxy go away mid-answer


async def upstream_app(state: Upstream, scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"].startswith("/echo"):  # what arrived, as it arrived
        seen = {"method": scope["method"], "target": scope["raw_path"].decode()
                + "?" + scope["query_string"].decode(), "body": body.decode(),
                "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]]}
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"set-cookie", b"a=1"), (b"set-cookie", b"b=2"),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(seen).encode()})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
    if scope["path"] == "/forever":  # until the other side goes away
        while (await receive())["type"] != "http.disconnect":
            pass
        state.gone.set()
        return
    await state.release.wait()
    await send({"type": "http.response.body", "body": b"data: second\n\n"})


class UpstreamServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGINT/SIGTERM stay pytest's


@pytest.fixture
async def upstream(free_port: Callable[[], int]) -> AsyncIterator[Upstream]:
    port = free_port()
    state = Upstream("", asyncio.Event(), asyncio.Event())
    app = functools.partial(upstream_app, state)
    server = UpstreamServer(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           interface="asgi3", log_config=None,
                                           timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve())
    proxy = UiProxyServer("127.0.0.1", free_port(), f"http://127.0.0.1:{port}")
    await proxy.start()
    state.proxy = f"http://127.0.0.1:{proxy.port}"
    try:
        yield state
    finally:
        state.release.set()
        await proxy.stop()
        server.should_exit = True
        await task


async def test_the_proxy_forwards_requests_unchanged(upstream: Upstream) -> None:
    """Method, path and query as sent, headers (Host, cookies, the CSRF header) and a
    streamed (chunked) body; repeated Set-Cookie headers come back, all of them."""
    async def body() -> AsyncIterator[bytes]:
        yield b"part one, "
        yield b"part two"

    async with httpx.AsyncClient() as http:
        resp = await http.request(
            "PATCH", upstream.proxy + "/echo%2Fx?q=a%20b&q=2", content=body(),
            headers={"x-csrf-token": "t", "cookie": "_csrf=t", "host": "localhost:1"})
    assert resp.status_code == 201
    assert resp.headers.get_list("set-cookie") == ["a=1", "b=2"]
    seen = resp.json()
    assert seen["method"] == "PATCH"
    assert seen["target"] == "/echo%2Fx?q=a%20b&q=2"
    assert seen["body"] == "part one, part two"
    headers = dict(seen["headers"])
    assert headers["host"] == "localhost:1"
    assert headers["x-csrf-token"] == "t" and headers["cookie"] == "_csrf=t"


async def test_the_proxy_streams_an_answer_as_it_comes(upstream: Upstream) -> None:
    """The first event reaches the client while the upstream still holds the second."""
    async with httpx.AsyncClient() as http, http.stream("GET", upstream.proxy + "/stream") as resp:
        assert resp.headers["content-type"] == "text/event-stream"
        lines = resp.aiter_lines()
        assert await asyncio.wait_for(anext(lines), 30) == "data: first"
        upstream.release.set()
        rest = [line async for line in lines if line]
    assert rest == ["data: second"]


async def test_the_proxy_lets_go_of_an_answer_the_client_left(upstream: Upstream) -> None:
    """A client that leaves a long answer: the upstream sees the proxy leave too."""
    async with httpx.AsyncClient() as http, http.stream("GET", upstream.proxy + "/forever") as resp:
        assert await anext(resp.aiter_lines()) == "data: first"
    await asyncio.wait_for(upstream.gone.wait(), 30)


async def test_the_proxy_refuses_before_forwarding(upstream: Upstream) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.post(upstream.proxy + "/echo", content=b"x",
                               headers={"host": "evil.example"})
    assert_refused_by_the_proxy(resp, "a POST under a foreign name")
