"""The ``oidc`` auth mode against a real OpenID Connect provider that the test starts
(``oidc-provider-mock``: discovery, JWKS, the authorization-code flow, signed ID
tokens), on 127.0.0.1: the authenticator on its own (it takes Headers) and behind a
small FastAPI app with the token route of the inbox's sign-in.

Tokens the provider would never issue (``alg: none``, HS256 "signed" with its public
key, made-up key ids, a claim set of our choosing) are forged here the way an attacker
would forge them."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import importlib.util
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from pydantic import ValidationError
from starlette.datastructures import Headers

from api.http.routers import oidc_login
from api.identity.oidc import OidcBearer, oidc_inbox_config
from api.identity.oidc_settings import OidcSettings
from api.settings import HitlflowSettings
from tests.api.identity.oidc_support import CLIENT, REDIRECT, SECRET, Provider, api_app
from workflows.people import Principal

#: The provider's own library (authlib) warns about its deprecated APIs on each token.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:authlib.*")


def role_of(groups: Any) -> str:
    """The test's role mapping (the lead wires api.identity.roles.role_from_groups)."""
    return "approver" if "approvers" in groups else "viewer"


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    p = Provider()
    try:
        yield p
    finally:
        p.stop()


class Clock:
    """The authenticator's monotonic clock, moved by the test (the refetch limit)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """Every request the authenticator's HTTP client makes, by URL path."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, request: httpx.Request) -> None:
        self.paths.append(request.url.path)

    def count(self, path: str) -> int:
        return self.paths.count(path)


@pytest.fixture
async def make_bearer() -> AsyncIterator[Callable[..., tuple[OidcBearer, Recorder, Clock]]]:
    made: list[httpx.AsyncClient] = []

    def make(issuer: str, **settings: Any) -> tuple[OidcBearer, Recorder, Clock]:
        recorder, clock = Recorder(), Clock()
        http = httpx.AsyncClient(timeout=5, event_hooks={"request": [recorder]})
        made.append(http)
        values = {"issuer": issuer, "client_id": CLIENT, "client_secret": SECRET,
                  "redirect_url": REDIRECT, **settings}
        bearer = OidcBearer(OidcSettings(**values), role_of=role_of, http=http,
                            clock=clock)
        return bearer, recorder, clock

    yield make
    for http in made:
        await http.aclose()


def bearer_headers(token: str) -> Headers:
    return Headers({"authorization": f"Bearer {token}"})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], claims: dict[str, Any], sign: Callable[[bytes], bytes]) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64(sign(signing_input.encode()))}"


def claims_for(issuer: str, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": issuer, "sub": "mallory", "aud": CLIENT, "iat": now, "exp": now + 600,
            "groups": ["approvers"], **extra}


# -- what the authenticator accepts ------------------------------------------------------


async def test_a_valid_token_is_a_person_with_groups_and_role(provider: Provider,
                                                              make_bearer) -> None:
    bearer, recorder, _ = make_bearer(provider.issuer)
    token = provider.id_token("alice")
    principal = await bearer.authenticate(bearer_headers(token), "127.0.0.1")
    assert principal == Principal(
        issuer=provider.issuer, subject="alice", name="Alice Example",
        groups=["approvers", "staff"], email="alice@example.com", role="approver",
        kind="person")
    # The discovery document once, the keys once; a second request fetches nothing.
    assert recorder.paths == ["/.well-known/openid-configuration", "/jwks"]
    assert await bearer.authenticate(bearer_headers(token), None) == principal
    assert len(recorder.paths) == 2


async def test_name_email_and_groups_come_from_the_claims(provider: Provider,
                                                          make_bearer) -> None:
    bearer, _, _ = make_bearer(provider.issuer)
    bob = await bearer.verify(provider.id_token("bob"))
    # preferred_username names him; an unverified address names no one; one group.
    assert (bob.name, bob.email, bob.groups, bob.role) == ("bob", None, ["staff"], "viewer")
    # Another groups claim, by a path into an object (Keycloak's realm roles).
    nested, _, _ = make_bearer(provider.issuer, groups_claim="realm_access.roles")
    carol = await nested.verify(provider.id_token("carol"))
    assert (carol.name, carol.groups, carol.role) == ("carol", ["approvers"], "approver")
    # A person made at the provider now, with the groups of an approver.
    dana = await bearer.verify(provider.person("dana", name="Dana", groups=["approvers"]))
    assert (dana.subject, dana.name, dana.groups, dana.role) == \
        ("dana", "Dana", ["approvers"], "approver")
    # A groups claim that is not a list of strings is refused, not guessed at.
    with pytest.raises(bearer.error_class, match="'groups' claim is not a list of strings"):
        await bearer.verify(provider.id_token("carol"))


