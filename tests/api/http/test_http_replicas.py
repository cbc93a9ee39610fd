"""Nothing in the API assumes it is the only one: two API processes (here: two
servers with their own clients, configured from the environment alone) serve the
same sessions."""

from __future__ import annotations

import httpx

from api.http.app import create_app
from api.settings import HitlflowSettings
from tests.api.http_support import (
    AUTH,
    TOKEN,
    HttpStack,
    confirm_body,
    serve,
    session_until,
    waiting,
)


async def test_two_api_replicas_serve_the_same_sessions(http_stack: HttpStack, free_port,
                                                        monkeypatch):
    monkeypatch.setenv("HITLFLOW_TEMPORAL_ADDRESS", http_stack.settings.temporal_address)
    monkeypatch.setenv("HITLFLOW_TASK_QUEUE", http_stack.settings.task_queue)
    # Replicas share the read model the exporter keeps (as on a cluster).
    monkeypatch.setenv("HITLFLOW_DATA_DIR", str(http_stack.settings.data_dir))
    monkeypatch.setenv("HITLFLOW_API_TOKEN", TOKEN)
    settings = HitlflowSettings()  # from the environment only
    assert settings.target == http_stack.settings.temporal_address
    async with serve(create_app(settings), free_port()) as one, \
            serve(create_app(settings), free_port()) as two, \
            httpx.AsyncClient(base_url=one.url, timeout=30, headers=AUTH) as a, \
            httpx.AsyncClient(base_url=two.url, timeout=30, headers=AUTH) as b:
        r = await a.post("/api/sessions", json=confirm_body())
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        s = await session_until(b, sid, waiting("confirm"))  # seen through the other one
        r = await b.post(f"/api/sessions/{sid}/reply",
                         json={"request_id": s["pending"]["request_id"], "approve": True})
        assert r.status_code == 202, r.text
        # The same reply through the first replica is stale now: 409, nothing changes.
        r = await a.post(f"/api/sessions/{sid}/reply",
                         json={"request_id": s["pending"]["request_id"], "approve": True})
        assert r.status_code == 409
        done = await session_until(a, sid, lambda s: s["status"] == "succeeded")
        assert done["replies"] == 1
