"""Who makes a request, from its credentials: the authenticators of each mode and the
chain the HTTP doors try them in (``authenticators(settings)``).

An :class:`Authenticator` looks at a request's headers (and its TCP peer) and answers
the :class:`~workflows.people.Principal` they establish, ``None`` when they offer no
credentials it knows, or raises :class:`Unauthenticated` when they offer some that are
wrong. The chain of a mode, in order:

* ``local``: the API token (:class:`ServiceToken`), then people's keys (:class:`LocalKeys`).
* ``proxy``: the proxy's headers (:class:`ProxyHeaders`), then the API token.
* ``oidc``: the API token, then bearer JWTs (``api.identity.oidc.OidcBearer``).

Credentials are never logged, never put in a message.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from starlette.datastructures import Headers

from api.identity.people_store import PeopleFileError, PeopleStore, is_key
from api.identity.roles import role_from_groups
from api.settings import HitlflowSettings
from workflows.people import Principal

log = logging.getLogger("hitlflow.api.identity")

#: Who the API token acts as: a named service principal for automation.
SERVICE_PRINCIPAL = Principal(issuer="hitlflow", subject="service:api-token",
                              name="API token (automation)", role="operator",
                              kind="service")
#: Who every request is with authentication off.
ANONYMOUS = Principal(issuer="none", subject="anonymous", name="anonymous (auth off)",
                      role="operator", kind="person")
#: The headers of an authenticating proxy (oauth2-proxy's names).
USER_HEADER, EMAIL_HEADER, GROUPS_HEADER = ("x-forwarded-user", "x-forwarded-email",
                                            "x-forwarded-groups")
#: The display name, when the proxy passes one (oauth2-proxy: the preferred username).
NAME_HEADER = "x-forwarded-preferred-username"
PROXY_HEADERS = (USER_HEADER, EMAIL_HEADER, GROUPS_HEADER, NAME_HEADER)


class Unauthenticated(Exception):
    """Credentials were offered and are not good: 401 with this message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AuthConfigError(Exception):
    """The API would start with nobody able to sign in, or open without being told to."""


class Authenticator(Protocol):
    async def authenticate(self, headers: Headers, client_host: str | None
                           ) -> Principal | None: ...


def bearer_of(headers: Headers) -> str | None:
    """The credential of ``Authorization: Bearer <credential>``, else None."""
    scheme, _, given = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return given.strip() or None


class ServiceToken:
    """``HITLFLOW_API_TOKEN``: the service principal, compared in constant time."""

    def __init__(self, token: str) -> None:
        self.token = token.encode()

    async def authenticate(self, headers: Headers, client_host: str | None
                           ) -> Principal | None:
        given = bearer_of(headers)
        if given is not None and hmac.compare_digest(given.encode(), self.token):
            return SERVICE_PRINCIPAL
        return None


class LocalKeys:
    """A person's key (``hfk_...``) from ``people.json``; other bearers are not its."""

    def __init__(self, store: PeopleStore) -> None:
        self.store = store
        self._reported: str | None = None

    async def authenticate(self, headers: Headers, client_host: str | None
                           ) -> Principal | None:
        given = bearer_of(headers)
        if given is None or not is_key(given):
            return None
        try:
            principal = self.store.principal_of(given)
        except PeopleFileError as err:
            if str(err) != self._reported:  # once per problem, not per request
                self._reported = str(err)
                log.error("people's keys are refused: %s", err)
            raise Unauthenticated("the API cannot read its people file (its log says "
                                  "why): no key works until it is fixed") from None
        self._reported = None
        if principal is None:
            raise Unauthenticated("the key is unknown, revoked or wrong")
        return principal


def _networks(entries: Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network,
                                                 ...]:
    return tuple(ipaddress.ip_network(e, strict=False) for e in entries)


