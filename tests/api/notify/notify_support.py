"""Helpers of the notifications tests (HTTP, CLI, inbox): an API on 127.0.0.1 with a
person of each role and no Temporal (the outbox is the read model's database), and
dead letters made as the notifier makes them (notices written as the read model
writes them, routed into the outbox, refused for good by their receiver)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from api.http.app import create_app
from api.identity.people_store import PeopleStore
from api.notify.model import Links, Message, Notice
from api.notify.outbox import Outbox, message_id, parse_at
from api.notify.settings import NotifySettings
from api.settings import HitlflowSettings
from observation.read_model import ReadStore, open_store
from observation.read_model.store import INSERT_NOTICE
from tests.api.http_support import serve

TOKEN = "notify-http-token-0123456789abcdef"
NO_TEMPORAL = "127.0.0.1:9"  # nothing listens there: these routes never need Temporal


@dataclass
class Api:
    http: httpx.AsyncClient
    keys: dict[str, dict[str, str]]  # role -> Authorization header
    store: ReadStore  # the test's own connection to the API's read model
    data_dir: Path


def auth(credential: str) -> dict[str, str]:
    return {"authorization": f"Bearer {credential}"}


@asynccontextmanager
async def api(tmp_path: Path, port: int, config: dict | None = None,
              config_text: str | None = None) -> AsyncIterator[Api]:
    """An API in ``tmp_path`` with a person of each role, and ``config`` as its notify
    config (none: no config)."""
    people = PeopleStore(tmp_path)
    keys = {role: auth(people.add(role, role, email=f"{role}@example.com"))
            for role in ("viewer", "approver", "operator", "admin")}
    keys["token"] = auth(TOKEN)
    notify = NotifySettings()
    if config is not None or config_text is not None:
        path = tmp_path / "notify.json"
        path.write_text(config_text if config_text is not None else json.dumps(config))
        notify = NotifySettings(config=path)
    settings = HitlflowSettings(data_dir=tmp_path, temporal_address=NO_TEMPORAL,
                                api_token=TOKEN)
    store = open_store(tmp_path)
    try:
        async with serve(create_app(settings, notify_settings=notify), port) as server, \
                httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            yield Api(http, keys, store, tmp_path)
    finally:
        store.close()


def error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return body["error"]["message"]


# -- dead letters made the way the notifier makes them -----------------------------------


def _expand(channel: str) -> Callable[[dict], Iterator[Message]]:
    def expand(body: dict) -> Iterator[Message]:
        notice = Notice.model_validate(body)
        yield Message(message_id=message_id(notice.notice_id, channel, None), channel=channel,
                      notice=notice, links=Links(page=f"http://x/#/s/{notice.session_id}"))
    return expand


def dead(store: ReadStore, count: int, first: int = 0, channel: str = "ops") -> list[str]:
    """``count`` notices routed into the outbox, each then refused for good by its
    receiver: dead letters (their ids, in the order they died)."""
    outbox = Outbox(store)
    at = "2026-11-26T10:00:00+00:00"
    with store.transaction() as tx:  # as the read model writes a line's notice
        for i in range(first, first + count):
            body = {"notice_id": f"s-{i}:3", "kind": "opened", "session_id": f"s-{i}",
                    "seq": 3, "at": at, "request_id": f"s-{i}.r1", "request_kind": "confirm",
                    "prompt": "go on?"}
            tx.execute(INSERT_NOTICE, (body["notice_id"], f"s-{i}", 3, "opened", at,
                                       json.dumps(body)))
    now = parse_at(at) + 60  # routed a minute after the line: within the window
    outbox.route(_expand(channel), window_s=3600, now=now)
    ids = []
    for k, (m, _) in enumerate(outbox.claim("test", 1000, 60, now=now)):
        outbox.failed(m.message_id, f"{channel}: the receiver answered 410: channel_is_archived",
                      permanent=True, backoff_s=1, max_backoff_s=1, now=now + k)
        ids.append(m.message_id)
    assert len(ids) == count
    return ids