async def test_credentials_that_are_no_jwt_are_left_to_the_others(provider: Provider,
                                                                  make_bearer) -> None:
    bearer, recorder, _ = make_bearer(provider.issuer)
    for headers in ({}, {"authorization": "Bearer hf_local-key_abc"},
                    {"authorization": "Basic YWxpY2U6cHc="},
                    {"authorization": "Bearer a.b.c.d"}, {"authorization": "Bearer"}):
        assert await bearer.authenticate(Headers(headers), None) is None
    assert recorder.paths == []  # and nothing was fetched for them


# -- what it refuses ---------------------------------------------------------------------


async def test_an_expired_token_is_refused_and_the_leeway_tolerates_skew(make_bearer) -> None:
    expired = Provider(max_age=timedelta(seconds=-300))
    skewed = Provider(max_age=timedelta(seconds=-5))
    try:
        bearer, _, _ = make_bearer(expired.issuer, leeway_s=30)
        with pytest.raises(bearer.error_class, match="it has expired"):
            await bearer.verify(expired.id_token("alice"))
        lenient, _, _ = make_bearer(skewed.issuer, leeway_s=120)
        assert (await lenient.verify(skewed.id_token("alice"))).subject == "alice"
        strict, _, _ = make_bearer(skewed.issuer, leeway_s=0)
        with pytest.raises(strict.error_class, match="it has expired"):
            await strict.verify(skewed.id_token("alice"))
    finally:
        expired.stop()
        skewed.stop()


async def test_a_token_for_another_audience_is_refused(provider: Provider,
                                                       make_bearer) -> None:
    bearer, _, _ = make_bearer(provider.issuer)
    other = provider.id_token("alice", client_id="another-app")
    with pytest.raises(bearer.error_class, match="audience"):
        await bearer.verify(other)
    # The audience may be set apart from the client id (an API's own audience).
    for_other, _, _ = make_bearer(provider.issuer, audience="another-app")
    assert (await for_other.verify(other)).subject == "alice"


async def test_a_token_of_another_issuer_is_refused_before_any_fetch(provider: Provider,
                                                                     make_bearer) -> None:
    # Same provider, same key; the token's iss names the address it was asked at.
    bearer, recorder, _ = make_bearer(f"http://localhost:{provider.port}")
    token = provider.id_token("alice", host="127.0.0.1")
    with pytest.raises(bearer.error_class, match="not issued by the configured issuer"):
        await bearer.verify(token)
    assert recorder.paths == []


async def test_alg_none_is_refused(provider: Provider, make_bearer) -> None:
    bearer, _, _ = make_bearer(provider.issuer)
    for alg in ("none", "None", "NONE"):
        token = forged({"alg": alg, "typ": "JWT"}, claims_for(provider.issuer),
                       lambda _: b"")
        with pytest.raises(bearer.error_class, match="is not accepted"):
            await bearer.authenticate(bearer_headers(token), None)


async def test_hs256_signed_with_the_public_key_is_refused(provider: Provider,
                                                           make_bearer) -> None:
    bearer, _, _ = make_bearer(provider.issuer)
    jwk = provider.public_jwk()
    pem = jwt.PyJWK(jwk).key.public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    for header in ({"alg": "HS256"}, {"alg": "HS256", "kid": jwk["kid"]}):
        token = forged(header, claims_for(provider.issuer),
                       lambda data: hmac.new(pem, data, hashlib.sha256).digest())
        with pytest.raises(bearer.error_class, match="algorithm 'HS256' is not accepted"):
            await bearer.verify(token)
    # Even with HS256 wrongly in the allow-list the settings refuse to run.
    with pytest.raises(ValidationError, match="HS256 not accepted"):
        OidcSettings(issuer=provider.issuer, client_id=CLIENT, algorithms="RS256,HS256")


