"""The HTTP API's doors, tried from outside as issue 25 found them open: a DNS-rebinding
page's Host, form, text and empty POSTs that a browser sends to any site, requests
without a token, an API started without one, a page of another origin in Chromium
(docs/security.md, "The HTTP API"). Each test says what it tried, and asserts that the
door refused it and that nothing changed: a plan session still waits at its gate, with
the same request, still running, no cancel requested; no session was started.

The routes tried are enumerated from the app: a new route is tried as soon as it exists.
"""

from __future__ import annotations

import asyncio
import json
import re
import stat
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from api.http.app import create_app
from api.http.doors import OPEN_PATHS, STATE_CHANGING
from tests.api.cli.test_cli_stack import cli, cli_env, run_cli
from tests.api.http_support import (
    HttpStack,
    error_of,
    running_stack,
    serve,
    session_until,
    stack_settings,
    waiting,
)
from tests.support.browser_origin import FORM, TEXT, Attempt, chromium_path, described, foreign_page

TOKEN = "doors-s3cret-token"
#: A plan of two gates: approving the first moves it on, so any change shows.
GATES = {"plan": {"name": "doors", "steps": [{"name": "go / no-go", "gate": True},
                                             {"name": "then", "gate": True}]}}
#: How the test fills each path parameter (a route with another one fails the test
#: until it says how to fill it here).
PATH_VALUES = {"index": ["0"], "action": ["approve", "skip", "reset"], "name": ["inbox.js"],
               "standing_id": ["sd-x"], "message_id": ["msg_x"]}
#: Bodies a browser sends to another origin without asking it first.
NOT_JSON = [("an empty POST (no Content-Type)", None, None),
            ("a form POST", FORM, "request_id=x&approve=true"),
            ("a text/plain POST of JSON", TEXT, None)]  # None: the route's JSON, as text


