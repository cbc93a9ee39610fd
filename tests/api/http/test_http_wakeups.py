"""The API tells ``on_change`` of every write it accepted (``hitlflow up`` wakes the
exporter's parked follower with it), and of nothing it refused."""

from __future__ import annotations

import uuid

import httpx

from api.http.app import create_app
from api.settings import HitlflowSettings
from tests.api.http_support import (
    AUTH,
    TOKEN,
    chat_body,
    confirm_body,
    serve,
    session_until,
    waiting,
)
from tests.support.sessions import running_worker


async def test_accepted_writes_are_told_refused_ones_are_not(dev_env, free_port):
    settings = HitlflowSettings(
        temporal_address=dev_env.client.service_client.config.target_host,
        task_queue=f"tq-wake-{uuid.uuid4().hex[:8]}", api_token=TOKEN)
    told: list[str] = []
    live = {"consistency": "live"}  # no exporter here: read the workflow itself
    async with running_worker(dev_env.client, settings.task_queue), \
            serve(create_app(settings, on_change=told.append), free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
        chat = (await http.post("/api/sessions", json=chat_body())).json()["session_id"]
        assert told == [chat]  # a new session: the exporter follows it at once
        await session_until(http, chat, waiting("message"), **live)
        assert (await http.post(f"/api/sessions/{chat}/messages",
                                json={"text": "more"})).status_code == 202
        assert told == [chat, chat]
        await session_until(http, chat, lambda s: s["status"] == "succeeded", **live)
        assert (await http.post(f"/api/sessions/{chat}/end", json={})).status_code == 409
        assert told == [chat, chat]

        other = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
        await session_until(http, other, waiting("confirm"), **live)
        assert (await http.post(f"/api/sessions/{other}/reply", json={
            "request_id": "nope", "approve": True})).status_code == 409
        assert (await http.post("/api/sessions", params={"session_id": other},
                                json=confirm_body())).status_code == 409  # refused: not told
        assert told == [chat, chat, other]
        assert (await http.post(f"/api/sessions/{other}/cancel", json={})).status_code == 202
        assert told == [chat, chat, other, other]
