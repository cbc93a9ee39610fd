"""What the session routers read the same way: a session's row in the read model
(as fresh as asked, with the freshness headers), one page of its stored rows, a
query of its workflow and Temporal's description of it (Temporal's failures as API
errors)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request, Response
from temporalio.client import Client, WorkflowExecutionDescription

from api.http.deps import ApiTuning
from api.http.errors import temporal_errors
from api.http.paging import check_offset
from api.http.reads import Freshness, fresh_row, freshness_headers, store_call, store_of
from observation.read_model import ReadStore

T = TypeVar("T")


async def stored_row(request: Request, response: Response, tuning: ApiTuning,
                     session_id: str, fresh: Freshness
                     ) -> tuple[ReadStore, dict[str, Any] | None, bool]:
    """``(store, row, stale)``: the session's row once it is as fresh as ``fresh``
    asks (None: not exported yet), with the freshness headers set on ``response``."""
    store = store_of(request.app.state)
    row, stale = await fresh_row(store, session_id, fresh, tuning.freshness_wait_s)
    freshness_headers(response, row, stale)
    return store, row, stale


@dataclass(frozen=True)
class StoredPage:
    items: list[dict[str, Any]]
    total: int
    next_offset: int | None


async def stored_page(store: ReadStore, read: Callable[..., list[dict[str, Any]]],
                      session_id: str, offset: int, limit: int, total: int) -> StoredPage:
    """Rows ``offset`` to ``offset + limit`` of a list of ``total`` in the read model."""
    check_offset(offset, total)
    items = await store_call(store, read, session_id, offset, limit)
    following = offset + len(items)
    return StoredPage(items, total, following if following < total else None)


async def describe(client: Client, session_id: str) -> WorkflowExecutionDescription:
    """Temporal's record of the session (404 when it knows none)."""
    with temporal_errors(session_id):
        return await client.get_workflow_handle(session_id).describe()


async def query(client: Client, session_id: str, name: str, result_type: type[T],
                tuning: ApiTuning, *arg: Any) -> T:
    """The workflow's query ``name`` (needs a worker)."""
    with temporal_errors(session_id):
        return await client.get_workflow_handle(session_id).query(
            name, *arg, result_type=result_type, rpc_timeout=tuning.query_timeout)
