"""FastAPI dependencies: settings, the Temporal client, validated ids, tunables,
the log folds (the read model).

They are ``async def`` although they never await: FastAPI runs a plain ``def``
dependency in a worker thread, a hop per request that costs more than they do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Literal

from fastapi import Depends, Path, Query, Request
from temporalio.client import Client

from api.http.errors import ApiError
from api.http.models import SESSION_ID_PATTERN
from api.http.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery
from api.http.reads import Freshness, store_call, store_of
from api.identity.principals import ANONYMOUS, SERVICE_PRINCIPAL
from api.settings import HitlflowSettings
from observation.log_reader import LogViews
from observation.read_model import ReadStore
from workflows.config import valid_session_id
from workflows.people import Principal

if TYPE_CHECKING:
    from api.notify.outbox import Outbox
    from api.notify.settings import NotifyConfig


@dataclass(frozen=True)
class ApiTuning:
    """Timeouts and limits of the HTTP service (tests shrink them)."""

    # How long a query or an update may wait for a worker to answer.
    query_timeout_s: float = 5.0
    update_timeout_s: float = 15.0
    # Request bodies larger than this are refused with 413.
    max_body_bytes: int = 1024 * 1024
    # SSE: a comment line this often keeps proxies and clients from timing out.
    keepalive_s: float = 15.0
    # SSE: the reconnection delay suggested to clients (the `retry:` field).
    retry_ms: int = 2000
    # How long a read with `min_seq`/`min_journal_seq` waits for the read model.
    freshness_wait_s: float = 2.0

    @property
    def query_timeout(self) -> timedelta:
        return timedelta(seconds=self.query_timeout_s)

    @property
    def update_timeout(self) -> timedelta:
        return timedelta(seconds=self.update_timeout_s)


async def get_settings(request: Request) -> HitlflowSettings:
    return request.app.state.settings


async def get_tuning(request: Request) -> ApiTuning:
    return request.app.state.tuning


async def get_client(request: Request) -> Client:
    client = getattr(request.app.state, "client", None)
    if client is None:
        raise ApiError(503, "temporal_unavailable", "the API has no Temporal client yet")
    return client


#: Told the id of every session a write was accepted for (``up``: the exporter's wakeups).
OnChange = Callable[[str], None]


async def get_on_change(request: Request) -> OnChange:
    return request.app.state.on_change


async def get_log_views(request: Request) -> LogViews:
    return request.app.state.log_views


async def get_read_model(request: Request) -> ReadStore:
    return store_of(request.app.state)


async def get_freshness(
    min_seq: Annotated[int | None, Query(ge=0, le=2**31 - 1, description=(
        "Wait briefly (at most 2 s) until the answer reflects log line `min_seq` "
        "(an SSE id or a previous answer's `seq`); else the older answer comes with "
        "`X-Hitlflow-Stale: true`."))] = None,
    min_journal_seq: Annotated[int | None, Query(ge=0, le=2**31 - 1, description=(
        "Read your writes: the `journal_seq` of a reply's, message's or end's answer; "
        "waits like `min_seq`."))] = None,
) -> Freshness:
    return Freshness(min_seq, min_journal_seq)


async def get_session_id(
    session_id: Annotated[str, Path(
        pattern=SESSION_ID_PATTERN, max_length=128,
        description="A session id: letters, digits, `_` and `-` (it names files on disk).",
    )],
) -> str:
    # The path pattern already says so; this is the one check that guards the disk.
    if not valid_session_id(session_id):
        raise ApiError(422, "invalid_session_id", f"invalid session id {session_id!r}")
    return session_id


#: Who the API token acts as (a named service principal for automation); ``ANONYMOUS``
#: is who every request is with authentication off.
SERVICE_TOKEN = SERVICE_PRINCIPAL


async def get_principal(request: Request) -> Principal:
    """Who makes the request, as the doors established it (never from its body)."""
    principal = getattr(request.state, "principal", None)
    if principal is None:  # auth off: every request is the anonymous operator
        return ANONYMOUS
    return principal


SettingsDep = Annotated[HitlflowSettings, Depends(get_settings)]
TuningDep = Annotated[ApiTuning, Depends(get_tuning)]
ClientDep = Annotated[Client, Depends(get_client)]
SessionIdDep = Annotated[str, Depends(get_session_id)]
LogViewsDep = Annotated[LogViews, Depends(get_log_views)]
ReadModelDep = Annotated[ReadStore, Depends(get_read_model)]
FreshnessDep = Annotated[Freshness, Depends(get_freshness)]
ConsistencyQuery = Annotated[Literal["read_model", "live"], Query(description=(
    "`read_model` (default): from the read model the exporter keeps, no worker needed; "
    "`live`: from the workflow's query (needs a worker), overlaid on the log."))]
OnChangeDep = Annotated[OnChange, Depends(get_on_change)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]


@dataclass(frozen=True)
class PageRead:
    """What a read of one page of a session's list asks: where the page starts and how
    long it is, where it is read from and how fresh it must be."""

    limit: int
    cursor: str | None
    consistency: Literal["read_model", "live"]
    fresh: Freshness


async def get_page_read(fresh: FreshnessDep, limit: LimitQuery = DEFAULT_LIMIT,
                        cursor: CursorQuery = None,
                        consistency: ConsistencyQuery = "read_model") -> PageRead:
    return PageRead(limit, cursor, consistency, fresh)


PageReadDep = Annotated[PageRead, Depends(get_page_read)]


# -- notifications (issue 26) ------------------------------------------------------------


@dataclass(frozen=True)
class NotifyState:
    """The notify config the API loaded (``HITLFLOW_NOTIFY_CONFIG``), or why it could not
    (``error``; the API runs on, and its notification routes say so)."""

    config: NotifyConfig | None = None
    error: str | None = None


async def get_notify_state(request: Request) -> NotifyState:
    return getattr(request.app.state, "notify", None) or NotifyState()


async def get_outbox(request: Request) -> Outbox:
    """The notifier's outbox over the API's read model (its tables made at first use)."""
    state = request.app.state
    if getattr(state, "outbox", None) is None:
        from api.notify.outbox import Outbox

        store = store_of(state)
        state.outbox = await store_call(store, Outbox, store)
    return state.outbox


OutboxDep = Annotated["Outbox", Depends(get_outbox)]