class Recorder:
    """Every request an app answered: (method, path, query, status)."""

    def __init__(self, app: ASGIApp, seen: list[tuple[str, str, str, int]]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.seen.append((scope["method"], scope["path"],
                                  scope["query_string"].decode(), message["status"]))
            await send(message)

        await self.app(scope, receive, sending)


@dataclass
class Doors:
    guarded: HttpStack  # the API with a token (its client sends it)
    open_url: str  # an API on the same sessions with HITLFLOW_API_AUTH=off
    seen: list[tuple[str, str, str, int]]  # what either API answered
    routes: list[tuple[str, str]]  # (method, path template) of every route


@pytest.fixture(scope="module")
async def doors(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Doors]:
    settings = stack_settings(dev_env.client, tmp_path_factory.mktemp("doors-data"), "doors",
                              TOKEN)
    seen: list[tuple[str, str, str, int]] = []
    guarded = create_app(settings)
    guarded.add_middleware(Recorder, seen=seen)
    unguarded = create_app(settings.model_copy(update={"api_token": None, "api_auth": "off"}))
    unguarded.add_middleware(Recorder, seen=seen)
    routes = [(method, route.path) for route in iter_route_contexts(guarded.routes)
              for method in sorted(getattr(route, "methods", None) or ())]
    async with running_stack(dev_env.client, settings, free_port(), app=guarded) as stack, \
            serve(unguarded, free_port()) as open_server:
        yield Doors(stack, open_server.url, seen, routes)


def filled(template: str, sid: str) -> Iterator[str]:
    """Every path of ``template`` with the session ``sid``."""
    names = re.findall(r"{(\w+)(?::\w+)?}", template)
    values = {**PATH_VALUES, "session_id": [sid], "execution_id": [f"{sid}.0"]}
    missing = set(names) - set(values)
    assert not missing, f"a new route {template}: say in PATH_VALUES how to fill {missing}"
    for chosen in product(*(values[n] for n in names)):
        given = dict(zip(names, chosen, strict=True))
        yield re.sub(r"{(\w+)(?::\w+)?}", lambda m, given=given: given[m.group(1)], template)


async def gate_session(doors: Doors) -> tuple[str, dict]:
    """A plan session waiting at its first gate, and how it looks then."""
    http = doors.guarded.http
    r = await http.post("/api/sessions", json=GATES)
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    return sid, await session_until(http, sid, waiting("step"), consistency="live")


async def assert_unchanged(doors: Doors, sid: str, before: dict, *absent: str) -> None:
    """The session still waits at the same gate, running, with no cancel requested,
    and none of the ``absent`` sessions exists (read live, from the workflow)."""
    http = doors.guarded.http
    now = (await http.get(f"/api/sessions/{sid}", params={"consistency": "live"})).json()
    assert now["status"] == "waiting_user", now
    assert now["pending"]["request_id"] == before["pending"]["request_id"], now
    assert now["replies"] == before["replies"], now
    desc = await doors.guarded.client.get_workflow_handle(sid).describe()
    assert desc.status == WorkflowExecutionStatus.RUNNING
    assert not desc.raw_description.workflow_extended_info.cancel_requested
    for other in absent:
        r = await http.get(f"/api/sessions/{other}", params={"consistency": "live"})
        assert r.status_code == 404, (other, r.text)


def json_of(path: str, sid: str, rid: str) -> str:
    """What the route would take as JSON: a config, a reply, a message, or nothing."""
    if path == "/api/sessions":
        return json.dumps(GATES)
    if path.endswith("/reply"):
        return json.dumps({"request_id": rid, "approve": True})
    if path.endswith("/messages"):
        return json.dumps({"text": "hi"})
    return "{}"


async def test_a_rebinding_page_s_host_is_refused_before_anything_runs(doors: Doors):
    """Tried: the requests of a page whose own name (evil.example) now resolves to
    127.0.0.1 (DNS rebinding): its Host header names it, with and without a port,
    with and without the token: read the list, start a session, cancel one."""
    sid, before = await gate_session(doors)
    new = f"rebound-{uuid.uuid4().hex[:8]}"
    port = doors.guarded.url.rsplit(":", 1)[1]
    for host, base, auth in product(
            ["evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}",
             f"localhost.evil.example:{port}"],
            [doors.guarded.url, doors.open_url], [{"authorization": f"Bearer {TOKEN}"}, {}]):
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=auth) as http:
            for method, path, body in [
                    ("GET", "/api/sessions", None), ("GET", "/healthz", None), ("GET", "/", None),
                    ("POST", f"/api/sessions?session_id={new}", GATES),
                    ("POST", f"/api/sessions/{sid}/cancel", {}),
                    ("POST", f"/api/sessions/{sid}/steps/0/approve", {})]:
                r = await http.request(method, path, json=body, headers={"host": host})
                assert r.status_code == 400, (host, method, path, r.text)
                error = error_of(r)
                assert error["code"] == "host_not_allowed", error
                assert "HITLFLOW_API_ALLOWED_HOSTS" in error["message"], error
    await assert_unchanged(doors, sid, before, new)
    # The names of this machine are served (any port): the door, not the server, refused.
    for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        r = await doors.guarded.http.get("/api/sessions", headers={"host": host})
        assert r.status_code == 200, (host, r.text)


async def test_every_state_changing_route_takes_only_json(doors: Doors):
    """Tried: on every route that may change something (enumerated from the app), what a
    browser sends to another site without asking: an empty POST, a form, JSON sent as
    text/plain; with the token, without it, and on an API with authentication off."""
    sid, before = await gate_session(doors)
    rid, new = before["pending"]["request_id"], f"formed-{uuid.uuid4().hex[:8]}"
    changing = [(m, p) for m, p in doors.routes if m in STATE_CHANGING]
    assert ("POST", "/api/sessions/{session_id}/cancel") in changing and len(changing) >= 6
    tried = 0
    for (method, template), (what, media, body), (base, token) in product(
            changing, NOT_JSON, [(doors.guarded.url, TOKEN), (doors.guarded.url, None),
                                 (doors.open_url, None)]):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            for path in filled(template, sid):
                headers = {**({"content-type": media} if media else {}),
                           **({"authorization": f"Bearer {token}"} if token else {})}
                content = body if media != TEXT else json_of(template, sid, rid)
                r = await http.request(method, path, params={"session_id": new},
                                       content=content, headers=headers)
                assert r.status_code == 415, (what, method, path, token, r.text)
                error = error_of(r)
                assert error["code"] == "unsupported_media_type", error
                assert "application/json" in error["message"], error
                tried += 1
    assert tried >= len(changing) * len(NOT_JSON) * 3
    await assert_unchanged(doors, sid, before, new)
    # The same approve as JSON with the token goes through: the door refused the others.
    r = await doors.guarded.http.post(f"/api/sessions/{sid}/steps/0/approve", json={})
    assert r.status_code == 202, r.text


