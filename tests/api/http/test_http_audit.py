"""The audit endpoints: a session's log as exported, and telemetry runs."""

from __future__ import annotations

import json

import httpx

from api.http.app import create_app
from observation.exporter import export_session
from observation.exporter.checkpoint import Checkpoint, root_of
from observation.exporter.note import Verifier, open_note
from observation.telemetry.hook import rebuild_store
from tests.api.http_support import (
    AUTH,
    HttpStack,
    confirm_body,
    error_of,
    eventually,
    serve,
    session_until,
)


async def test_log_and_telemetry_runs_of_a_session(http_stack: HttpStack, tmp_path, free_port):
    settings = http_stack.settings.model_copy(update={"data_dir": tmp_path})
    async with serve(create_app(settings), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
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
        # Paging past what SQLite can count is a 422, not an OverflowError (a 500).
        for params in [{"offset": 2**63}, {"offset": 10**30}, {"offset": -1}, {"limit": 0},
                       {"limit": 10**30}, {"offset": "x"}]:
            r = await http.get("/api/telemetry/runs", params=params)
            assert r.status_code == 422, (params, r.text)
            error_of(r)
        r = await http.get("/api/telemetry/runs", params={"offset": 2**31 - 1})
        assert r.status_code == 200 and r.json() == {"runs": []}
        (tmp_path / "telemetry.sqlite").write_bytes(b"not a database")
        r = await http.get("/api/telemetry/runs")
        assert r.status_code == 409 and error_of(r)["code"] == "telemetry_unavailable"


async def test_a_sessions_signed_checkpoint_and_the_key_to_check_it(
        http_stack: HttpStack, tmp_path, free_port):
    """What an auditor fetches to keep elsewhere: the checkpoint the exporter signed,
    the verifier key, and the log the checkpoint's root is found in."""
    http = http_stack.http
    r = await http.post("/api/sessions", json=confirm_body())
    sid = r.json()["session_id"]
    await session_until(http, sid, lambda s: s["status"] == "waiting_user")
    r = await eventually(lambda: http.get(f"/api/sessions/{sid}/checkpoint"),
                         lambda r: r.status_code == 200, what="a signed checkpoint")
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    key = await http.get("/api/checkpoint-key")
    assert key.status_code == 200 and key.headers["content-type"].startswith("text/plain")
    cp = Checkpoint.parse(open_note(r.content, Verifier.parse(key.text)))
    assert cp.origin == f"hitlflow.local/{sid}" and cp.size > 0
    lines = (await http.get(f"/api/sessions/{sid}/log")).content.splitlines()
    assert root_of(json.loads(lines[cp.size - 1])) == cp.root  # the log holds what was signed
    r = await http.get("/api/sessions/s-000000000000/checkpoint")
    assert r.status_code == 404 and error_of(r)["code"] == "checkpoint_not_found"
    assert (await http.get("/api/sessions/..%2Fetc/checkpoint")).status_code in (404, 422)
    settings = http_stack.settings.model_copy(update={"data_dir": tmp_path})
    async with serve(create_app(settings), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as bare:
        r = await bare.get("/api/checkpoint-key")  # no exporter has started here
        assert r.status_code == 404 and error_of(r)["code"] == "checkpoint_key_not_found"


async def test_a_log_that_grows_while_it_is_sent_is_sent_as_it_was(tmp_path):
    """The exporter appends while ``GET .../log`` streams: what is sent stops at the
    size the response declared (before, the extra bytes overran Content-Length and the
    client saw the connection cut)."""
    from api.http.routers.audit import _first_bytes

    log = tmp_path / "events.ndjson"
    log.write_bytes(b'{"seq":1}\n{"seq":2}\n')
    size, sent = log.stat().st_size, []
    async for piece in _first_bytes(log, size, chunk=4):
        sent.append(piece)
        with log.open("ab") as f:
            f.write(b'{"seq":3}\n')
    assert b"".join(sent) == b'{"seq":1}\n{"seq":2}\n'
