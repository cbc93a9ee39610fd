"""A session's past, paged: its memory facts and its status history.

Served from the exported log (the past) with the live query's entries the log
has not reached yet appended (see ``observation.log_pages``); from the log alone
once it shows the session ended, or when no worker answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import APIRouter, Request, Response
from temporalio.client import Client

from api.http.authority import SeenSessionDep
from api.http.deps import (
    ApiTuning,
    ClientDep,
    LogViewsDep,
    PageRead,
    PageReadDep,
    TuningDep,
)
from api.http.models import HistoryPage, MemoryPage, StatusChangeView
from api.http.paging import (
    Listing,
    check_offset,
    decode_cursor,
    encode_cursor,
)
from api.http.reads import log_then_live
from api.http.routers.session_reads import StoredPage, describe, query, stored_page, stored_row
from observation.log_pages import Page, fact_page, history_page
from observation.log_reader import LogViews
from observation.log_view import SessionLogView
from observation.read_model import ReadStore
from workflows.messages import LiveSession

router = APIRouter(prefix="/api/sessions", tags=["sessions"])


P = TypeVar("P", MemoryPage, HistoryPage)


@dataclass(frozen=True)
class _PastList(Generic[P]):
    """One of the session's paged past lists, as the read model and the log hold it."""

    listing: Listing
    field: str                     # the page's list field
    page_model: type[P]
    total_column: str              # the read model's count of it
    stored: Callable[[ReadStore], Callable[..., list[dict[str, Any]]]]
    live: Callable[[LiveSession], list[Any]]
    log_page: Callable[[SessionLogView | None, list[Any], int, int], Page[Any]]
    view: Callable[[Any], Any] = lambda item: item


_MEMORY: _PastList[MemoryPage] = _PastList(
    "memory", "facts", MemoryPage, "facts_total", lambda s: s.facts, lambda live: live.memory,
    fact_page)
_HISTORY: _PastList[HistoryPage] = _PastList(
    "history", "status_history", HistoryPage, "history_total", lambda s: s.history,
    lambda live: live.status_history, history_page,
    lambda c: StatusChangeView.model_validate(c.model_dump(mode="json")))


async def _past_page(past: _PastList[P], session_id: str, client: Client, tuning: ApiTuning,
                     logs: LogViews, request: Request, response: Response, paged: PageRead
                     ) -> P:
    offset, limit = decode_cursor(paged.cursor, past.listing, session_id), paged.limit
    if paged.consistency == "read_model":
        store, row, _ = await stored_row(request, response, tuning, session_id, paged.fresh)
        if row is None:  # not exported yet: known to Temporal (empty), else 404
            await describe(client, session_id)
            check_offset(offset, 0)
            page, seq = StoredPage([], 0, None), 0
        else:
            page = await stored_page(store, past.stored(store), session_id, offset, limit,
                                     row[past.total_column])
            seq = row["last_seq"]
        return past.page_model.model_validate({
            "session_id": session_id, past.field: page.items, "total": page.total,
            "seq": seq, "next_cursor": encode_cursor(past.listing, session_id,
                                                     page.next_offset)})

    def build(log: SessionLogView | None, live: LiveSession | None) -> P:
        page = past.log_page(log, past.live(live) if live else [], offset, limit)
        check_offset(offset, page.total)
        return past.page_model.model_validate({
            "session_id": session_id, past.field: [past.view(i) for i in page.items],
            "total": page.total,
            "next_cursor": encode_cursor(past.listing, session_id, page.next_offset)})

    return await log_then_live(
        logs, session_id, lambda: query(client, session_id, "snapshot", LiveSession, tuning),
        build)


@router.get("/{session_id}/memory", response_model=MemoryPage)
async def memory(session_id: SeenSessionDep, client: ClientDep, tuning: TuningDep,
                 logs: LogViewsDep, request: Request, response: Response,
                 paged: PageReadDep) -> MemoryPage:
    """The memory `execution_fact`s of the session's terminal contracts, in the order
    they were recorded, from the read model (`consistency=live`: the log overlaid by
    the workflow's query). 404 for an unknown session."""
    return await _past_page(_MEMORY, session_id, client, tuning, logs, request, response,
                            paged)


@router.get("/{session_id}/history", response_model=HistoryPage)
async def history(session_id: SeenSessionDep, client: ClientDep, tuning: TuningDep,
                  logs: LogViewsDep, request: Request, response: Response,
                  paged: PageReadDep) -> HistoryPage:
    """The session's status changes (with their FCMP events), oldest first, from the
    read model (`consistency=live`: the log overlaid by the workflow's query). 404
    for an unknown session."""
    return await _past_page(_HISTORY, session_id, client, tuning, logs, request, response,
                            paged)
