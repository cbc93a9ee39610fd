"""The audit endpoints: a session's log as exported, and telemetry runs."""

from __future__ import annotations

import httpx

from api.app import create_app
from observation.exporter import export_session
from observation.telemetry.hook import rebuild_store
from tests.api.http_support import HttpStack, confirm_body, error_of, serve, session_until


async def test_log_and_telemetry_runs_of_a_session(http_stack: HttpStack, tmp_path, free_port):
    settings = http_stack.settings.model_copy(update={"data_dir": tmp_path})
    async with serve(create_app(settings), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        r = await http.post("/api/sessions", json=confirm_body())
        sid = r.json()["session_id"]
        await session_until(http, sid, lambda s: s["status"] == "waiting_user")
        r = await http.get(f"/api/sessions/{sid}/log")
        assert r.status_code == 404 and error_of(r)["code"] == "log_not_found"
        assert (await http.get("/api/telemetry/runs")).json() == {"runs": []}
        await export_session(http_stack.client, sid, tmp_path / "runs")
        rebuild_store(tmp_path)
        r = await http.get(f"/api/sessions/{sid}/log")
        assert r.status_code == 200
        assert r.content == (tmp_path / "runs" / sid / "events.ndjson").read_bytes()
        r = await http.get("/api/telemetry/runs", params={"session_id": sid})
        runs = r.json()["runs"]
        assert {run["job_type"] for run in runs} >= {"session", "llm_call"}
        r = await http.get("/api/telemetry/runs", params={"job_type": "llm_call"})
        assert r.json()["runs"] and all(x["job_type"] == "llm_call" for x in r.json()["runs"])
        # Broken input: a bad filter is a 422, a path-escaping id never reaches the disk.
        assert (await http.get("/api/telemetry/runs",
                               params={"job_type": "nope"})).status_code == 422
        assert (await http.get("/api/sessions/..%2Fetc/log")).status_code in (404, 422)
        (tmp_path / "telemetry.sqlite").write_bytes(b"not a database")
        r = await http.get("/api/telemetry/runs")
        assert r.status_code == 409 and error_of(r)["code"] == "telemetry_unavailable"
