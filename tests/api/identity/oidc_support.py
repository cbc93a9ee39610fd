"""A real OpenID Connect provider for the tests (``oidc-provider-mock``, in a thread on
127.0.0.1), and what the tests do at it as a browser would."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import oidc_provider_mock
import werkzeug.serving
from fastapi import FastAPI, Request

from api.http import errors
from api.http.deps import PrincipalDep
from api.http.doors import set_principal
from api.http.routers import inbox, oidc_login
from api.identity.oidc import OidcBearer

CLIENT = "hitlflow-inbox"
SECRET = "mock-client-secret"  # the provider's token endpoint wants one (any value)
REDIRECT = "http://127.0.0.1:8000/"
USERS = [
    oidc_provider_mock.User(sub="alice", claims={
        "name": "Alice Example", "email": "alice@example.com", "email_verified": True,
        "groups": ["approvers", "staff"]}),
    oidc_provider_mock.User(sub="bob", claims={
        "preferred_username": "bob", "email": "boss@example.com", "email_verified": False,
        "groups": "staff"}),
    oidc_provider_mock.User(sub="carol", claims={
        "realm_access": {"roles": ["approvers"]}, "groups": [1, 2]}),
]


class Provider:
    """The provider in a thread, on one port; ``restart`` brings it back on the same
    port (same issuer) with a new signing key: a key rotation."""

    def __init__(self, max_age: timedelta = timedelta(hours=1)) -> None:
        self.max_age = max_age
        self.port = 0
        self._start()

    def _start(self) -> None:
        app = oidc_provider_mock.app(user_claims=USERS, access_token_max_age=self.max_age)
        self.server = werkzeug.serving.make_server("127.0.0.1", self.port, app,
                                                   threaded=True)
        self.port = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def restart(self) -> None:
        self.stop()
        self._start()

    def authorize(self, sub: str, *, client_id: str = CLIENT, host: str | None = None,
                  redirect_uri: str = REDIRECT, challenge: str = "x" * 43) -> str:
        """The authorization-code flow's browser part: the provider's page, its form
        with a subject, the redirect back with a code."""
        base = f"http://{host or '127.0.0.1'}:{self.port}"
        params = {"client_id": client_id, "redirect_uri": redirect_uri,
                  "response_type": "code", "scope": "openid profile email",
                  "state": "st-1", "code_challenge": challenge,
                  "code_challenge_method": "S256"}
        with httpx.Client(base_url=base) as http:
            page = http.get("/oauth2/authorize", params=params)
            assert page.status_code == 200 and 'name="sub"' in page.text
            back = http.post("/oauth2/authorize", params=params, data={"sub": sub})
        assert back.status_code == 302, back.text
        location = urlsplit(back.headers["location"])
        assert f"{location.scheme}://{location.netloc}{location.path}" == redirect_uri
        query = parse_qs(location.query)
        assert query["state"] == ["st-1"]
        return query["code"][0]

    def id_token(self, sub: str, *, client_id: str = CLIENT, host: str | None = None) -> str:
        code = self.authorize(sub, client_id=client_id, host=host)
        base = f"http://{host or '127.0.0.1'}:{self.port}"
        answer = httpx.post(f"{base}/oauth2/token", data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "client_id": client_id, "client_secret": SECRET, "code_verifier": "v" * 43})
        assert answer.status_code == 200, answer.text
        return answer.json()["id_token"]

    def person(self, sub: str, **claims: Any) -> str:
        """Make (or change) a person at the provider and sign them in: their ID token
        (e.g. ``person("ann", groups=["approvers"], name="Ann")``)."""
        made = httpx.put(f"{self.issuer}/users/{sub}", json=claims)
        assert made.status_code == 204, made.text
        return self.id_token(sub)

    def public_jwk(self) -> dict[str, Any]:
        return httpx.get(f"{self.issuer}/jwks").json()["keys"][0]


AUTH_CONFIG = "/api/auth/config"


def api_app(bearer: OidcBearer | None, *, with_inbox: bool = False) -> FastAPI:
    """The token route and one authenticated route (``/api/me``), behind a small
    middleware doing what the doors do with an authenticator (the lead wires OidcBearer
    into the real ones); ``with_inbox``: also the inbox and an open ``/api/auth/config``
    with the oidc part. ``app.state.seen`` lists every request's path and query."""
    app = FastAPI()
    errors.install(app)
    app.state.oidc_bearer = bearer
    app.state.seen = []
    app.include_router(oidc_login.router)
    open_paths = set(oidc_login.PATHS)
    if with_inbox:
        app.include_router(inbox.router)
        open_paths |= {*inbox.PATHS, AUTH_CONFIG}

        @app.get(AUTH_CONFIG)
        async def auth_config() -> dict[str, Any]:
            assert bearer is not None
            return {"mode": "oidc", "oidc": await bearer.inbox_config()}

    @app.middleware("http")
    async def authenticate(request: Request, call_next):  # type: ignore[no-untyped-def]
        app.state.seen.append(str(request.url.path) + "?" + request.url.query)
        if request.url.path not in open_paths:
            try:
                principal = None if bearer is None else \
                    await bearer.authenticate(request.headers, None)
            except Exception as err:
                if bearer is None or not isinstance(err, bearer.error_class):
                    raise
                return errors.error_response(401, "unauthorized", str(err))
            if principal is None:
                return errors.error_response(401, "unauthorized", "a bearer token is required")
            set_principal(request.scope, principal)
        return await call_next(request)

    @app.get("/api/me")
    async def me(principal: PrincipalDep) -> dict[str, Any]:
        return principal.model_dump()

    return app
