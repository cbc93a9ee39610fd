"""The API's doors: what a request must show before anything of the API runs for it
(docs/security.md, "The HTTP API"). In the order they are checked:

1. ``HostAllowList``: the ``Host`` header names this API (``localhost``, ``127.0.0.1``,
   ``[::1]``, any port; ``HITLFLOW_API_ALLOWED_HOSTS`` otherwise), else 400: a page of
   another site that rebinds its own name to 127.0.0.1 (DNS rebinding) gets nothing.
2. CORS (Starlette's), only with ``HITLFLOW_API_CORS_ORIGINS``: closed by default.
3. ``JsonBodies``: a request that could change something (POST, PUT, PATCH, DELETE to
   a route that takes it) says ``Content-Type: application/json``, an empty body
   included, else 415 before its body is read. A browser sends such a request to
   another origin only after a preflight the API never grants, so a form, a
   ``text/plain`` or an empty POST from another site changes nothing.
4. ``Authenticate``: who makes the request (``api.identity.principals``: the API token,
   a person's key, the proxy's headers or an OIDC token, by ``HITLFLOW_AUTH_MODE``),
   everywhere but ``OPEN_PATHS`` (``/healthz``, ``/api/auth/config`` and the inbox's
   static files, which hold no data; the action-link routes, whose signed token is the
   credential), else 401. The principal goes to
   ``scope["state"]["principal"]`` (``deps.PrincipalDep``). Credentials are compared in
   constant time and never logged. An API nobody could sign in to does not start,
   unless ``HITLFLOW_API_AUTH=off`` says so (``check_auth``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from api.hosts import host_name
from api.http import errors
from api.http.routers import act, inbox, oidc_login
from api.identity.principals import AuthConfigError as AuthConfigError  # raised by check_auth
from api.identity.principals import Chain, Unauthenticated, authenticators
from api.settings import HitlflowSettings
from workflows.people import Principal

#: Paths open without a token: they hold no data.
OPEN_PATHS = frozenset({"/healthz", "/api/auth/config", *inbox.PATHS, *oidc_login.PATHS,
                        *act.PATHS})  # action links: the token is the credential
#: The methods of requests that may change something.
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: What ``api_host`` may be that names no one host (every interface).
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def check_auth(settings: HitlflowSettings) -> Chain | None:
    """Who the API lets in under ``settings`` (None: everyone, authentication off).
    Raises :class:`AuthConfigError` when nobody could sign in, with the fix."""
    return authenticators(settings)


def allowed_hosts(settings: HitlflowSettings) -> frozenset[str]:
    """The names the API answers to: the configured ones and the address it is bound to."""
    names = {host_name(h) for h in settings.api_allowed_hosts}
    if settings.api_host not in _WILDCARDS:
        names.add(host_name(settings.api_host))
    return frozenset(names)


class HostAllowList:
    """400 ``host_not_allowed`` for a Host header that names no allowed host."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app, self.hosts = app, frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "*" in self.hosts:
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host", "")
        if host_name(host) in self.hosts:
            await self.app(scope, receive, send)
            return
        shown = repr(host[:100]) if host else "none"
        await errors.error_response(
            400, "host_not_allowed", f"this API does not answer to the Host {shown}: it "
            f"answers to {', '.join(sorted(self.hosts))} (HITLFLOW_API_ALLOWED_HOSTS)",
        )(scope, receive, send)


def is_json(content_type: str | None) -> bool:
    media = (content_type or "").partition(";")[0].strip().lower()
    return media == "application/json"


class JsonBodies:
    """415 ``unsupported_media_type`` for a state-changing request to a route that
    takes it, unless it says ``Content-Type: application/json`` (checked before the
    body is read). Other paths and methods go on to their 404 or 405."""

    def __init__(self, app: ASGIApp, routes: list[BaseRoute]) -> None:
        self.app, self.routes = app, routes

    def _routed(self, scope: Scope) -> bool:
        return any(route.matches(scope)[0] == Match.FULL for route in self.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in STATE_CHANGING or is_json(
                Headers(scope=scope).get("content-type")) or not self._routed(scope):
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("content-type")
        said = f"Content-Type {given[:100]!r}" if given else "no Content-Type"
        await errors.error_response(
            415, "unsupported_media_type", f"{scope['method']} {scope['path']} takes a JSON "
            f"body and this request has {said}: send Content-Type: application/json (and "
            "{} when there is nothing to say)",
        )(scope, receive, send)


def set_principal(scope: Scope, principal: Principal) -> None:
    """Where routes find the request's principal (``deps.PrincipalDep``)."""
    scope.setdefault("state", {})["principal"] = principal


class Authenticate:
    """Who makes each request, on every path but ``OPEN_PATHS``: the principal of
    ``chain``, set with :func:`set_principal`; 401 ``unauthorized`` (``WWW-Authenticate:
    Bearer``) without one."""

    def __init__(self, app: ASGIApp, chain: Chain) -> None:
        self.app, self.chain = app, chain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        try:
            principal = await self.chain.authenticate(Headers(scope=scope),
                                                      client[0] if client else None)
        except Unauthenticated as err:
            why = err.message
        else:
            if principal is not None:
                set_principal(scope, principal)
                await self.app(scope, receive, send)
                return
            why = "a bearer token is required"
        await errors.error_response(401, "unauthorized", why, {"WWW-Authenticate": "Bearer"})(
            scope, receive, send)


def _document(app: FastAPI, bearer: bool) -> None:
    """The doors in the OpenAPI document: the 415 of every state-changing operation,
    and the bearer token of every operation but the open ones."""
    base = app.openapi
    unsupported = {"description": "The request could change something and its body is not "
                   "JSON (`Content-Type: application/json`, `{}` when empty); nothing changed",
                   "content": {"application/json": {"schema": {
                       "$ref": "#/components/schemas/ErrorBody"}}}}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = base()
        if bearer:
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes["bearer"] = {"type": "http", "scheme": "bearer"}
        for path, operations in schema.get("paths", {}).items():
            for method, op in operations.items():
                if method.upper() in STATE_CHANGING:
                    op.setdefault("responses", {})["415"] = unsupported
                if bearer and path not in OPEN_PATHS:
                    op["security"] = [{"bearer": []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def install(app: FastAPI, settings: HitlflowSettings) -> None:
    """Put the doors in front of ``app`` (its last middlewares: they run first), in the
    order of this module's docstring. Raises :class:`AuthConfigError` (``check_auth``)."""
    chain = check_auth(settings)
    if chain is not None:
        app.add_middleware(Authenticate, chain=chain)
    _document(app, bearer=chain is not None)
    app.add_middleware(JsonBodies, routes=app.router.routes)
    if settings.api_cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.api_cors_origins,
            allow_methods=["GET", "POST"], max_age=600,
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"])
    app.add_middleware(HostAllowList, hosts=allowed_hosts(settings))
