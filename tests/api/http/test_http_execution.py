"""Seed 000's observation endpoints and /healthz over real HTTP."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from api.http.app import create_app
from api.settings import HitlflowSettings
from tests.api.http_support import (
    AUTH,
    TOKEN,
    HttpStack,
    chat_body,
    confirm_body,
    error_of,
    eventually,
    serve,
    session_until,
    waiting,
)
from workflows.tables import topology


async def test_topology_is_cacheable(http_stack: HttpStack):
    http = http_stack.http
    r = await http.get("/api/execution/topology")
    assert r.status_code == 200
    assert r.json() == topology("contract").model_dump(mode="json")
    nodes = {n["status"]: n for n in r.json()["nodes"]}
    assert set(nodes) == {"pending", "running", "waiting", "completed", "failed", "rejected",
                          "cancelled"}
    assert r.json()["resumable_statuses"] == ["waiting"]
    etag, cache = r.headers["etag"], r.headers["cache-control"]
    assert etag.startswith('"') and "max-age" in cache
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        r = await http.get("/api/execution/topology", headers={"If-None-Match": header})
        assert r.status_code == 304 and r.content == b""
        assert r.headers["etag"] == etag and r.headers["cache-control"] == cache
    r = await http.get("/api/execution/topology", headers={"If-None-Match": '"stale"'})
    assert r.status_code == 200 and r.headers["etag"] == etag


async def test_timeline_and_snapshot_of_a_waiting_session(http_stack: HttpStack):
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    s = await session_until(http, sid, waiting("confirm"))
    t = (await http.get(f"/api/execution/{sid}/timeline")).json()
    assert (t["session_id"], t["total_contracts"], t["active_contracts"]) == (sid, 1, 1)
    assert t["has_suspended"] is True
    assert [(tr["from_status"], tr["to_status"]) for tr in t["transitions"]] == [
        ("pending", "running"), ("running", "waiting")]
    eid = s["pending"]["execution_id"]
    snap = (await http.get(f"/api/execution/{eid}/snapshot")).json()
    assert snap["current_status"] == "waiting" and snap["is_resumable"] is True
    assert snap["is_stable"] is True and snap["last_trigger"] == "suspend"
    assert snap["transition_count"] == 2 and snap["session_id"] == sid
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_unknown_ids_are_404_with_a_message(http_stack: HttpStack):
    http = http_stack.http
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    for path, code in [
        (f"/api/execution/{ghost}/timeline", "session_not_found"),
        (f"/api/sessions/{ghost}", "session_not_found"),
        (f"/api/sessions/{ghost}/events", "session_not_found"),
        (f"/api/execution/{ghost}.abc123/snapshot", "execution_not_found"),
        ("/api/execution/no-dot-here/snapshot", "execution_not_found"),
        ("/api/execution/.x/snapshot", "execution_not_found"),
        ("/api/nothing/here", "not_found"),
    ]:
        r = await http.get(path)
        assert r.status_code == 404, (path, r.text)
        assert error_of(r)["code"] == code, path
    for action in ("reply", "messages", "end", "cancel", "steps/1/skip"):
        body = {"request_id": "r"} if action == "reply" else \
            {"text": "t"} if action == "messages" else {}
        r = await http.post(f"/api/sessions/{ghost}/{action}", json=body)
        assert r.status_code == 404, (action, r.text)
        assert error_of(r) == {"code": "session_not_found", "message": f"no session {ghost!r}"}
    # A real session, a contract it does not have.
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    await session_until(http, sid, waiting("confirm"))
    r = await http.get(f"/api/execution/{sid}.0000/snapshot")
    assert r.status_code == 404 and error_of(r)["message"] == f"no contract '{sid}.0000'"
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_healthz_says_whether_temporal_is_reachable(http_stack: HttpStack, free_port,
                                                          tmp_path):
    r = await http_stack.http.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["temporal"]["reachable"] is True
    # Temporal is down: the API still serves; it says so, and Temporal calls are 503.
    settings = HitlflowSettings(temporal_address=f"127.0.0.1:{free_port()}", api_token=TOKEN,
                                data_dir=tmp_path)
    async with serve(create_app(settings), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
        # The list comes from the read model: it needs no Temporal.
        r = await http.get("/api/sessions")
        assert r.status_code == 200 and r.json()["sessions"] == []
        r = await http.get("/healthz")
        assert r.status_code == 200
        health = r.json()["temporal"]
        assert health["reachable"] is False and health["target"] == settings.target
        assert "connect" in health["error"]
        for method, path in [("GET", "/api/sessions/abc"),
                             ("POST", "/api/sessions/abc/cancel"),
                             ("GET", "/api/execution/abc/timeline")]:
            r = await http.request(method, path, json={} if method == "POST" else None)
            assert r.status_code == 503, (path, r.text)
            assert error_of(r)["code"] == "temporal_unavailable"
        r = await http.post("/api/sessions", json=confirm_body())
        assert r.status_code == 503 and error_of(r)["code"] == "temporal_unavailable"
        # Topology needs no Temporal.
        assert (await http.get("/api/execution/topology")).status_code == 200


def _ms_since(entered: str, now: datetime) -> int:
    return int((now - datetime.fromisoformat(entered)).total_seconds() * 1000)


async def test_duration_of_a_waiting_contract_is_the_elapsed_time(http_stack: HttpStack):
    """Seed 000, snapshot of a WAITING contract: `duration_in_state_ms` is the time since
    it entered WAITING, by the reader's clock, wherever it is served (the read model and
    the live query, whose workflow.now() stands still while the workflow waits)."""
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    s = await session_until(http, sid, waiting("confirm"))
    eid = s["pending"]["execution_id"]
    entered = (await http.get(f"/api/execution/{eid}/snapshot",
                              params={"consistency": "live"})).json()["entered_state_at"]
    # A bounded wait for the clock to move well past the instant it entered WAITING.
    while _ms_since(entered, datetime.now(UTC)) < 300:
        await asyncio.sleep(0.05)

    def served(path: str, params: dict) -> Callable[[dict], list[dict]]:
        if path.endswith("/snapshot"):
            return lambda body: [body]
        return lambda body: [c for c in body["contracts"] if c["execution_id"] == eid]

    for consistency in ("read_model", "live"):
        for path in (f"/api/execution/{eid}/snapshot", f"/api/sessions/{sid}",
                     f"/api/execution/{sid}/timeline"):
            params = {"consistency": consistency}
            before = datetime.now(UTC)
            r = await http.get(path, params=params)
            after = datetime.now(UTC)
            assert r.status_code == 200, (path, r.text)
            [snap] = served(path, params)(r.json())
            assert snap["current_status"] == "waiting" and snap["entered_state_at"] == entered
            low, high = _ms_since(entered, before), _ms_since(entered, after)
            assert low - 1 <= snap["duration_in_state_ms"] <= high + 1, (path, consistency,
                                                                          low, snap, high)
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_timeline_of_a_session_without_execution_data_is_404(http_stack: HttpStack):
    """Seed 000, query for non-existent session: a session with no execution data is a
    404 with an error message (an unknown session stays `session_not_found`)."""
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=chat_body())).json()["session_id"]
    s = await session_until(http, sid, lambda s: s["status"] == "waiting_user")
    assert s["contracts_total"] == 0
    for consistency in ("read_model", "live"):
        r = await http.get(f"/api/execution/{sid}/timeline", params={"consistency": consistency})
        assert r.status_code == 404, (consistency, r.text)
        err = error_of(r)
        assert err["code"] == "execution_data_not_found" and sid in err["message"]
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_has_suspended_stays_true_after_the_suspended_contract_ended(
        http_stack: HttpStack):
    """Seed 000's has_suspended (some contract was suspended), not "still waiting":
    true for a finished session whose contract waited for the person."""
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    s = await session_until(http, sid, waiting("confirm"))
    r = await http.post(f"/api/sessions/{sid}/reply",
                        json={"request_id": s["pending"]["request_id"], "approve": True})
    assert r.status_code == 202, r.text
    await session_until(http, sid, lambda s: s["status"] == "succeeded")

    async def timeline() -> dict:
        return (await http.get(f"/api/execution/{sid}/timeline")).json()
    t = await eventually(timeline, lambda t: t.get("active_contracts") == 0)
    assert t["terminal_contracts"] == t["total_contracts"] >= 1
    assert t["has_suspended"] is True
    live = (await http.get(f"/api/execution/{sid}/timeline",
                           params={"consistency": "live"})).json()
    assert (live["active_contracts"], live["has_suspended"]) == (0, True)
    eid = t["contracts"][0]["execution_id"]
    snap = (await http.get(f"/api/execution/{eid}/snapshot")).json()
    assert snap["current_status"] == "completed"
