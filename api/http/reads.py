"""The API's side of the read model.

Default reads come from the read model the exporter keeps (``observation.read_model``):
no worker, no Temporal query. ``?consistency=live`` takes the older path below: a
session's past from its log, the present from the live query.

The log fold runs in a worker thread (a first read of a long log takes a while;
the event loop must not wait for it). A log that does not fold is logged and
served as if absent: the live query still answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from fastapi import Response

from api.http.errors import ApiError
from observation.log_reader import LogUnreadableError, LogViews
from observation.log_view import SessionLogView
from observation.read_model import ReadModelError, ReadStore

T = TypeVar("T")
L = TypeVar("L")
log = logging.getLogger("hitlflow.api")

# Live query failures after which the log alone answers.
LOG_ALONE = frozenset({"worker_unavailable", "session_not_found"})


async def read_log(logs: LogViews, session_id: str,
                   use: Callable[[SessionLogView | None], T]) -> T:
    """``use`` on the session's fold, brought up to date off the event loop."""
    try:
        return await asyncio.to_thread(logs.read, session_id, use)
    except LogUnreadableError as err:
        log.warning("serving session %s without its log: %s", session_id, err)
        return use(None)


async def log_then_live(
    logs: LogViews, session_id: str, live: Callable[[], Awaitable[L]],
    build: Callable[[SessionLogView | None, L | None], T],
) -> T:
    """``build(view, live)``: the live part is skipped once the log shows the session
    ended (nothing live can add to it), and the log answers alone when no worker
    answers or Temporal no longer knows the session (404 when there is no log)."""
    done = await read_log(logs, session_id,
                          lambda v: build(v, None) if v is not None and v.closed else None)
    if done is not None:
        return done
    try:
        current = await live()
    except ApiError as err:
        if err.code not in LOG_ALONE:
            raise
        alone = await read_log(logs, session_id,
                               lambda v: build(v, None) if v is not None else None)
        if alone is None:
            raise
        return alone
    return await read_log(logs, session_id, lambda v: build(v, current))


# -- the read model (issue 10): what the exporter keeps, served without a worker ------


def store_of(request_state: object) -> ReadStore:
    store = getattr(request_state, "read_model", None)
    if store is None:
        raise ApiError(503, "read_model_unavailable",
                       "the read model is not open (see the API's log)")
    return store


async def store_call(store: ReadStore, fn: Callable[..., T], *args: object) -> T:
    """A store read: inline for SQLite (a local indexed read), in a thread else."""
    try:
        if store.inline:
            return fn(*args)
        return await asyncio.to_thread(fn, *args)
    except ReadModelError as err:
        log.warning("read model: %s", err)
        raise ApiError(503, "read_model_unavailable", str(err)) from None


@dataclass(frozen=True)
class Freshness:
    """What a read must reflect: log line ``min_seq`` and journal entry count
    ``min_journal_seq`` (a write's answer gives the latter)."""

    min_seq: int | None = None
    min_journal_seq: int | None = None

    def reached(self, row: dict[str, Any] | None) -> bool:
        if self.min_seq is None and self.min_journal_seq is None:
            return True
        if row is None:
            return False
        return (row["last_seq"] >= (self.min_seq or 0)
                and row["journal_seq"] >= (self.min_journal_seq or 0))


async def fresh_row(store: ReadStore, session_id: str, want: Freshness, wait_s: float
                    ) -> tuple[dict[str, Any] | None, bool]:
    """The session's row, waiting up to ``wait_s`` for it to reach ``want``;
    ``(row, stale)``: stale when it did not in time (the row is the older one)."""
    row = await store_call(store, store.session, session_id)
    if want.reached(row):
        return row, False
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + wait_s, 0.005
    while loop.time() < deadline:
        await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
        pause = min(pause * 2, 0.05)
        row = await store_call(store, store.session, session_id)
        if want.reached(row):
            return row, False
    return row, True


def freshness_headers(response: Response, row: dict[str, Any] | None, stale: bool) -> None:
    """``X-Hitlflow-Seq``: the log line the answer reflects (0: none yet);
    ``X-Hitlflow-Journal-Seq``: the journal entries it reflects; ``X-Hitlflow-Stale:
    true`` when the ``min_seq``/``min_journal_seq`` asked for was not reached in time."""
    response.headers["X-Hitlflow-Seq"] = str(row["last_seq"] if row else 0)
    response.headers["X-Hitlflow-Journal-Seq"] = str(row["journal_seq"] if row else 0)
    if stale:
        response.headers["X-Hitlflow-Stale"] = "true"


def with_duration(snap: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A stored snapshot with ``duration_in_state_ms`` from the reader's clock."""
    entered = datetime.fromisoformat(snap["entered_state_at"])
    snap["duration_in_state_ms"] = max(0, int((now - entered).total_seconds() * 1000))
    return snap
