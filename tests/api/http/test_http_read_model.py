"""Reads come from the read model: they answer with every worker stopped, say how
fresh they are, and wait (bounded) for a write they must reflect."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from api.http.app import create_app
from api.http.deps import ApiTuning
from api.settings import HitlflowSettings
from tests.api.http_support import (
    AUTH,
    TOKEN,
    confirm_body,
    error_of,
    serve,
    session_until,
    waiting,
)
from tests.support.sessions import running_exporter, running_worker


async def test_every_read_answers_with_the_worker_stopped(dev_env: WorkflowEnvironment,
                                                          free_port, tmp_path: Path):
    settings = HitlflowSettings(
        temporal_address=dev_env.client.service_client.config.target_host,
        task_queue=f"tq-rm-{uuid.uuid4().hex[:8]}", data_dir=tmp_path, api_token=TOKEN)
    app = create_app(settings, tuning=ApiTuning(query_timeout_s=0.5, update_timeout_s=0.5,
                                                freshness_wait_s=0.2))
    async with running_exporter(dev_env.client, tmp_path, settings.task_queue), \
            serve(app, free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
        async with running_worker(dev_env.client, settings.task_queue):
            sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
            before = await session_until(http, sid, waiting("confirm"))
        # The worker is gone: every read still answers, from the read model.
        s = await http.get(f"/api/sessions/{sid}")
        assert s.status_code == 200, s.text
        body = s.json()
        assert body["status"] == "waiting_user" and body["pending"] == before["pending"]
        assert body["waiting_since"] is not None and body["seq"] == before["seq"]
        assert s.headers["x-hitlflow-seq"] == str(body["seq"])
        contract = body["contracts"][-1]
        assert contract["current_status"] == "waiting"
        t = await http.get(f"/api/execution/{sid}/timeline")
        assert t.status_code == 200 and t.json()["has_suspended"] is True
        assert t.json()["total_contracts"] == body["contracts_total"] >= 1
        assert t.json()["transitions"]
        c = await http.get(f"/api/execution/{contract['execution_id']}/snapshot")
        assert c.status_code == 200 and c.json()["current_status"] == "waiting"
        # Computed when read, not stored: it grows with the reader's clock.
        assert c.json()["duration_in_state_ms"] >= contract["duration_in_state_ms"]
        h = await http.get(f"/api/sessions/{sid}/history")
        assert h.status_code == 200 and h.json()["total"] >= 2
        assert h.json()["status_history"][-1]["to_status"] == "waiting_user"
        m = await http.get(f"/api/sessions/{sid}/memory")
        assert m.status_code == 200 and m.json()["seq"] == body["seq"]
        listed = await http.get("/api/sessions", params={"status": "waiting_user"})
        assert listed.status_code == 200
        assert sid in [x["session_id"] for x in listed.json()["sessions"]]
        # A freshness the read model cannot reach: the older answer, flagged stale.
        r = await http.get(f"/api/sessions/{sid}", params={"min_seq": body["seq"] + 1000})
        assert r.status_code == 200 and r.headers["x-hitlflow-stale"] == "true"
        assert r.json()["stale"] is True and r.json()["seq"] == body["seq"]
        # One it has reached: no wait, not stale.
        r = await http.get(f"/api/sessions/{sid}", params={"min_seq": body["seq"]})
        assert "x-hitlflow-stale" not in r.headers and r.json()["stale"] is False
        # Bad input is a 4xx.
        r = await http.get(f"/api/sessions/{sid}", params={"min_seq": -1})
        assert r.status_code == 422
        r = await http.get(f"/api/sessions/{sid}", params={"consistency": "eventual"})
        assert r.status_code == 422
        r = await http.get("/api/sessions", params={"page_token": "bm9wZQ"})
        assert r.status_code == 400 and error_of(r)["code"] == "invalid_page_token"
        # An unknown session is a 404 (Temporal does not know it either).
        r = await http.get(f"/api/sessions/nope-{uuid.uuid4().hex[:6]}")
        assert r.status_code == 404
        # The live view needs a worker: without one it falls back to Temporal's record.
        r = await http.get(f"/api/sessions/{sid}", params={"consistency": "live"})
        assert r.status_code == 200 and r.json()["status"] == "waiting_user"
    await dev_env.client.get_workflow_handle(sid).terminate("test cleanup")


async def test_sse_in_up_streams_the_exporters_lines_and_reads_see_them_at_once(
        dev_env: WorkflowEnvironment, free_port, tmp_path: Path):
    """`hitlflow up` wires SSE to the exporter's feed: no follower of its own (the
    session is parked while it is watched), and each streamed line is in the read
    model already, so a read with `min_seq` = its id is fresh without waiting."""
    from api.cli.sse_client import aparse_lines
    from observation.exporter import LogFeed

    settings = HitlflowSettings(
        temporal_address=dev_env.client.service_client.config.target_host,
        task_queue=f"tq-feed-{uuid.uuid4().hex[:8]}", data_dir=tmp_path, api_token=TOKEN)
    feed = LogFeed(tmp_path / "runs")
    app = create_app(settings, tuning=ApiTuning(freshness_wait_s=0),
                     event_provider=lambda _c, sid, after: feed.events(sid, after),
                     stream_head=lambda _c, sid: feed.head(sid))
    steps = [{"ecs_request": {"kind": "confirm", "prompt": f"step {i}?"}} for i in range(3)]
    async with running_exporter(dev_env.client, tmp_path, settings.task_queue, feed), \
            running_worker(dev_env.client, settings.task_queue), \
            serve(app, free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
        sid = (await http.post("/api/sessions", json=confirm_body(*steps))).json()["session_id"]
        seen: list[tuple[str, int]] = []
        async with http.stream("GET", f"/api/sessions/{sid}/events") as stream:
            async for msg in aparse_lines(stream.aiter_lines()):
                seen.append((msg.event, int(msg.id)))
                if msg.event != "conversation.state.changed" or \
                        msg.json()["to"] != "waiting_user":
                    continue
                r = await http.get(f"/api/sessions/{sid}", params={"min_seq": msg.id})
                assert r.status_code == 200 and "x-hitlflow-stale" not in r.headers, r.text
                s = r.json()
                assert s["status"] == "waiting_user" and s["seq"] >= int(msg.id)
                assert feed.watchers(sid) == 1
                past = await http.get(f"/api/sessions/{sid}/events",
                                      headers={"Last-Event-ID": str(int(msg.id) + 10_000)})
                assert past.status_code == 400, past.text  # live, and never sent: refused
                assert (await http.post(f"/api/sessions/{sid}/reply", json={
                    "request_id": s["pending"]["request_id"], "approve": True})
                        ).status_code == 202
        # The stream ended with the session (its last event says so, with the last
        # id); its ids are the log's seqs, in order.
        assert feed.watchers(sid) == 0
        assert seen.pop() == ("stream.complete", seen[-1][1])
        # Resuming after the last id: 204 (an EventSource stops); past the log: 400.
        url = f"/api/sessions/{sid}/events"
        r = await http.get(url, headers={"Last-Event-ID": str(seen[-1][1])})
        assert r.status_code == 204, r.text
        r = await http.get(url, headers={"Last-Event-ID": str(seen[-1][1] + 10_000)})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_last_event_id"
        ids = [i for _, i in seen]
        assert ids == sorted(ids) and len(set(ids)) == len([e for e, _ in seen if e != "ecs"])
        assert sum(1 for e, _ in seen if e == "ecs") == 4
        final = (await http.get(f"/api/sessions/{sid}", params={"min_seq": ids[-1]})).json()
        assert final["status"] == "succeeded" and not final["stale"]
