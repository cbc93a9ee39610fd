"""The API's side of the read model: a session's past from its log, the present
from the live query.

The log fold runs in a worker thread (a first read of a long log takes a while;
the event loop must not wait for it). A log that does not fold is logged and
served as if absent: the live query still answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from api.errors import ApiError
from observation.log_reader import LogUnreadableError, LogViews
from observation.log_view import SessionLogView

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