#: The action links' open routes (api.http.routers.act): the signed token is the credential.
ACTION_LINKS = {"/act", "/act.js", "/api/act/inspect", "/api/act/decide"}


async def test_without_the_token_only_healthz_and_the_inbox_files_answer(doors: Doors):
    """Tried: every route of the app (the docs /docs, /redoc, /openapi.json included),
    every method it takes, as JSON, with no token and with wrong ones."""
    sid, before = await gate_session(doors)
    new = f"tokenless-{uuid.uuid4().hex[:8]}"
    open_routes = {p for _, p in doors.routes
                   if any(path in OPEN_PATHS for path in filled(p, sid))}
    # and nothing else (/api/auth/config: how to sign in, no data; the OIDC code
    # exchange, which turns a provider's code into the provider's token)
    assert open_routes == {"/healthz", "/", "/inbox/{name}", "/api/auth/config",
                           "/api/auth/oidc/token", *ACTION_LINKS}
    assert {"/docs", "/redoc", "/openapi.json"} <= {p for _, p in doors.routes}
    async with httpx.AsyncClient(base_url=doors.guarded.url, timeout=30) as http:
        for (method, template), auth in product(
                [(m, p) for m, p in doors.routes if m not in ("HEAD", "OPTIONS")],
                [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", TOKEN]):
            for path in filled(template, sid):
                headers = {"content-type": "application/json",
                           **({"authorization": auth} if auth else {})}
                r = await http.request(method, path, params={"session_id": new},
                                       content=json_of(template, sid, "r")
                                       if method in STATE_CHANGING else None, headers=headers)
                if template == "/api/auth/oidc/token":  # open, and here not in oidc mode
                    assert r.status_code == 404, (method, path, r.text)
                    assert error_of(r)["code"] == "oidc_not_configured"
                    continue
                if template in ("/api/act/inspect", "/api/act/decide"):  # the token is
                    assert r.status_code == 422, (method, path, r.text)  # the credential
                    assert error_of(r)["code"] == "validation_error"
                    continue
                if template in open_routes:
                    assert r.status_code == 200, (method, path, r.text)
                    continue
                assert r.status_code == 401, (method, path, auth, r.text)
                assert error_of(r)["code"] == "unauthorized"
    await assert_unchanged(doors, sid, before, new)


@pytest.mark.browser
async def test_a_page_of_another_origin_changes_nothing(doors: Doors,
                                                        free_port: Callable[[], int]):
    """Tried, from a page served on another 127.0.0.1 port in Chromium, against the API
    with a token and the API with authentication off: start a session, approve the
    gate, cancel, end and reply with simple requests (empty, form, text/plain), then a
    JSON approve and a JSON start with a guessed token (preflighted), and a read."""
    sid, before = await gate_session(doors)
    rid, new = before["pending"]["request_id"], f"foreign-{uuid.uuid4().hex[:8]}"
    at = f"/api/sessions/{sid}"
    attempts = [Attempt(f"{what} on {name}", f"{base}{path}", content_type=media, body=body)
                for base, name in [(doors.guarded.url, "the guarded API"),
                                   (doors.open_url, "the API without authentication")]
                for what, path, media, body in [
                    ("start (text/plain)", f"/api/sessions?session_id={new}", TEXT,
                     json.dumps(GATES)),
                    ("start (form)", f"/api/sessions?session_id={new}", FORM, "plan=x"),
                    ("approve the gate (empty)", f"{at}/steps/0/approve", None, None),
                    ("approve the gate (text/plain)", f"{at}/steps/0/approve", TEXT, "{}"),
                    ("cancel (empty)", f"{at}/cancel", None, None),
                    ("cancel (form)", f"{at}/cancel", FORM, "x=1"),
                    ("end (empty)", f"{at}/end", None, None),
                    ("reply (text/plain)", f"{at}/reply", TEXT,
                     json.dumps({"request_id": rid, "approve": True}))]]
    preflighted = [Attempt(f"{what} on {base}", f"{base}{path}", content_type="application/json",
                           body=body, headers=headers, mode="cors")
                   for base in (doors.guarded.url, doors.open_url)
                   for what, path, body, headers in [
                       ("approve the gate (JSON)", f"{at}/steps/0/approve", "{}", {}),
                       ("start (JSON, a guessed token)", f"/api/sessions?session_id={new}",
                        json.dumps(GATES), {"Authorization": "Bearer guess"})]]
    reads = [Attempt(f"read the sessions of {base}", f"{base}/api/sessions", method="GET",
                     mode="cors") for base in (doors.guarded.url, doors.open_url)]
    doors.seen.clear()
    async with foreign_page(free_port()) as page:
        outcomes = await page.attempt(*attempts, *preflighted, *reads)
    report = described(outcomes)
    simple, asked, read = (outcomes[:len(attempts)],
                           outcomes[len(attempts):len(attempts) + len(preflighted)],
                           outcomes[len(attempts) + len(preflighted):])
    # The simple requests left the browser and reached the API; the page saw no answer.
    assert all(o.sent and not o.readable for o in simple), report
    posts = [status for method, _, _, status in doors.seen if method == "POST"]
    assert len(posts) == len(attempts) and set(posts) == {415}, (doors.seen, report)
    # The preflighted ones never got past the browser's question; the reads were unreadable.
    assert all(not o.sent and o.error for o in asked + read), report
    assert {m for m, _, _, _ in doors.seen} == {"POST", "OPTIONS", "GET"}, doors.seen
    await assert_unchanged(doors, sid, before, new)


@pytest.mark.browser
async def test_the_sign_in_link_s_token_stays_in_the_browser(doors: Doors):
    """Tried: the inbox's sign-in link (`up` prints it): the page signs in with the
    token of its fragment, removes it from the address bar, and no request carries it
    in a URL."""
    from playwright.async_api import async_playwright, expect

    doors.seen.clear()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path())
        try:
            page = await browser.new_page()
            await page.goto(f"{doors.guarded.url}/#token={TOKEN}")
            await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible(
                timeout=30_000)
            assert page.url == f"{doors.guarded.url}/"
            assert await page.evaluate("sessionStorage.getItem('hitlflow.api_token')") == TOKEN
        finally:
            await browser.close()
    assert any(path == "/api/sessions" and status == 200 for _, path, _, status in doors.seen)
    assert not any(TOKEN in path + query for _, path, query, _ in doors.seen), doors.seen


@pytest.mark.browser
async def test_a_person_s_sign_in_link_signs_them_in_and_the_page_says_who(doors: Doors):
    """Tried: a person's sign-in link (#key=..., as `up` prints for its admin): the page
    signs in with the key, removes it from the address bar, names the person in its
    header, and no request carries the key in a URL."""
    from playwright.async_api import async_playwright, expect

    from api.identity.people_store import PeopleStore

    name = f"ada-{uuid.uuid4().hex[:6]}"
    key = PeopleStore(doors.guarded.settings.data_dir).add(name, "approver")
    doors.seen.clear()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path())
        try:
            page = await browser.new_page()
            await page.goto(f"{doors.guarded.url}/#key={key}")
            await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible(
                timeout=30_000)
            await expect(page.locator("#who")).to_have_text(f"signed in as {name} (approver)")
            assert page.url == f"{doors.guarded.url}/"
            await page.get_by_role("button", name="Sign out").click()
            await expect(page.get_by_label("Your key or the API token")).to_be_visible()
            await expect(page.locator("#who")).to_have_text("")
        finally:
            await browser.close()
    assert any(path == "/api/whoami" and status == 200 for _, path, _, status in doors.seen)
    assert not any(key in path + query for _, path, query, _ in doors.seen), doors.seen


