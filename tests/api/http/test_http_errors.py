"""Broken input on every input path: always the one error shape, always a 4xx."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import httpx
import pytest

from api.http.app import create_app
from api.http.deps import ApiTuning
from tests.api.http_support import (
    AUTH,
    HttpStack,
    confirm_body,
    error_of,
    serve,
    session_until,
    waiting,
)

BAD_IDS = ["..", "../x", "..%2Fx", "%2e%2e", "a b", "a.b", "-x", "_x", "x" * 129, "é", "x%00",
           "%2Fetc%2Fpasswd", "x;y", "x'y", 'x"y', "x\\y"]
POSTS = ["reply", "messages", "end", "cancel", "steps/0/approve"]


async def test_bad_session_ids_never_reach_temporal(http_stack: HttpStack):
    http = http_stack.http
    for bad in BAD_IDS:
        for method, path in [("GET", f"/api/sessions/{bad}"),
                             ("GET", f"/api/sessions/{bad}/events"),
                             ("GET", f"/api/execution/{bad}/timeline"),
                             *[("POST", f"/api/sessions/{bad}/{p}") for p in POSTS]]:
            r = await http.request(method, path, json={"request_id": "r", "text": "t"})
            assert r.status_code in (404, 405, 422), (path, r.status_code, r.text)
            error_of(r)
    for bad in ["../x", "a b", "a.b", "x" * 129]:
        r = await http.post("/api/sessions", params={"session_id": bad}, json=confirm_body())
        assert r.status_code == 422, (bad, r.text)
        assert "session_id" in error_of(r)["message"]


async def test_broken_bodies(http_stack: HttpStack):
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    s = await session_until(http, sid, waiting("confirm"))
    rid = s["pending"]["request_id"]
    cases: list[tuple[str, str, bytes | None, dict | None, int, str]] = [
        ("POST", "/api/sessions", b"{not json", None, 400, "invalid_json"),
        ("POST", "/api/sessions", b"", None, 422, "validation_error"),
        ("POST", "/api/sessions", b"[]", None, 422, "validation_error"),
        ("POST", "/api/sessions", b'"text"', None, 422, "validation_error"),
        ("POST", "/api/sessions", None, {"mode": "sometimes"}, 422, "validation_error"),
        ("POST", "/api/sessions", None, {**confirm_body(), "surprise": 1}, 422,
         "validation_error"),
        ("POST", "/api/sessions", None, {"mode": "auto"}, 422, "validation_error"),  # no driver
        ("POST", "/api/sessions", None, {**confirm_body(), "reply_timeout_s": "soon"}, 422,
         "validation_error"),
        # Scripted branches: an alternative needs `when`, with a known outcome.
        ("POST", "/api/sessions", None, confirm_body({"text": "a", "alternatives": [
            {"text": "b"}]}), 422, "validation_error"),
        ("POST", "/api/sessions", None, confirm_body({"text": "a", "alternatives": [
            {"when": {"previous": "perhaps"}, "text": "b"}]}), 422, "validation_error"),
        ("POST", f"/api/sessions/{sid}/reply", b"{", None, 400, "invalid_json"),
        ("POST", f"/api/sessions/{sid}/reply", None, {}, 422, "validation_error"),
        ("POST", f"/api/sessions/{sid}/reply", None, {"request_id": rid, "approve": "maybe"},
         422, "validation_error"),
        ("POST", f"/api/sessions/{sid}/reply", None, {"request_id": rid, "extra": True}, 422,
         "validation_error"),
        ("POST", f"/api/sessions/{sid}/reply", None, {"request_id": 7}, 422, "validation_error"),
        ("POST", f"/api/sessions/{sid}/reply", None, {"request_id": ""}, 422,
         "validation_error"),
        ("POST", f"/api/sessions/{sid}/messages", None, {"text": ""}, 422, "validation_error"),
        ("POST", f"/api/sessions/{sid}/messages", None, {"text": ["a"]}, 422,
         "validation_error"),
        ("POST", f"/api/sessions/{sid}/end", None, {"by": ""}, 422, "validation_error"),
        ("POST", f"/api/sessions/{sid}/steps/-1/skip", None, {}, 422, "validation_error"),
        ("POST", f"/api/sessions/{sid}/steps/x/skip", None, {}, 422, "validation_error"),
        ("GET", "/api/sessions?limit=0", None, None, 422, "validation_error"),
        ("GET", "/api/sessions?limit=lots", None, None, 422, "validation_error"),
        ("DELETE", f"/api/sessions/{sid}", None, None, 405, "method_not_allowed"),
        ("PUT", "/api/sessions", None, None, 405, "method_not_allowed"),
    ]
    for method, path, content, body, status, code in cases:
        headers = {"content-type": "application/json"} if content is not None else {}
        r = await http.request(method, path, content=content, json=body, headers=headers)
        assert r.status_code == status, (method, path, content, body, r.text)
        assert error_of(r)["code"] == code, (path, r.text)
    # None of it touched the session.
    after = (await http.get(f"/api/sessions/{sid}")).json()
    assert after["pending"] == s["pending"] and after["replies"] == 0
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_a_lone_surrogate_is_refused_on_every_text_input(http_stack: HttpStack):
    """A JSON ``\\ud800`` escape without its pair is not Unicode: 422 on every input
    path (before: 500 for a new session's config and a reply's values), and nothing
    reaches Temporal (the audit log could not hold it; see observation/exporter/README)."""
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    s = await session_until(http, sid, waiting("confirm"))
    rid = s["pending"]["request_id"].encode()
    new = f"s-surrogate-{sid[-8:]}"
    cases = [
        (f"/api/sessions?session_id={new}",
         b'{"initial_message": "hi \\ud800", "mode": "auto", "agent": {"llm": {"provider": '
         b'"scripted", "responses": [{"text": "bye", "end": true}]}}}'),
        (f"/api/sessions?session_id={new}",
         b'{"initial_message": "hi", "mode": "auto", "agent": {"llm": {"provider": "scripted",'
         b' "responses": [{"tool_calls": [{"tool": "t", "arguments": {"\\udc00": 1}}]}]}}}'),
        (f"/api/sessions/{sid}/reply",
         b'{"request_id": "' + rid + b'", "approve": true, "values": {"k": "\\ud800"}}'),
        (f"/api/sessions/{sid}/reply", b'{"request_id": "' + rid + b'", "comment": "\\ud800"}'),
        (f"/api/sessions/{sid}/messages", b'{"text": "a\\udc00"}'),
        (f"/api/sessions/{sid}/end", b'{"reason": "\\ud800"}'),
    ]
    for path, body in cases:
        r = await http.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, (path, body, r.text)
        assert error_of(r)["code"] == "validation_error", r.text
    assert (await http.get(f"/api/sessions/{new}")).status_code == 404
    after = (await http.get(f"/api/sessions/{sid}")).json()
    assert after["pending"] == s["pending"] and after["replies"] == 0
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_oversized_bodies_are_413(http_stack: HttpStack):
    http = http_stack.http
    big = b'{"text": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    r = await http.post("/api/sessions/abc/messages", content=big,
                        headers={"content-type": "application/json"})
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        yield b'{"text": "'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"}'

    r = await http.post("/api/sessions", content=chunks(),
                        headers={"content-type": "application/json"})
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"
    r = await http.post("/api/sessions/abc/cancel", content=big,  # a route without a body
                        headers={"content-type": "application/json"})
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"


@pytest.fixture(scope="module")
async def guarded(http_stack: HttpStack, free_port) -> AsyncIterator[httpx.AsyncClient]:
    settings = http_stack.settings.model_copy(update={"api_token": "s3cret-token"})
    async with serve(create_app(settings), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield http


async def test_bearer_token_guards_everything_but_healthz(guarded: httpx.AsyncClient):
    r = await guarded.get("/healthz")
    assert r.status_code == 200
    paths = [("GET", "/api/sessions"), ("GET", "/api/sessions/abc"),
             ("POST", "/api/sessions"), ("POST", "/api/sessions/abc/reply"),
             ("GET", "/api/sessions/abc/events"), ("GET", "/api/execution/topology"),
             ("GET", "/api/execution/abc/timeline"), ("GET", "/api/execution/a.b/snapshot"),
             ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/nowhere")]
    for (method, path), auth in itertools.product(
            paths, [None, "Bearer wrong", "Basic czNjcmV0LXRva2Vu", "Bearer", "s3cret-token",
                    "Bearer s3cret-token-and-more"]):
        headers = {"content-type": "application/json", **({"authorization": auth} if auth
                                                           else {})}
        r = await guarded.request(method, path, headers=headers, content=b"{not json")
        assert r.status_code == 401, (method, path, auth, r.text)
        assert error_of(r)["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
    ok = {"authorization": "Bearer s3cret-token"}
    assert (await guarded.get("/api/execution/topology", headers=ok)).status_code == 200
    assert (await guarded.get("/api/sessions", headers=ok)).status_code == 200
    schema = (await guarded.get("/openapi.json", headers=ok)).json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "security" not in schema["paths"]["/healthz"]["get"]


async def test_no_input_ever_produces_a_5xx(http_stack: HttpStack, free_port):
    """A sweep over every route with junk in every place; a working worker behind it."""
    app = create_app(http_stack.settings, http_stack.client,
                     tuning=ApiTuning(query_timeout_s=5, update_timeout_s=5))
    junk_ids = ["abc", "a.b", "..", "%00", "x" * 300, "ünï", "1", "null"]
    bodies: list[bytes | None] = [None, b"", b"{}", b"null", b"[]", b"{bad", b'{"a":1}',
                                  b'{"request_id":"x","approve":true}', b'{"text":"hi"}',
                                  b"\xff\xfe", b'{"mode":"auto","agent":{"llm":{}}}']
    async with serve(app, free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
        routes = [(m, p.format(id=i)) for i in junk_ids for m, p in [
            ("GET", "/api/sessions/{id}"), ("POST", "/api/sessions/{id}/reply"),
            ("POST", "/api/sessions/{id}/messages"), ("POST", "/api/sessions/{id}/end"),
            ("POST", "/api/sessions/{id}/cancel"), ("POST", "/api/sessions/{id}/steps/0/reset"),
            ("POST", "/api/sessions/{id}/steps/99999999999999999999/reset"),
            ("GET", "/api/execution/{id}/timeline"), ("GET", "/api/execution/{id}/snapshot"),
            ("GET", "/api/sessions?status={id}&limit={id}&page_token={id}"),
        ]] + [("POST", "/api/sessions"), ("GET", "/api/execution/topology"),
              ("PATCH", "/api/sessions"), ("GET", "/healthz")]
        for (method, path), body in itertools.product(routes, bodies):
            r = await http.request(method, path, content=body,
                                   headers={"content-type": "application/json"})
            assert r.status_code < 500, (method, path, body, r.status_code, r.text)
            if r.status_code >= 400:
                error_of(r)
        for header in ["abc", "-1", "1e9", "99999999999999999999999", "1 2"]:
            r = await http.get("/api/sessions/abc/events", headers={"Last-Event-ID": header})
            assert r.status_code in (400, 404), (header, r.text)
            error_of(r)


async def test_a_405_allows_every_method_of_the_path(http_stack: HttpStack):
    """`Allow` names every method some route takes at the path (not only the first
    route's); OPTIONS answers 204 with it."""
    http = http_stack.http
    cases = [
        ("/api/sessions", "GET, OPTIONS, POST", ["DELETE", "PUT", "PATCH"]),
        ("/api/sessions/s-x", "GET, OPTIONS", ["POST", "DELETE"]),
        ("/api/sessions/s-x/reply", "OPTIONS, POST", ["GET", "PUT"]),
        ("/api/sessions/s-x/steps/0/approve", "OPTIONS, POST", ["GET"]),
        ("/api/sessions/s-x/events", "GET, OPTIONS", ["POST"]),
        ("/api/execution/topology", "GET, OPTIONS", ["PATCH"]),
        ("/healthz", "GET, OPTIONS", ["POST"]),
        ("/openapi.json", "GET, HEAD, OPTIONS", ["POST"]),
    ]
    for path, allow, refused in cases:
        r = await http.options(path)
        assert (r.status_code, r.headers.get("allow"), r.content) == (204, allow, b""), path
        for method in refused:
            r = await http.request(method, path)
            assert r.status_code == 405, (method, path, r.text)
            assert r.headers["allow"] == allow, (method, path)
            err = error_of(r)
            assert err["code"] == "method_not_allowed" and allow in err["message"], err
    r = await http.options("/api/no-such-path")
    assert r.status_code == 404 and "allow" not in r.headers
