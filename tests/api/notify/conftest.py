"""Fixtures of the notifier's tests: a read model (SQLite) with notices written as
the exporter writes them, a real webhook receiver, a notify config naming it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from api.notify.settings import NotifyConfig, NotifySettings
from observation.read_model.notices import NoticeFold, NoticeRow
from observation.read_model.sqlite import SqliteStore
from observation.read_model.store import INSERT_NOTICE, SqlStore
from tests.api.notify.webhook_receiver import Receiver

SECRET_ENV = "HITLFLOW_TEST_HOOK_SECRET"
URL_ENV = "HITLFLOW_TEST_HOOK_URL"


def now_iso(offset_s: float = 0) -> str:
    t = datetime.now(UTC).timestamp() + offset_s
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def session_notices(sid: str, requests: int, *, at: str | None = None,
                    config: dict[str, Any] | None = None, end: bool = False
                    ) -> list[NoticeRow]:
    """The notices of a session whose log opens ``requests`` requests one after the
    other (each answered before the next), through the read model's own fold."""
    fold = NoticeFold(sid)
    ts = at or now_iso()
    lines = [{"seq": 1, "type": "RUN_CREATED", "ts": ts,
              "payload": {"config": config or {"title": f"t-{sid}"}}}]
    for i in range(requests):
        lines.append({"seq": len(lines) + 1, "type": "ISSUE_OPENED", "ts": ts, "payload": {
            "issue_id": f"{sid}.r{i}", "kind": "confirm", "prompt": f"step {i}?"}})
        lines.append({"seq": len(lines) + 1, "type": "ISSUE_RESOLVED", "ts": ts, "payload": {
            "issue_id": f"{sid}.r{i}", "resolution": "answered"}})
    if end:
        lines.append({"seq": len(lines) + 1, "type": "RUN_COMPLETED", "ts": ts,
                      "payload": {"status": "succeeded"}})
    return [n for n in (fold.apply(line) for line in lines) if n is not None]


def write_notices(store: SqlStore, rows: list[NoticeRow]) -> None:
    """Insert notices with the read model's own statement (as a batch does)."""
    with store.transaction() as tx:
        tx.executemany(INSERT_NOTICE, [(n.notice_id, n.session_id, n.seq, n.kind, n.at, n.body)
                                       for n in rows])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore.in_dir(tmp_path)
    yield s
    s.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def hook_env(monkeypatch: pytest.MonkeyPatch, receiver: Receiver) -> Receiver:
    monkeypatch.setenv(SECRET_ENV, receiver.secret)
    monkeypatch.setenv(URL_ENV, receiver.url)
    return receiver


def hook_config(**extra: Any) -> NotifyConfig:
    return NotifyConfig.model_validate({
        "channels": {"hook": {"type": "webhook", "url_env": URL_ENV, "secret_env": SECRET_ENV,
                              "timeout_s": 5}},
        "routes": [{"to": "*", "channel": "hook",
                    "on": ["opened", "reminded", "escalated", "expired", "auto_decided",
                           "ended"]}], **extra})


def fast_settings(**extra: Any) -> NotifySettings:
    return NotifySettings(**{"poll_s": 0.05, "backoff_s": 0.05, "max_backoff_s": 0.2,
                             "lease_s": 5, **extra})
