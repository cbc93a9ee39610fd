"""The HTTP service: ``create_app`` builds it, ``ApiServer`` serves it with uvicorn.

* The Temporal client is created in the lifespan (pydantic data converter), lazily:
  the API starts even while Temporal is down; ``/healthz`` says so and calls that
  need Temporal answer 503 ``temporal_unavailable`` until it is back.
* Every error is ``{"error": {"code", "message"}}`` (``api.http.errors``).
* Before anything else runs for a request, its doors (``api.http.doors``): an allowed
  ``Host`` (400), a JSON body on every state-changing route (415), and
  who makes the request (a key, the API token, a proxy's or an OIDC identity) everywhere
  but ``/healthz``, ``/api/auth/config`` and the inbox's static files, docs included
  (401); ``create_app`` refuses to build an API nobody could sign in to unless
  ``HITLFLOW_API_AUTH=off``. Request bodies are bounded (413).
* OpenAPI docs at ``/docs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator

import uvicorn
from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import Client

from activities.deltas import DeltaBus, cluster_delta_bus
from api.http import doors, errors
from api.http.deps import ApiTuning, NotifyState, OnChange
from api.http.limits import JsonLimits
from api.http.routers import (
    act,
    audit,
    events,
    execution,
    fork,
    health,
    inbox,
    notifications,
    oidc_login,
    past,
    session_list,
    sessions,
    whoami,
)
from api.http.sse import EventProvider, HeadProvider
from api.http.stuck import StuckWatch
from api.notify.settings import NotifyConfigError, NotifySettings
from api.settings import HitlflowSettings
from api.temporal_connection import connect
from observation.log_reader import LogViews
from observation.read_model import ReadModelError, ReadStore, open_store

log = logging.getLogger("hitlflow.api")

class _BodyTooLarge(StarletteHTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


class BodyLimit:
    """413 for bodies over ``limit`` bytes: by Content-Length up front, else while reading."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None:
            if not length.isdigit():
                await errors.error_response(400, "bad_request", "invalid Content-Length")(
                    scope, receive, send)
                return
            if int(length) > self.limit:
                await errors.error_response(413, "body_too_large", _BodyTooLarge(
                    self.limit).detail)(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge(self.limit)  # FastAPI re-raises it: a JSON 413
            return message

        await self.app(scope, limited, send)


def _nobody(session_id: str) -> None:
    """No one to tell of a write (a standalone API: the exporter polls visibility)."""


def create_app(
    settings: HitlflowSettings | None = None,
    client: Client | None = None,
    *,
    tuning: ApiTuning | None = None,
    event_provider: EventProvider | None = None,
    stream_head: HeadProvider | None = None,
    read_model: ReadStore | None = None,
    on_change: OnChange | None = None,
    delta_bus: DeltaBus | None = None,
    notify_settings: NotifySettings | None = None,
) -> FastAPI:
    """The HTTP service. Without ``client``, the lifespan connects one to
    ``settings.target``; ``event_provider`` replaces the SSE source (tests), and
    ``stream_head`` says how far it goes (without it, resume points are not checked);
    ``on_change(session_id)`` hears of every accepted write (``up`` wakes the exporter);
    ``delta_bus``: the worker's text as it is written, merged into SSE streams as
    ``text.delta`` events (``activities.deltas``; without one, none are sent)."""
    settings = settings or HitlflowSettings()
    tuning = tuning or ApiTuning()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if app.state.client is None:
            app.state.client = await connect(settings, lazy=True)
        if app.state.link_secret is None:  # action links (issue 26): the data dir's key
            app.state.link_secret = await act.load_link_secret(settings.data_dir)
        opened = None
        if app.state.read_model is None:
            try:
                opened = app.state.read_model = await asyncio.to_thread(
                    open_store, settings.data_dir, settings.read_model_url)
            except ReadModelError as err:  # reads answer 503 until it can be opened
                log.error("the read model cannot be opened: %s", err)
        app.state.notify = await asyncio.to_thread(_notify_state, notify_settings)
        try:
            yield
        finally:
            app.state.outbox = None
            if opened is not None:
                app.state.read_model = None
                await asyncio.to_thread(opened.close)

    app = FastAPI(
        title="hitlflow", version="0.1.0", lifespan=lifespan,
        description="Durable, observable, human-in-the-loop agent sessions on Temporal. "
        "Every error is `{\"error\": {\"code\", \"message\"}}` with a 4xx status; a 503 "
        "means Temporal is unreachable or no worker answered in time.",
    )
    app.state.settings, app.state.tuning, app.state.client = settings, tuning, client
    app.state.event_provider, app.state.stream_head = event_provider, stream_head
    app.state.on_change = on_change or _nobody
    app.state.delta_bus = delta_bus
    app.state.log_views = LogViews(settings.data_dir / "runs")
    app.state.read_model = read_model
    app.state.stuck_watch = StuckWatch()
    app.state.notify, app.state.outbox = NotifyState(), None  # loaded in the lifespan
    app.state.link_secret = None  # read in the lifespan (api.http.routers.act)
    app.state.stopping = asyncio.Event()  # set first on shutdown: SSE streams end
    errors.install(app)
    app.include_router(health.router)
    app.include_router(inbox.router)
    for router in (sessions.router, session_list.router, past.router, events.router,
                   execution.router, audit.router, whoami.router, oidc_login.router,
                   notifications.router, act.router, fork.router):
        app.include_router(router, responses=errors.ERROR_RESPONSES)
    app.add_middleware(JsonLimits, max_depth=settings.max_json_depth)  # inside BodyLimit
    app.add_middleware(BodyLimit, limit=tuning.max_body_bytes)
    doors.install(app, settings)  # they run first: Host, CORS, JSON bodies, the token
    return app


def _notify_state(settings: NotifySettings | None) -> NotifyState:
    """The notify config, or why it cannot be used (logged; the API runs without it)."""
    try:
        return NotifyState(config=(settings or NotifySettings()).load())
    except (NotifyConfigError, ValueError) as err:
        log.error("notifications: %s", err)
        return NotifyState(error=str(err))


# -- serving -----------------------------------------------------------------------------


class ApiStartError(Exception):
    pass


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the caller owns SIGINT/SIGTERM (`hitlflow up`, `hitlflow api`, tests)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket. Its proto must say TCP: asyncio sets TCP_NODELAY only on
    such sockets, and without it every response waits ~40 ms for a delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


#: Seconds an idle HTTP keep-alive connection stays open.
KEEP_ALIVE_S = 30


class ApiServer:
    """uvicorn serving ``app`` on a socket bound up front (so a busy port is an
    error here, not a ``sys.exit`` inside uvicorn). Port 0 picks a free one."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                 shutdown_timeout_s: int = 5) -> None:
        self.app, self.host, self.port = app, host, port
        # Idle keep-alive connections live longer than clients keep them (httpx: 5 s),
        # so a client never reuses one at the moment the server closes it (a reset).
        # proxy_headers off: the client address is the TCP peer's, never what an
        # X-Forwarded-For says (the doors trust a proxy's identity headers by it).
        # access_log off: at level warning no access line is written anyway, but uvicorn
        # would still format each one's client and quoted path per response.
        self._config = uvicorn.Config(app, log_level="warning", lifespan="on",
                                      proxy_headers=False, access_log=False,
                                      timeout_keep_alive=KEEP_ALIVE_S,
                                      timeout_graceful_shutdown=shutdown_timeout_s)
        self._server = _Server(self._config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self, timeout_s: float = 30.0) -> None:
        try:
            sock = _listen(self.host, self.port)
        except OSError as err:
            raise ApiStartError(f"the API cannot listen on {self.host}:{self.port}: {err}"
                                ) from None
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="api")
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not self._server.started:
            if self._task.done():
                why = "cancelled" if self._task.cancelled() else repr(self._task.exception())
                raise ApiStartError(f"the API did not start: {why}")
            if asyncio.get_running_loop().time() > deadline:
                await self.stop()
                raise ApiStartError(f"the API did not start within {timeout_s} s")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        stopping = getattr(self.app.state, "stopping", None)
        if stopping is not None:
            stopping.set()
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await self._task

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set (or the server stops by itself)."""
        assert self._task is not None, "start() first"
        waiter = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            await self.stop()


async def run_api(settings: HitlflowSettings, stop: asyncio.Event,
                  client: Client | None = None,
                  on_serving: Callable[[], object] | None = None) -> None:
    """Serve the API on ``settings.api_host:api_port`` until ``stop`` is set; with the
    read model in PostgreSQL, SSE streams hear the workers' text deltas there.
    ``on_serving()`` once it listens."""
    deltas = cluster_delta_bus(settings.read_model_url)
    if deltas is not None:
        deltas.listen()
    server = ApiServer(create_app(settings, client, delta_bus=deltas), settings.api_host,
                       settings.api_port)
    try:
        await server.start()
        if on_serving is not None:
            on_serving()
        await server.serve_until(stop)
    finally:
        if deltas is not None:
            await asyncio.to_thread(deltas.close)