class ProxyHeaders:
    """oauth2-proxy's ``X-Forwarded-User`` / ``-Email`` / ``-Groups`` (comma-separated)
    and ``-Preferred-Username`` (the display name),
    believed only when the request's TCP peer is one of ``trusted`` (IPs or CIDRs);
    from any other peer such headers are a 401. The role comes from the groups
    (``roles.role_from_groups``)."""

    def __init__(self, trusted: Sequence[str], settings: HitlflowSettings) -> None:
        self.networks = _networks(trusted)
        self.settings = settings

    def trusts(self, host: str | None) -> bool:
        if not host:
            return False
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    async def authenticate(self, headers: Headers, client_host: str | None
                           ) -> Principal | None:
        if not any(name in headers for name in PROXY_HEADERS):
            return None
        if not self.trusts(client_host):
            raise Unauthenticated("identity headers from an untrusted address: only the "
                                  "proxy's addresses (HITLFLOW_PROXY_TRUSTED_ADDRESSES) "
                                  "may send X-Forwarded-User, -Email or -Groups")
        user = headers.get(USER_HEADER, "").strip()
        email = headers.get(EMAIL_HEADER, "").strip() or None
        if not user:
            user = email or ""
        if not user or len(user) > 500 or (email is not None and len(email) > 320):
            raise Unauthenticated("the proxy sent no usable X-Forwarded-User")
        groups = [g.strip() for g in headers.get(GROUPS_HEADER, "").split(",") if g.strip()]
        groups = [g for g in groups if len(g) <= 500][:200]
        name = headers.get(NAME_HEADER, "").strip()[:200] or user[:200]
        return Principal(issuer="proxy", subject=user, name=name, groups=groups,
                         email=email, kind="person",
                         role=role_from_groups(groups, self.settings))


class Chain:
    """Each authenticator in order; the first principal wins. A bearer credential that
    none of them took is wrong; no credentials at all: None."""

    def __init__(self, members: Sequence[Authenticator]) -> None:
        self.members = tuple(members)

    async def authenticate(self, headers: Headers, client_host: str | None
                           ) -> Principal | None:
        for member in self.members:
            principal = await member.authenticate(headers, client_host)
            if principal is not None:
                return principal
        if headers.get("authorization"):
            raise Unauthenticated("the bearer token is wrong" if bearer_of(headers)
                                  else "the Authorization header is not a bearer token")
        return None


def _oidc(settings: HitlflowSettings) -> Authenticator:
    """``api.identity.oidc.OidcBearer`` (imported when the mode is oidc)."""
    try:
        from api.identity import oidc  # type: ignore[attr-defined, unused-ignore]
    except ImportError as err:
        raise AuthConfigError(f"HITLFLOW_AUTH_MODE=oidc: oidc not available in this "
                              f"installation ({err})") from None
    try:
        return oidc.OidcBearer(settings)  # type: ignore[no-any-return, unused-ignore]
    except (ValueError, TypeError) as err:
        raise AuthConfigError(f"HITLFLOW_AUTH_MODE=oidc: {err}: set HITLFLOW_OIDC_ISSUER "
                              "and HITLFLOW_OIDC_AUDIENCE (docs/security.md)") from None


def _both_set(settings: HitlflowSettings) -> None:
    if settings.api_token:
        said = ("HITLFLOW_API_AUTH=off" if settings.api_auth == "off"
                else "HITLFLOW_AUTH_MODE=off")
        raise AuthConfigError(f"{said} and HITLFLOW_API_TOKEN are both set: unset one of "
                              "them")


def authenticators(settings: HitlflowSettings) -> Chain | None:
    """The chain of ``settings``' mode, or None with authentication off. Raises
    :class:`AuthConfigError` when nobody could sign in (with the fix in the message),
    or when authentication is off and a token is set (which one was meant is not for
    us to guess)."""
    mode = settings.effective_auth_mode
    if mode == "off":
        _both_set(settings)
        return None
    service = [ServiceToken(settings.api_token)] if settings.api_token else []
    if mode == "proxy":
        if not settings.proxy_trusted_addresses:
            raise AuthConfigError(
                "HITLFLOW_AUTH_MODE=proxy and no proxy address is trusted: set "
                "HITLFLOW_PROXY_TRUSTED_ADDRESSES to the address(es) your authenticating "
                "proxy connects from (e.g. 127.0.0.1), docs/operations.md")
        return Chain([ProxyHeaders(settings.proxy_trusted_addresses, settings), *service])
    if mode == "oidc":
        return Chain([*service, _oidc(settings)])
    store = PeopleStore(settings.data_dir)
    try:
        anyone = store.anyone_can_sign_in()
    except PeopleFileError as err:
        raise AuthConfigError(f"the people file: {err}") from None
    if not anyone and not service:
        raise AuthConfigError(
            "the API requires authentication and nobody could sign in: no token is set "
            f"and nobody has a key in {store.path}. Add a person (hitlflow people add "
            f"NAME --role admin --data-dir {settings.data_dir}), or set HITLFLOW_API_TOKEN "
            "to a long random secret for automation (e.g. the output of python3 -c "
            "'import secrets; print(secrets.token_urlsafe(32))'), or HITLFLOW_API_AUTH=off "
            "to run without authentication (then anyone who reaches the port can start "
            "sessions, which run commands on the workers)")
    return Chain([*service, LocalKeys(store)])
