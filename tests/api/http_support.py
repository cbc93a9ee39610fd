"""Helpers for the HTTP tests: a real uvicorn server, bounded polling, configs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from temporalio.client import Client

from api.cli.demo_config import demo_config
from api.http.app import ApiServer, create_app
from api.settings import HitlflowSettings
from observation.exporter.keys import load_or_create_signer
from tests.support.sessions import running_exporter, running_worker

DEADLINE_S = 30.0
#: The bearer token of the tests' APIs (an API requires one, docs/security.md), and
#: the header that sends it, as every client of an API does.
TOKEN = "hitlflow-test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@dataclass
class HttpStack:
    http: httpx.AsyncClient
    url: str
    client: Client  # the test's own Temporal client (to look behind the API)
    settings: HitlflowSettings


@asynccontextmanager
async def serve(app: FastAPI, port: int) -> AsyncIterator[ApiServer]:
    """uvicorn on 127.0.0.1:port for the block, started and stopped here."""
    server = ApiServer(app, "127.0.0.1", port)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def stack_settings(client: Client, data_dir: Path, name: str,
                   token: str | None = TOKEN,
                   commands: list[str] | None = None) -> HitlflowSettings:
    """The settings of a test's stack: the test's Temporal, a task queue of its own
    (``tq-<name>-...``), ``data_dir``, the API's ``token`` and the commands its
    session configs may run (``commands``; default: the server's)."""
    extra = {} if commands is None else {"api_allowed_commands": commands}
    return HitlflowSettings(temporal_address=client.service_client.config.target_host,
                            task_queue=f"tq-{name}-{uuid.uuid4().hex[:8]}", api_token=token,
                            data_dir=data_dir, **extra)


@asynccontextmanager
async def running_stack(client: Client, settings: HitlflowSettings, port: int,
                        headers: dict[str, str] | None = None,
                        app: FastAPI | None = None) -> AsyncIterator[HttpStack]:
    """A worker on ``settings.task_queue``, the exporter keeping the read model in
    ``settings.data_dir``, and the API on 127.0.0.1:``port`` (``headers``: the test
    client's; default: the bearer token of ``settings``; ``app``: the API, default
    ``create_app(settings)``)."""
    if headers is None and settings.api_token:
        headers = {"authorization": f"Bearer {settings.api_token}"}
    signer = load_or_create_signer(settings.data_dir)  # as `up` does at its first start
    async with running_worker(client, settings.task_queue), \
            running_exporter(client, settings.data_dir, settings.task_queue,
                             signer=signer), \
            serve(app or create_app(settings), port) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=headers) as http:
        yield HttpStack(http=http, url=server.url, client=client, settings=settings)


async def eventually(probe: Callable[[], Awaitable[Any]], check: Callable[[Any], bool],
                     limit_s: float = DEADLINE_S, what: str = "condition") -> Any:
    """Call ``probe`` until ``check`` holds for its result (a bounded condition wait)."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        value = await probe()
        if check(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not reached in {limit_s} s; last: {value!r}")
        await asyncio.sleep(0.05)


async def session_until(http: httpx.AsyncClient, sid: str, check: Callable[[dict], bool],
                        what: str = "session state", **params: str) -> dict:
    async def get() -> dict:
        r = await http.get(f"/api/sessions/{sid}", params=params)
        assert r.status_code == 200, r.text
        return r.json()
    return await eventually(get, check, what=what)


async def listed(http: httpx.AsyncClient, sid: str, status: str) -> list[str]:
    """Wait (bounded) until visibility lists ``sid`` under ``status``."""
    async def ids() -> list[str]:
        r = await http.get("/api/sessions", params={"status": status, "limit": 1000})
        assert r.status_code == 200, r.text
        return [s["session_id"] for s in r.json()["sessions"]]
    return await eventually(ids, lambda found: sid in found, what=f"{sid} listed as {status}")


def waiting(kind: str) -> Callable[[dict], bool]:
    return lambda s: s["status"] == "waiting_user" and (s["pending"] or {}).get("kind") == kind


def demo_body(notes_dir: Path) -> dict:
    return demo_config(notes_dir).model_dump(mode="json", exclude_none=True)


def confirm_body(*extra: dict) -> dict:
    """No tools (fast): the agent asks the person to confirm, then finishes."""
    return {"initial_message": "hello", "agent": {"llm": {"provider": "scripted", "responses": [
        {"ecs_request": {"kind": "confirm", "prompt": "go on?"}}, *extra,
        {"text": "done", "end": True}]}}}


def chat_body() -> dict:
    """The agent answers and waits for the next message, then finishes."""
    return {"initial_message": "hi", "agent": {"llm": {"provider": "scripted", "responses": [
        {"text": "hello, what next?"}, {"text": "bye", "end": True}]}}}


def error_of(r: httpx.Response) -> dict:
    """The error of a 4xx response, checking its one shape on the way."""
    body = r.json()
    # A write's 503 names its idempotency key too (resend it with that key).
    extra = {"idempotency_key"} if r.status_code == 503 else set()
    assert set(body) == {"error"} and set(body["error"]) - extra == {"code", "message"}, body
    assert body["error"]["message"], body
    return body["error"]