async def test_a_token_signed_by_another_key_is_refused(provider: Provider,
                                                        make_bearer) -> None:
    bearer, _, _ = make_bearer(provider.issuer)
    await bearer.verify(provider.id_token("alice"))  # the keys are had
    mine = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    kid = provider.public_jwk()["kid"]
    token = jwt.encode(claims_for(provider.issuer), mine, algorithm="RS256",
                       headers={"kid": kid})
    with pytest.raises(bearer.error_class, match="signature does not verify"):
        await bearer.verify(token)
    # An algorithm that does not fit the key's type.
    token = forged({"alg": "ES256", "kid": kid}, claims_for(provider.issuer),
                   lambda _: b"\0" * 64)
    with pytest.raises(bearer.error_class, match="does not fit the key's type"):
        await bearer.verify(token)


async def test_garbage_token_parts_are_refused_clearly(provider: Provider,
                                                       make_bearer) -> None:
    bearer, _, _ = make_bearer(provider.issuer)
    for token in ("a.b.c", "eyJhbGciOiJSUzI1NiJ9.e30.", "..", "x" * 20_000 + ".a.b"):
        with pytest.raises(bearer.error_class) as refused:
            await bearer.authenticate(bearer_headers(token), None)
        assert str(refused.value).startswith("invalid OpenID Connect token: ")
        assert token not in str(refused.value)


# -- keys: rotation and the refetch limit -------------------------------------------------


async def test_a_rotated_key_is_accepted_after_the_refetch() -> None:
    rotating = Provider()
    http = httpx.AsyncClient(timeout=5)
    recorder, clock = Recorder(), Clock()
    http.event_hooks["request"] = [recorder]
    bearer = OidcBearer(OidcSettings(issuer=rotating.issuer, client_id=CLIENT,
                                     jwks_refresh_min_s=60), role_of=role_of, http=http,
                        clock=clock)
    try:
        old = rotating.id_token("alice")
        assert (await bearer.verify(old)).subject == "alice"
        rotating.restart()  # the same issuer, a new signing key
        new = rotating.id_token("alice")
        assert jwt.get_unverified_header(new) == jwt.get_unverified_header(old)  # no kid
        # Within the refetch limit the old keys stand: refused, nothing fetched.
        with pytest.raises(bearer.error_class, match="signature does not verify"):
            await bearer.verify(new)
        assert recorder.count("/jwks") == 1
        clock.now += 60
        assert (await bearer.verify(new)).subject == "alice"
        assert recorder.count("/jwks") == 2
        # The withdrawn key no longer verifies anything.
        with pytest.raises(bearer.error_class, match="signature does not verify"):
            await bearer.verify(old)
    finally:
        await http.aclose()
        rotating.stop()


async def test_made_up_key_ids_refetch_no_more_than_the_limit(provider: Provider,
                                                              make_bearer) -> None:
    bearer, recorder, clock = make_bearer(provider.issuer, jwks_refresh_min_s=30)
    await bearer.verify(provider.id_token("alice"))
    assert recorder.count("/jwks") == 1
    mine = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    async def try_garbage(n: int) -> None:
        for _ in range(n):
            token = jwt.encode(claims_for(provider.issuer), mine, algorithm="RS256",
                               headers={"kid": secrets.token_hex(8)})
            with pytest.raises(bearer.error_class, match="a key the provider does not list"):
                await bearer.verify(token)

    clock.now += 30  # one refetch is due: the first made-up kid takes it
    await try_garbage(25)
    assert recorder.count("/jwks") == 2
    clock.now += 29
    await try_garbage(5)
    assert recorder.count("/jwks") == 2
    clock.now += 1
    await try_garbage(5)
    assert recorder.count("/jwks") == 3
    # Arriving all at once, they still make one request.
    clock.now += 30
    await asyncio.gather(*(try_garbage(1) for _ in range(20)))
    assert recorder.count("/jwks") == 4
    assert recorder.count("/.well-known/openid-configuration") == 1
    # The real key still works all along.
    assert (await bearer.verify(provider.id_token("alice"))).subject == "alice"