# -- the processes -------------------------------------------------------------------------


async def test_up_makes_a_token_the_cli_finds_and_keeps_it(tmp_path: Path,
                                                           free_port: Callable[[], int]):
    """Tried: `up` with no token configured, three times: the first makes one (0600, in
    the data directory) and its first admin (key in cli-key, 0600), prints the inbox's
    sign-in link with the admin's key in the fragment, and `hitlflow session list` and
    `whoami` work with no flag (as the admin) while a request without a credential is
    refused; with HITLFLOW_API_AUTH=off it warns on stderr and leaves them be; the third
    start keeps them."""
    from api.cli.up import READY_LINE

    ports = [str(free_port()) for _ in range(3)]
    flags = ["--no-worker", "--temporal-port", ports[0], "--ui-port", ports[1],
             "--api-port", ports[2]]
    api, token_file = f"http://127.0.0.1:{ports[2]}", tmp_path / ".hitlflow" / "api-token"
    key_file = tmp_path / ".hitlflow" / "cli-key"

    async with cli(tmp_path, "up", *flags) as up:
        await up.wait_for_line(READY_LINE)
        token, key = token_file.read_text().strip(), key_file.read_text().strip()
        assert len(token) >= 40 and stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert key.startswith("hfk_") and stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert f"Inbox:             {api}/#key={key} " in "\n".join(up.stdout)
        assert "?token" not in "\n".join(up.stdout) and "?key" not in "\n".join(up.stdout)
        listed = await asyncio.to_thread(run_cli, tmp_path, "session", "list")
        assert listed.returncode == 0, (listed.stdout, listed.stderr)
        me = await asyncio.to_thread(run_cli, tmp_path, "whoami", "--json")
        assert me.returncode == 0, (me.stdout, me.stderr)
        assert json.loads(me.stdout)["subject"] == "admin"
        assert json.loads(me.stdout)["role"] == "admin"
        async with httpx.AsyncClient(base_url=api, timeout=30) as http:
            assert (await http.get("/api/sessions")).status_code == 401
            service = await http.get("/api/whoami", headers={"authorization": f"Bearer {token}"})
            assert service.json()["subject"] == "service:api-token"  # for automation
        assert await up.interrupt() == 0, up.stderr
    assert token not in up.stderr and key not in up.stderr
    for kept in (tmp_path / ".hitlflow").rglob("*"):  # logs, databases: never a secret
        assert kept in (token_file, key_file) or kept.is_dir() or (
            token.encode() not in kept.read_bytes() and key.encode() not in kept.read_bytes())

    async with cli(tmp_path, "up", *flags, env=cli_env(HITLFLOW_API_AUTH="off")) as up:
        await up.wait_for_line(READY_LINE)
        assert "WITHOUT AUTHENTICATION" in up.stderr
        assert "#token=" not in "\n".join(up.stdout) and "#key=" not in "\n".join(up.stdout)
        async with httpx.AsyncClient(base_url=api, timeout=30) as http:
            assert (await http.get("/api/sessions")).status_code == 200
        assert await up.interrupt() == 0, up.stderr

    async with cli(tmp_path, "up", *flags) as up:
        await up.wait_for_line(READY_LINE)
        assert f"{api}/#key={key} " in "\n".join(up.stdout)  # the same one
        assert token_file.read_text().strip() == token
        assert await up.interrupt() == 0, up.stderr


