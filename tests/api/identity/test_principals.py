"""Who the API takes a request for, tried over HTTP on a real uvicorn server on
127.0.0.1 (``GET /api/whoami``): people's keys (unknown, revoked, rotated, removed and
added while it runs), the API token as the service principal, an authenticating
proxy's headers from a trusted and an untrusted peer, and the settings that leave
nobody able to sign in (refused before the API starts)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from starlette.datastructures import Headers

from api.http.app import create_app
from api.http.doors import AuthConfigError, check_auth
from api.identity.people_store import PeopleStore
from api.identity.principals import Chain, ProxyHeaders, Unauthenticated
from api.identity.roles import role_from_groups
from api.settings import HitlflowSettings
from tests.api.http_support import serve

TOKEN = "identity-s3cret-token-0123456789"
#: Nothing listens there: these APIs never need Temporal (the client connects lazily).
NO_TEMPORAL = "127.0.0.1:9"


def settings_of(data_dir: Path, **extra: object) -> HitlflowSettings:
    """Settings of these tests alone: a HITLFLOW_API_TOKEN another test left in the
    environment (the benchmarks' helpers set one at import) is not theirs."""
    extra.setdefault("api_token", None)
    return HitlflowSettings(data_dir=data_dir, temporal_address=NO_TEMPORAL, **extra)


def bearer(credential: str) -> dict[str, str]:
    return {"authorization": f"Bearer {credential}"}


async def whoami(url: str, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        return await http.get("/api/whoami", headers=headers)


def refused(r: httpx.Response, said: str) -> None:
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthorized"
    assert said in r.json()["error"]["message"], r.text
    assert r.headers["www-authenticate"] == "Bearer"


async def test_local_people_sign_in_with_their_keys_while_it_runs(
        tmp_path: Path, free_port: Callable[[], int]):
    """A person added, rotated and removed while the API runs: each change counts at
    the next request, without a restart; wrong keys are 401 and say nothing of why."""
    store = PeopleStore(tmp_path)
    ada = store.add("ada", "approver", ["staff"], "ada@example.com")
    async with serve(create_app(settings_of(tmp_path)), free_port()) as server:
        r = await whoami(server.url, bearer(ada))
        assert r.status_code == 200, r.text
        assert r.json() == {"issuer": "local", "subject": "ada", "name": "ada",
                            "groups": ["staff"], "role": "approver", "kind": "person",
                            "email": "ada@example.com"}
        for wrong in (ada[:-2] + "xx", "hfk_0123456789abcdef_" + "y" * 43, "hfk_nope"):
            refused(await whoami(server.url, bearer(wrong)), "unknown, revoked or wrong")
        refused(await whoami(server.url, bearer("not-a-key")), "the bearer token is wrong")
        refused(await whoami(server.url, {}), "a bearer token is required")
        refused(await whoami(server.url, {"authorization": f"Basic {ada}"}),
                "not a bearer token")

        bob = store.add("bob", "viewer")  # added while it runs
        assert (await whoami(server.url, bearer(bob))).json()["role"] == "viewer"
        store.set_role("bob", "operator")
        assert (await whoami(server.url, bearer(bob))).json()["role"] == "operator"

        new = store.rotate("ada")  # the old key is revoked
        refused(await whoami(server.url, bearer(ada)), "unknown, revoked or wrong")
        assert (await whoami(server.url, bearer(new))).json()["subject"] == "ada"

        store.remove("ada")  # removal revokes
        refused(await whoami(server.url, bearer(new)), "unknown, revoked or wrong")
        assert (await whoami(server.url, bearer(bob))).status_code == 200

        # A people file broken while it runs: every key refused (fail closed), the
        # reason in the API's log and not in the answer.
        store.path.write_text("{broken")
        r = await whoami(server.url, bearer(bob))
        refused(r, "cannot read its people file")
        assert str(tmp_path) not in r.text


async def test_the_api_token_is_the_named_service_principal(
        tmp_path: Path, free_port: Callable[[], int]):
    PeopleStore(tmp_path).add("ada", "viewer")
    async with serve(create_app(settings_of(tmp_path, api_token=TOKEN)), free_port()) as srv:
        r = await whoami(srv.url, bearer(TOKEN))
        assert r.status_code == 200, r.text
        assert r.json() == {"issuer": "hitlflow", "subject": "service:api-token",
                            "name": "API token (automation)", "groups": [],
                            "role": "operator", "kind": "service", "email": None}
        refused(await whoami(srv.url, bearer(TOKEN + "x")), "the bearer token is wrong")
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
            config = await http.get("/api/auth/config")  # open: no credential
        assert config.status_code == 200 and config.json() == {"mode": "local"}


async def test_auth_off_is_the_anonymous_operator(tmp_path: Path, free_port: Callable[[], int]):
    settings = settings_of(tmp_path, api_auth="off")
    async with serve(create_app(settings), free_port()) as server:
        r = await whoami(server.url, {})
        assert r.json()["subject"] == "anonymous" and r.json()["role"] == "operator"
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            assert (await http.get("/api/auth/config")).json() == {"mode": "off"}


PROXIED = {"x-forwarded-user": "carol", "x-forwarded-email": "carol@example.com",
           "x-forwarded-groups": "staff, ops ,"}
ROLES = "admin=hitlflow-admins;operator=ops;approver=staff"


async def test_proxy_headers_from_the_trusted_proxy_make_the_principal(
        tmp_path: Path, free_port: Callable[[], int]):
    """The proxy is 127.0.0.1 (the test's own connections): its headers are believed;
    the role is the highest the groups give; the API token still works beside it."""
    settings = settings_of(tmp_path, auth_mode="proxy", proxy_trusted_addresses="127.0.0.1",
                           role_groups=ROLES, api_token=TOKEN)
    async with serve(create_app(settings), free_port()) as server:
        r = await whoami(server.url, PROXIED)
        assert r.status_code == 200, r.text
        assert r.json() == {"issuer": "proxy", "subject": "carol", "name": "carol",
                            "groups": ["staff", "ops"], "role": "operator", "kind": "person",
                            "email": "carol@example.com"}
        viewer = await whoami(server.url, {"x-forwarded-user": "dan",
                                           "x-forwarded-preferred-username": "Dan D."})
        assert viewer.json()["role"] == "viewer" and viewer.json()["groups"] == []
        assert (viewer.json()["subject"], viewer.json()["name"]) == ("dan", "Dan D.")
        assert (await whoami(server.url, bearer(TOKEN))).json()["kind"] == "service"
        refused(await whoami(server.url, {}), "a bearer token is required")
        refused(await whoami(server.url, {"x-forwarded-groups": "ops"}),
                "no usable X-Forwarded-User")
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            assert (await http.get("/api/auth/config")).json() == {"mode": "proxy"}


async def test_proxy_headers_from_an_untrusted_peer_are_refused(
        tmp_path: Path, free_port: Callable[[], int]):
    """The proxy is another address: the same headers from 127.0.0.1 are a 401, also
    with an X-Forwarded-For that names the proxy, or beside the right token."""
    settings = settings_of(tmp_path, auth_mode="proxy", proxy_trusted_addresses="10.1.2.3",
                           role_groups=ROLES, api_token=TOKEN)
    async with serve(create_app(settings), free_port()) as server:
        for headers in (PROXIED, {"x-forwarded-user": "carol"},
                        {**PROXIED, "x-forwarded-for": "10.1.2.3"},
                        {**PROXIED, "forwarded": "for=10.1.2.3"},
                        {**PROXIED, **bearer(TOKEN)}):
            refused(await whoami(server.url, headers), "identity headers from an untrusted "
                    "address")
        # Without identity headers the token is the service principal, as ever.
        assert (await whoami(server.url, bearer(TOKEN))).json()["kind"] == "service"


@pytest.mark.parametrize(("peer", "trusted"), [
    ("10.0.0.7", True), ("10.255.0.1", False), ("::ffff:10.0.0.7", True), ("::1", True),
    ("fe80::1", False), (None, False), ("not-an-ip", False)])
async def test_proxy_trust_is_by_address_and_cidr(peer, trusted):
    settings = HitlflowSettings(auth_mode="proxy", proxy_trusted_addresses="10.0.0.0/24,::1")
    chain = Chain([ProxyHeaders(settings.proxy_trusted_addresses, settings)])
    headers = Headers({"x-forwarded-user": "carol"})
    if trusted:
        assert (await chain.authenticate(headers, peer)).subject == "carol"  # type: ignore[union-attr]
    else:
        with pytest.raises(Unauthenticated, match="untrusted address"):
            await chain.authenticate(headers, peer)


@pytest.mark.parametrize(("groups", "role"), [
    ([], "viewer"), (["staff"], "approver"), (["staff", "ops"], "operator"),
    (["hitlflow-admins", "staff"], "admin"), (["other"], "viewer")])
def test_the_highest_role_the_groups_give_wins(groups, role):
    assert role_from_groups(groups, HitlflowSettings(role_groups=ROLES)) == role


def test_the_default_role_is_for_people_no_group_names():
    settings = HitlflowSettings(role_groups=ROLES, default_role="approver")
    assert role_from_groups(["other"], settings) == "approver"


@pytest.mark.parametrize(("env", "said"), [
    ({"role_groups": "admin"}, "ROLE=GROUP"),
    ({"role_groups": "king=staff"}, "unknown role 'king'"),
    ({"proxy_trusted_addresses": "10.0.0.0/33"}, "not an IP address or a CIDR"),
    ({"proxy_trusted_addresses": "proxy.local"}, "not an IP address or a CIDR"),
    ({"auth_mode": "ldap"}, "auth_mode"),
    ({"default_role": "root"}, "default_role"),
])
def test_broken_identity_settings_are_refused(env, said):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=said):
        HitlflowSettings(**env)


@pytest.mark.parametrize(("extra", "said"), [
    ({}, "nobody could sign in"),  # local, nobody in people.json, no token
    ({"auth_mode": "proxy"}, "HITLFLOW_PROXY_TRUSTED_ADDRESSES"),
    ({"auth_mode": "proxy", "api_token": TOKEN}, "HITLFLOW_PROXY_TRUSTED_ADDRESSES"),
    ({"auth_mode": "off", "api_token": TOKEN}, "both set"),
    ({"api_auth": "off", "api_token": TOKEN}, "both set"),
])
def test_an_api_nobody_could_sign_in_to_does_not_start(tmp_path: Path, extra, said):
    settings = settings_of(tmp_path, **extra)
    with pytest.raises(AuthConfigError, match=said):
        check_auth(settings)
    with pytest.raises(AuthConfigError, match=said):
        create_app(settings)


def test_a_broken_people_file_stops_the_api_from_starting(tmp_path: Path):
    PeopleStore(tmp_path).add("ada", "admin")
    (tmp_path / "people.json").write_text("[]")
    with pytest.raises(AuthConfigError, match="not a people file"):
        check_auth(settings_of(tmp_path, api_token=TOKEN))


def test_oidc_mode_is_wired_to_the_oidc_module(tmp_path: Path):
    """Without ``api.identity.oidc`` (another part of the work) the mode says so; with
    it, the API needs its issuer and audience."""
    import importlib.util

    settings = settings_of(tmp_path, auth_mode="oidc")
    if importlib.util.find_spec("api.identity.oidc") is None:
        with pytest.raises(AuthConfigError, match="oidc not available"):
            check_auth(settings)
    else:
        with pytest.raises(AuthConfigError):
            check_auth(settings)


def test_the_identity_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("HITLFLOW_AUTH_MODE", "proxy")
    monkeypatch.setenv("HITLFLOW_PROXY_TRUSTED_ADDRESSES", " 127.0.0.1, 10.0.0.0/8 ,")
    monkeypatch.setenv("HITLFLOW_ROLE_GROUPS", "admin=a,b; operator=ops;")
    monkeypatch.setenv("HITLFLOW_DEFAULT_ROLE", "approver")
    settings = HitlflowSettings()
    assert settings.effective_auth_mode == "proxy"
    assert settings.proxy_trusted_addresses == ["127.0.0.1", "10.0.0.0/8"]
    assert settings.role_groups == {"admin": ["a", "b"], "operator": ["ops"]}
    assert settings.default_role == "approver"
    monkeypatch.setenv("HITLFLOW_API_AUTH", "off")  # the older switch still turns it off
    assert HitlflowSettings().effective_auth_mode == "off"