async def test_an_unreachable_provider_is_a_clear_401(free_port: Callable[[], int],
                                                      make_bearer) -> None:
    issuer = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    bearer, recorder, clock = make_bearer(issuer, jwks_refresh_min_s=10)
    token = jwt.encode(claims_for(issuer),
                       rsa.generate_private_key(public_exponent=65537, key_size=2048),
                       algorithm="RS256")
    with pytest.raises(bearer.error_class,
                       match=r"keys are not available \(the provider's discovery document "
                             rf"at {issuer}/.well-known/openid-configuration could not be "
                             r"fetched \(ConnectError"):
        await bearer.verify(token)
    # Asked again at once: the same answer, the provider not asked again.
    with pytest.raises(bearer.error_class, match="keys are not available"):
        await bearer.verify(token)
    assert len(recorder.paths) == 1
    clock.now += 10
    with pytest.raises(bearer.error_class, match="keys are not available"):
        await bearer.verify(token)
    assert len(recorder.paths) == 2
    # The inbox's config (an open route) says the endpoint is unknown, and asks the
    # provider no more often than the keys are asked for.
    for _ in range(3):
        assert await bearer.inbox_config() == {
            "issuer": issuer, "authorization_endpoint": None, "client_id": CLIENT,
            "scopes": "openid profile email", "redirect_url": REDIRECT,
            "token_path": "/api/auth/oidc/token"}
    assert len(recorder.paths) == 2


async def test_a_discovery_document_of_another_issuer_is_refused(provider: Provider,
                                                                 make_bearer) -> None:
    bearer, recorder, _ = make_bearer(provider.issuer + "/")
    token = forged({"alg": "RS256"}, claims_for(provider.issuer + "/"), lambda _: b"s")
    with pytest.raises(bearer.error_class,
                       match=f"names issuer '{provider.issuer}', not HITLFLOW_OIDC_ISSUER"):
        await bearer.verify(token)
    assert recorder.paths == ["/.well-known/openid-configuration"]


async def test_settings_refuse_what_cannot_be_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    for algorithms, refused in (("none", "none"), ("RS256, HS512", "HS512"), ("", "names no")):
        with pytest.raises(ValidationError, match=refused):
            OidcSettings(algorithms=algorithms)
    with pytest.raises(ValidationError, match="must use https"):
        OidcSettings(issuer="http://login.example.com")
    with pytest.raises(ValidationError, match="must include openid"):
        OidcSettings(scopes="profile email")
    with pytest.raises(ValueError, match="needs HITLFLOW_OIDC_ISSUER"):
        OidcBearer(OidcSettings(client_id=CLIENT))
    monkeypatch.setenv("HITLFLOW_OIDC_ISSUER", "https://login.example.com/realms/staff")
    monkeypatch.setenv("HITLFLOW_OIDC_CLIENT_ID", "inbox")
    monkeypatch.setenv("HITLFLOW_OIDC_CLIENT_SECRET", "s3cret")
    monkeypatch.setenv("HITLFLOW_OIDC_ALGORITHMS", "ES256, RS256")
    settings = OidcSettings()
    assert (settings.expected_audience, settings.algorithms) == ("inbox", ["ES256", "RS256"])
    assert "s3cret" not in repr(settings)
    config = await oidc_inbox_config(settings)
    assert (config["client_id"], config["authorization_endpoint"]) == ("inbox", None)
    assert "s3cret" not in json.dumps(config)