@pytest.mark.parametrize(("env", "said"), [
    ({}, "no token is set"),
    ({"HITLFLOW_API_TOKEN": ""}, "no token is set"),  # docker-compose's empty default
    ({"HITLFLOW_API_AUTH": "off", "HITLFLOW_API_TOKEN": "x" * 32}, "both set"),
    ({"HITLFLOW_AUTH_MODE": "proxy"}, "HITLFLOW_PROXY_TRUSTED_ADDRESSES"),
])
def test_a_standalone_api_without_a_token_refuses_to_start(
        tmp_path: Path, free_port: Callable[[], int], env: dict[str, str], said: str):
    """Tried: `hitlflow api` with nobody in people.json and no token, an empty token, a
    token and auth off, proxy mode with no trusted proxy."""
    from api.runtime.devserver import check_port_free

    port = free_port()
    r = run_cli(tmp_path, "api", "--port", str(port), **env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert said in r.stderr and "Traceback" not in r.stderr, r.stderr
    if said == "no token is set":  # the fixes: a person, a token, or auth off
        assert "hitlflow people add" in r.stderr and "HITLFLOW_API_TOKEN" in r.stderr
        assert "HITLFLOW_API_AUTH=off" in r.stderr
    check_port_free("127.0.0.1", port, "the API")  # it never listened
