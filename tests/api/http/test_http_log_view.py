"""A session's past over HTTP: contracts, timeline, memory and status history served
from the exported log, paged, overlaid by the live query; and broken paging input."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import httpx

from api.http.app import create_app
from api.http.deps import ApiTuning
from api.http.paging import encode_cursor
from observation.exporter import export_session
from observation.log_view import fold
from observation.projections import ExecutionTimeline, execution_snapshot
from tests.api.http_support import AUTH, HttpStack, error_of, serve, session_until, waiting
from tests.support.sessions import running_worker
from workflows.messages import LiveSession

# This file is about the live path (the log overlaid by the workflow's query), so
# every read asks for it; the read model has its own tests (test_http_read_model).
LIVE = {"consistency": "live"}
MANY = 61  # 60 tool calls on a server the session does not have, then one question


def many_body() -> dict:
    calls = [{"id": f"c{i}", "tool": f"tool_{i}", "server": "nowhere"} for i in range(60)]
    return {"initial_message": "go", "agent": {"llm": {"provider": "scripted", "responses": [
        {"tool_calls": calls}, {"ecs_request": {"kind": "confirm", "prompt": "all failed?"}},
        {"text": "done", "end": True}]}}}


async def walk(http: httpx.AsyncClient, path: str, key: str, limit: int) -> list[dict]:
    """Every page of a listing, following `next_cursor`."""
    items, cursor = [], None
    while True:
        params = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        r = await http.get(path, params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page[key]) <= limit
        items += page[key]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


async def test_a_long_session_pages_from_the_log_with_the_live_overlay(
        http_stack: HttpStack, tmp_path, free_port):
    settings = http_stack.settings.model_copy(update={"data_dir": tmp_path})
    async with serve(create_app(settings), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH, params=LIVE) as http:
        sid = (await http.post("/api/sessions", json=many_body())).json()["session_id"]
        s = await session_until(http, sid, waiting("confirm"))
        # The live query keeps only a recent window: the log has the rest.
        assert s["contracts_total"] == MANY and len(s["contracts"]) == 50
        await export_session(http_stack.client, sid, tmp_path / "runs")
        s = (await http.get(f"/api/sessions/{sid}")).json()
        assert s["contracts_total"] == MANY and len(s["contracts"]) == 50
        assert "memory" not in s and "status_history" not in s

        contracts = await walk(http, f"/api/sessions/{sid}", "contracts", 25)
        ids = [c["execution_id"] for c in contracts]
        assert len(ids) == MANY == len(set(ids))
        assert [c["current_status"] for c in contracts] == ["failed"] * 60 + ["waiting"]

        # Reply, then read at once: the log still says waiting, the live query wins.
        rid = s["pending"]["request_id"]
        r = await http.post(f"/api/sessions/{sid}/reply", json={"request_id": rid,
                                                                 "approve": True})
        assert r.status_code == 202, r.text
        s = await session_until(http, sid, lambda s: s["status"] == "succeeded",
                                what="the session ends")
        last = (await walk(http, f"/api/sessions/{sid}", "contracts", 60))[-1]
        assert (last["execution_id"], last["current_status"]) == (ids[-1], "completed")
        facts = await walk(http, f"/api/sessions/{sid}/memory", "facts", 7)
        assert [f["execution_id"] for f in facts] == ids  # 60 from the log, 1 live
        history = await walk(http, f"/api/sessions/{sid}/history", "status_history", 3)
        assert history[-1]["to_status"] == "succeeded"

        # The log catches up; the timeline pages every contract once, each page with
        # its contracts' transitions, the counts over all of them.
        await export_session(http_stack.client, sid, tmp_path / "runs")
        seen, transitions, cursor = [], 0, None
        while True:
            r = await http.get(f"/api/execution/{sid}/timeline",
                               params={"limit": 20} | ({"cursor": cursor} if cursor else {}))
            t = r.json()
            assert (t["total_contracts"], t["terminal_contracts"], t["active_contracts"]) \
                == (MANY, MANY, 0)
            page_ids = {c["execution_id"] for c in t["contracts"]}
            assert {tr["execution_id"] for tr in t["transitions"]} == page_ids
            seen += [c["execution_id"] for c in t["contracts"]]
            transitions += len(t["transitions"])
            if (cursor := t["next_cursor"]) is None:
                break
        assert seen == ids and transitions == 60 * 2 + 4

        # Rebuilt from the log, each contract is the workflow's own (but for the
        # time spent in its state, which depends on when one looks).
        handle = http_stack.client.get_workflow_handle(sid)
        live = await handle.query("timeline", result_type=ExecutionTimeline)
        snap = await handle.query("snapshot", result_type=LiveSession)
        view = fold(sid, [json.loads(line) for line in
                          (tmp_path / "runs" / sid / "events.ndjson").read_bytes().splitlines()])
        now = datetime.now(UTC)
        ours = {c.execution_id: execution_snapshot(c, now) for c in view.contracts}
        for theirs in live.contracts:
            assert ours[theirs.execution_id].model_dump(exclude={"duration_in_state_ms"}) == \
                theirs.model_dump(exclude={"duration_in_state_ms"})
        # The workflow keeps a window of the recent past; the log has all of it.
        recent = {c.execution_id for c in live.contracts}
        assert len(view.contracts) == MANY and len(recent) < MANY
        assert sorted((t.execution_id, t.timestamp, t.trigger, t.actor)
                      for c in view.contracts if c.execution_id in recent
                      for t in c.transitions) == \
            sorted((t.execution_id, t.timestamp, t.trigger, t.actor) for t in live.transitions)
        assert view.facts[-len(snap.memory):] == snap.memory
        assert view.history[-len(snap.status_history):] == snap.status_history
        assert (view.turns, view.replies, view.llm_calls, view.last_text) == \
            (snap.turns, snap.replies, snap.llm_calls, snap.last_text)

        # One contract: live or logged, the same answer.
        r = await http.get(f"/api/execution/{ids[3]}/snapshot")
        assert r.status_code == 200 and r.json()["current_status"] == "failed"

        # Broken paging input: a 4xx in the one error shape, never a 5xx.
        other = encode_cursor("contracts", "s-someone-else", 1)
        memory_cursor = encode_cursor("memory", sid, 1)
        for path, params, status in [
            (f"/api/sessions/{sid}", {"limit": 0}, 422),
            (f"/api/sessions/{sid}", {"limit": -1}, 422),
            (f"/api/sessions/{sid}", {"limit": 10**9}, 422),
            (f"/api/sessions/{sid}", {"limit": "ten"}, 422),
            (f"/api/sessions/{sid}", {"cursor": "not-a-cursor!"}, 400),
            (f"/api/sessions/{sid}", {"cursor": "x" * 201}, 422),
            (f"/api/sessions/{sid}", {"cursor": other}, 400),
            (f"/api/sessions/{sid}", {"cursor": memory_cursor}, 400),
            (f"/api/sessions/{sid}", {"cursor": encode_cursor("contracts", sid, 10**6)}, 400),
            (f"/api/sessions/{sid}/memory", {"cursor": "bWVtb3J5Oi0x"}, 400),
            (f"/api/sessions/{sid}/history", {"limit": 0}, 422),
            (f"/api/sessions/{sid}/history", {"cursor": memory_cursor}, 400),
            (f"/api/execution/{sid}/timeline", {"limit": 501}, 422),
            (f"/api/execution/{sid}/timeline", {"cursor": "%%%"}, 400),
        ]:
            r = await http.get(path, params=params)
            assert r.status_code == status, (path, params, r.text)
            error_of(r)


async def test_without_a_worker_the_past_comes_from_the_log(http_stack: HttpStack, tmp_path,
                                                            free_port):
    """Reads must not need a worker: the log answers once no worker does."""
    queue = f"tq-alone-{uuid.uuid4().hex[:8]}"
    settings = http_stack.settings.model_copy(update={"data_dir": tmp_path,
                                                      "task_queue": queue})
    app = create_app(settings, tuning=ApiTuning(query_timeout_s=1.0))
    async with serve(app, free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH, params=LIVE) as http:
        async with running_worker(http_stack.client, queue):
            sid = (await http.post("/api/sessions", json=many_body())).json()["session_id"]
            s = await session_until(http, sid, waiting("confirm"))
            await http.post(f"/api/sessions/{sid}/reply",
                            json={"request_id": s["pending"]["request_id"], "approve": True})
            await session_until(http, sid, lambda s: s["status"] == "succeeded")
            await export_session(http_stack.client, sid, tmp_path / "runs")
        s = (await http.get(f"/api/sessions/{sid}", params={"limit": 5})).json()
        assert s["live"] is False and s["status"] == "succeeded"
        assert s["contracts_total"] == MANY and len(s["contracts"]) == 5
        assert (s["turns"], s["replies"], s["last_text"]) == (2, 1, "done")
        # The log shows the session ended: no live query is even tried.
        t = (await http.get(f"/api/execution/{sid}/timeline")).json()
        assert t["total_contracts"] == MANY
        assert (await http.get(f"/api/sessions/{sid}/memory")).json()["total"] == MANY
        ids = [c["execution_id"] for c in s["contracts"]]
        r = await http.get(f"/api/execution/{ids[0]}/snapshot")
        assert r.status_code == 200 and r.json()["current_status"] == "failed"