async def test_the_servers_settings_and_the_open_routes(provider: Provider,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the doors and the auth config route call it: with the server's settings, the
    HITLFLOW_OIDC_* ones from the environment and roles from HITLFLOW_ROLE_GROUPS."""
    for name, value in {"ISSUER": provider.issuer, "CLIENT_ID": CLIENT,
                        "CLIENT_SECRET": SECRET}.items():
        monkeypatch.setenv(f"HITLFLOW_OIDC_{name}", value)
    monkeypatch.setenv("HITLFLOW_ROLE_GROUPS", "approver=approvers")
    bearer = OidcBearer(HitlflowSettings())
    try:
        alice = await bearer.verify(provider.id_token("alice"))
        # Roles are the identity package's (api.identity.roles), once it is there.
        has_roles = importlib.util.find_spec("api.identity.roles") is not None
        assert alice.role == ("approver" if has_roles else "viewer")
        config = await oidc_inbox_config(HitlflowSettings())
        assert config["authorization_endpoint"] == f"{provider.issuer}/oauth2/authorize"
        # The token route finds the doors' bearer when the app was not handed one.
        verifier, challenge = pkce()
        code = provider.authorize("alice", challenge=challenge)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api_app(None)),
                                     base_url="http://127.0.0.1:8000") as api:
            answer = await api.post(oidc_login.TOKEN_PATH, json={
                "code": code, "code_verifier": verifier, "redirect_uri": REDIRECT})
        assert answer.status_code == 200, answer.text
        assert answer.json()["principal"]["subject"] == "alice"
    finally:
        await bearer.aclose()
    monkeypatch.delenv("HITLFLOW_OIDC_ISSUER")
    with pytest.raises(ValueError, match="needs HITLFLOW_OIDC_ISSUER"):
        OidcBearer(HitlflowSettings())


# -- behind an app: the sign-in's token route, then an authenticated call -----------------


def pkce() -> tuple[str, str]:
    verifier = b64(secrets.token_bytes(48))
    return verifier, b64(hashlib.sha256(verifier.encode()).digest())


async def test_the_code_flow_end_to_end(provider: Provider, make_bearer) -> None:
    bearer, _, _ = make_bearer(provider.issuer)
    assert (await bearer.inbox_config())["authorization_endpoint"] == \
        f"{provider.issuer}/oauth2/authorize"
    verifier, challenge = pkce()
    code = provider.authorize("alice", challenge=challenge)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api_app(bearer)),
                                 base_url="http://127.0.0.1:8000") as api:
        assert (await api.get("/api/me")).status_code == 401
        body = {"code": code, "code_verifier": verifier, "redirect_uri": REDIRECT}
        answer = await api.post(oidc_login.TOKEN_PATH, json=body)
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"] == "no-store"
        signed_in = answer.json()
        assert signed_in["principal"]["subject"] == "alice"
        assert signed_in["principal"]["role"] == "approver"
        assert signed_in["expires_at"] > time.time()
        me = await api.get("/api/me",
                           headers={"Authorization": f"Bearer {signed_in['token']}"})
        assert me.status_code == 200
        assert (me.json()["subject"], me.json()["issuer"]) == ("alice", provider.issuer)
        # A code is good once.
        again = await api.post(oidc_login.TOKEN_PATH, json=body)
        assert again.status_code == 400
        assert again.json()["error"]["code"] == "oidc_code_refused"
        # A forged token through the same door: 401 with why, never a 5xx.
        none = forged({"alg": "none"}, claims_for(provider.issuer), lambda _: b"")
        refused = await api.get("/api/me", headers={"Authorization": f"Bearer {none}"})
        assert refused.status_code == 401
        assert "is not accepted" in refused.json()["error"]["message"]


async def test_the_token_route_refuses_broken_input(provider: Provider,
                                                    make_bearer) -> None:
    bearer, recorder, _ = make_bearer(provider.issuer)
    verifier, _ = pkce()
    good = {"code": "abc", "code_verifier": verifier, "redirect_uri": REDIRECT}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api_app(bearer)),
                                 base_url="http://127.0.0.1:8000") as api:
        for body, status, code in (
            ({**good, "code_verifier": "short"}, 422, "validation_error"),
            ({**good, "code_verifier": "é" * 43}, 422, "invalid_oidc_request"),
            ({**good, "code": "has space"}, 422, "invalid_oidc_request"),
            ({**good, "redirect_uri": "https://evil.example/"}, 422, "invalid_oidc_request"),
            ({**good, "extra": 1}, 422, "validation_error"),
            ({"code": "abc"}, 422, "validation_error"),
        ):
            answer = await api.post(oidc_login.TOKEN_PATH, json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), body
        assert recorder.paths == []  # none of them reached the provider
        unknown = await api.post(oidc_login.TOKEN_PATH, json=good)
        assert (unknown.status_code, unknown.json()["error"]["code"]) == \
            (400, "oidc_code_refused")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api_app(None)),
                                 base_url="http://127.0.0.1:8000") as api:
        answer = await api.post(oidc_login.TOKEN_PATH, json=good)
        assert (answer.status_code, answer.json()["error"]["code"]) == \
            (404, "oidc_not_configured")


async def test_the_token_route_says_when_the_provider_is_down(
        free_port: Callable[[], int], make_bearer) -> None:
    bearer, _, _ = make_bearer(f"http://127.0.0.1:{free_port()}")
    verifier, _ = pkce()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api_app(bearer)),
                                 base_url="http://127.0.0.1:8000") as api:
        answer = await api.post(oidc_login.TOKEN_PATH, json={
            "code": "abc", "code_verifier": verifier, "redirect_uri": REDIRECT})
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "oidc_provider_unavailable"
    assert "could not be fetched" in answer.json()["error"]["message"]


# -- key ids: a provider of the test's own whose keys it rotates -------------------------


class KeyServer:
    """A real HTTP server with a discovery document and a JWKS the test changes (the
    mock provider signs without key ids and cannot rotate on its own)."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": outer.issuer, "jwks_uri": f"{outer.issuer}/keys"}
                elif self.path == "/keys":
                    body = {"keys": outer.keys}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def public_jwk(private: Any, kid: str, **extra: Any) -> dict[str, Any]:
    jwk_json = (jwt.algorithms.RSAAlgorithm if isinstance(private, rsa.RSAPrivateKey)
                else jwt.algorithms.ECAlgorithm).to_jwk(private.public_key())
    return {**json.loads(jwk_json), "kid": kid, **extra}


@pytest.fixture
def key_server() -> Iterator[KeyServer]:
    server = KeyServer()
    try:
        yield server
    finally:
        server.stop()


async def test_a_new_key_id_is_fetched_and_a_withdrawn_one_ages_out(key_server: KeyServer,
                                                                    make_bearer) -> None:
    old = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    new = ec.generate_private_key(ec.SECP256R1())
    key_server.keys = [public_jwk(old, "k-old", use="sig")]
    bearer, recorder, clock = make_bearer(key_server.issuer, jwks_refresh_min_s=60,
                                          jwks_max_age_s=600)
    claims = claims_for(key_server.issuer)
    signed_old = jwt.encode(claims, old, algorithm="PS256", headers={"kid": "k-old"})
    assert (await bearer.verify(signed_old)).subject == "mallory"
    # The provider rotates: a new key (EC), the old one still listed for a while.
    key_server.keys = [public_jwk(new, "k-new"), public_jwk(old, "k-old"),
                       public_jwk(new, "k-enc", use="enc")]
    signed_new = jwt.encode(claims, new, algorithm="ES256", headers={"kid": "k-new"})
    enc_kid = jwt.encode(claims, new, algorithm="ES256", headers={"kid": "k-enc"})
    clock.now += 60
    assert (await bearer.verify(signed_new)).subject == "mallory"
    assert recorder.count("/keys") == 2
    with pytest.raises(bearer.error_class, match="a key the provider does not list"):
        await bearer.verify(enc_kid)  # a key for encryption signs nothing
    # The old key is withdrawn: accepted until the kept keys age out, then refused.
    key_server.keys = [public_jwk(new, "k-new")]
    assert (await bearer.verify(signed_old)).subject == "mallory"
    clock.now += 600
    with pytest.raises(bearer.error_class, match="a key the provider does not list"):
        await bearer.verify(signed_old)
    assert recorder.count("/keys") == 3
    assert (await bearer.verify(signed_new)).subject == "mallory"
    # A key that names its algorithm refuses another one, even of its family.
    key_server.keys = [public_jwk(old, "k-rs", alg="RS256")]
    clock.now += 600
    with pytest.raises(bearer.error_class, match=r"does not fit its key \(RS256\)"):
        await bearer.verify(jwt.encode(claims, old, algorithm="PS256",
                                       headers={"kid": "k-rs"}))
    assert recorder.count("/.well-known/openid-configuration") == 1
