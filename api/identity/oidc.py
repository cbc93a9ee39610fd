"""The ``oidc`` auth mode: ``Authorization: Bearer <JWT>`` from an OpenID Connect
provider (docs/security.md, "OpenID Connect"; settings in ``oidc_settings``).

:class:`OidcBearer` implements the ``Authenticator`` protocol of
``api.identity.principals``::

    async def authenticate(self, headers: Headers, client_host: str | None) -> Principal | None

``None`` when the request offers no JWT (no ``Authorization: Bearer`` header, or a bearer
value that is not three dot-separated parts: the API token and people's keys are left
to the other authenticators); a :class:`Principal` of kind ``person`` for a valid one;
``Unauthenticated(message)`` for any other (the doors answer 401 with the message,
which never contains the token).

What it verifies, with PyJWT (no hand-written cryptography):

- the provider: its discovery document ``<issuer>/.well-known/openid-configuration``,
  whose ``issuer`` must equal ``HITLFLOW_OIDC_ISSUER`` exactly, names ``jwks_uri``;
- the signature: with the key of the token's ``kid`` from that JWKS (cached;
  refetched on an unknown ``kid`` at most every ``jwks_refresh_min_s``, and when older
  than ``jwks_max_age_s``), by an algorithm of the allow-list (default RS256, ES256,
  PS256; ``none`` and HS* never), which must fit the key (and the key's own ``alg``);
- the claims: ``iss`` (before any key is fetched), ``aud`` (``HITLFLOW_OIDC_AUDIENCE``,
  default the client id), ``exp``, ``iat`` and ``nbf`` with ``leeway_s`` of clock skew,
  and a non-empty ``sub``.

Names this module expects from the identity package, resolved when first needed (so
that this module imports with or without them; the lead wires them):

- ``api.identity.principals.Unauthenticated``: the exception class, ``Unauthenticated
  (message)``. Without that module, :class:`OidcUnauthenticated` (a local class) is
  raised. A caller may pass its own class as ``unauthenticated=``.
- ``api.identity.roles.role_from_groups(groups, settings) -> Role``: the role of a
  person's groups (``HITLFLOW_ROLE_GROUPS``, ``HITLFLOW_DEFAULT_ROLE``), bound to the
  server's settings when ``OidcBearer(settings)`` is given those (the doors' call), or
  passed as ``role_of=``. Without either, every OIDC principal is a ``viewer`` (the
  least role).

And what they call here: ``OidcBearer(settings)`` (the doors' chain) and ``await
oidc_inbox_config(settings)`` (``GET /api/auth/config``), both with the server's
settings.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
from pydantic import ValidationError
from starlette.datastructures import Headers

from api.identity.oidc_settings import OidcSettings, check_provider_url
from workflows.people import Principal, Role

#: A token longer than this is refused before it is parsed.
MAX_TOKEN_CHARS = 16 * 1024
#: A discovery document or a JWKS larger than this is refused.
MAX_DOCUMENT_BYTES = 512 * 1024
#: The key types each family of algorithms needs.
_KTY_OF = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
#: RFC 7636: a code verifier is 43 to 128 unreserved characters.
_CODE_VERIFIER = re.compile(r"^[A-Za-z0-9\-._~]{43,128}$")
_PRINTABLE = re.compile(r"^[\x21-\x7e]{1,2048}$")


class OidcUnauthenticated(Exception):
    """Raised for bad credentials when ``api.identity.principals`` is not there."""


def _principals_unauthenticated() -> type[Exception]:
    try:
        principals = importlib.import_module("api.identity.principals")
    except ModuleNotFoundError as err:
        if err.name != "api.identity.principals":
            raise
        return OidcUnauthenticated
    return principals.Unauthenticated


def _least_role(groups: Sequence[str]) -> Role:
    return "viewer"


def _roles_of(settings: object) -> Callable[[Sequence[str]], Role]:
    """``api.identity.roles.role_from_groups`` bound to the server's settings; without
    that module, the least role."""
    try:
        roles = importlib.import_module("api.identity.roles")
    except ModuleNotFoundError as err:
        if err.name != "api.identity.roles":
            raise
        return _least_role
    return lambda groups: roles.role_from_groups(groups, settings)


class ProviderUnavailable(Exception):
    """The provider's discovery document or keys could not be had (a message without
    secrets)."""


class ProviderRefused(Exception):
    """The provider's token endpoint refused a code (``error`` is its OAuth error code)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class ProviderMetadata:
    """What the API uses of the provider's discovery document."""

    issuer: str
    jwks_uri: str
    authorization_endpoint: str | None
    token_endpoint: str | None


def inbox_config_of(settings: OidcSettings,
                    provider: ProviderMetadata | None) -> dict[str, Any]:
    """The ``oidc`` part of ``GET /api/auth/config``: what the inbox needs to start the
    authorization-code flow (nothing secret; a public client has no secret)."""
    return {
        "issuer": settings.issuer,
        "authorization_endpoint": provider.authorization_endpoint if provider else None,
        "client_id": settings.client_id,
        "scopes": settings.scopes,
        "redirect_url": settings.redirect_url,
        "token_path": "/api/auth/oidc/token",
    }


#: The bearer of each issuer that this process made last (the doors' chain keeps it):
#: where the open routes (the auth config, the token route) find its discovered
#: provider when the app was not handed one (``app.state.oidc_bearer``).
_LIVE: weakref.WeakValueDictionary[str, OidcBearer] = weakref.WeakValueDictionary()


def live_bearer(issuer: str | None) -> OidcBearer | None:
    return None if issuer is None else _LIVE.get(issuer)


async def oidc_inbox_config(settings: object,
                            provider: ProviderMetadata | None = None) -> dict[str, Any]:
    """:func:`inbox_config_of` for ``settings`` (the ``HITLFLOW_OIDC_*`` ones, or any
    other object: then they are read from the environment), with the provider's
    endpoints as this process's bearer of that issuer discovered them (``None`` while
    there is none or the provider cannot be reached)."""
    oidc = settings if isinstance(settings, OidcSettings) else OidcSettings()
    bearer = live_bearer(oidc.issuer)
    if provider is None and bearer is not None:
        try:
            provider = await bearer.provider()
        except ProviderUnavailable:
            provider = None
    return inbox_config_of(oidc, provider)


def _jwt_of(headers: Headers) -> str | None:
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, credentials = value.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or credentials.count(".") != 2:
        return None
    return credentials


def _why(err: jwt.PyJWTError) -> str:
    """What a refusal says (PyJWT's messages never quote the token)."""
    if isinstance(err, jwt.ExpiredSignatureError):
        return "it has expired"
    if isinstance(err, jwt.InvalidAudienceError):
        return "it is not for this API (its audience does not match)"
    if isinstance(err, jwt.InvalidIssuerError):
        return "it was not issued by the configured issuer"
    if isinstance(err, jwt.ImmatureSignatureError):
        return "it is not valid yet"
    if isinstance(err, jwt.InvalidSignatureError):
        return "its signature does not verify"
    if isinstance(err, jwt.InvalidAlgorithmError):
        return "its algorithm is not accepted"
    if isinstance(err, jwt.MissingRequiredClaimError):
        return f"it has no {err.claim!r} claim"
    if isinstance(err, jwt.DecodeError):
        return "it is not a well-formed JWT"
    return str(err) or type(err).__name__


def _claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by its whole name, else by a dotted path into objects."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class OidcBearer:
    """Bearer JWTs of one OpenID Connect provider (see the module's docstring)."""

    def __init__(self, settings: object, *,
                 role_of: Callable[[Sequence[str]], Role] | None = None,
                 unauthenticated: type[Exception] | None = None,
                 http: httpx.AsyncClient | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``settings``: the ``HITLFLOW_OIDC_*`` ones; or the server's
        (``HitlflowSettings``, as the doors pass them): then the ``HITLFLOW_OIDC_*``
        ones come from the environment and, without ``role_of``, roles come from
        ``api.identity.roles.role_from_groups(groups, settings)``. Raises
        ``ValueError`` when the issuer or the audience is missing."""
        if not isinstance(settings, OidcSettings):
            if role_of is None:
                role_of = _roles_of(settings)
            settings = OidcSettings()
        settings.require()
        assert settings.issuer is not None and settings.expected_audience is not None
        self.settings = settings
        self.issuer: str = settings.issuer
        self.audience: str = settings.expected_audience
        self._role_of = role_of or _least_role
        self._error_class = unauthenticated
        self._own_http = http is None
        self._http = http or httpx.AsyncClient(timeout=settings.http_timeout_s,
                                               follow_redirects=False)
        self._clock = clock
        self._lock = asyncio.Lock()
        self._provider: ProviderMetadata | None = None
        self._discovery_failure: tuple[float, str] | None = None  # (when, why)
        self._jwks: dict[str, dict[str, Any]] | None = None  # kid ("" if none) -> JWK
        self._keys: dict[tuple[str, str], jwt.PyJWK] = {}  # (kid, alg) -> key
        self._loaded_at: float | None = None
        self._attempted_at: float | None = None
        self._last_error: str | None = None
        _LIVE[self.issuer] = self

    @property
    def error_class(self) -> type[Exception]:
        if self._error_class is None:
            self._error_class = _principals_unauthenticated()
        return self._error_class

    def _refuse(self, why: str) -> Exception:
        return self.error_class(f"invalid OpenID Connect token: {why}")

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    # -- the Authenticator protocol ---------------------------------------------------

    async def authenticate(self, headers: Headers, client_host: str | None) -> Principal | None:
        token = _jwt_of(headers)
        if token is None:
            return None
        return await self.verify(token)

    async def verify(self, token: str) -> Principal:
        """The principal of a token, or ``error_class`` saying why not."""
        if len(token) > MAX_TOKEN_CHARS:
            raise self._refuse(f"longer than {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as err:
            raise self._refuse(_why(err)) from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.settings.algorithms:
            raise self._refuse(f"algorithm {str(alg)[:20]!r} is not accepted "
                               f"(HITLFLOW_OIDC_ALGORITHMS: "
                               f"{', '.join(self.settings.algorithms)})")
        # A token of another issuer never makes the API fetch anything.
        if unverified.get("iss") != self.issuer:
            raise self._refuse("it was not issued by the configured issuer")
        kid = header.get("kid", "")
        if not isinstance(kid, str) or len(kid) > 200:
            raise self._refuse("its key id is not a short string")
        key = await self._key(kid, alg)
        try:
            claims = self._decode(token, key, alg)
        except jwt.InvalidSignatureError as err:
            # A token that names no key cannot say that the key is new: when it does
            # not verify with the one key had, the keys may have rotated (refetched no
            # more often than an unknown key id makes them be).
            if kid or not await self._refetch():
                raise self._refuse(_why(err)) from None
            try:
                claims = self._decode(token, await self._key(kid, alg), alg)
            except jwt.PyJWTError as err:
                raise self._refuse(_why(err)) from None
        except jwt.PyJWTError as err:
            raise self._refuse(_why(err)) from None
        return self._principal(claims)

    def _decode(self, token: str, key: jwt.PyJWK, alg: str) -> dict[str, Any]:
        return jwt.decode(token, key=key, algorithms=[alg], audience=self.audience,
                          issuer=self.issuer, leeway=self.settings.leeway_s,
                          options={"require": ["exp", "iat", "iss", "aud", "sub"]})

    async def _refetch(self) -> bool:
        """Refetch the keys if the rate limit allows; whether they changed."""
        async with self._lock:
            if not self._may_fetch():
                return False
            before = self._jwks
            await self._refresh()
            return self._jwks != before

    def _principal(self, claims: dict[str, Any]) -> Principal:
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.strip():
            raise self._refuse("its subject is empty")
        groups = _claim(claims, self.settings.groups_claim)
        if groups is None:
            groups = []
        elif isinstance(groups, str):
            groups = [groups]
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise self._refuse(f"its {self.settings.groups_claim!r} claim is not a list "
                               "of strings")
        name = next((v for v in (claims.get("name"), claims.get("preferred_username"))
                     if isinstance(v, str) and v.strip()), sub)
        email = claims.get("email")
        # An address the provider says it did not verify names no one (people lists
        # and rules match e-mail addresses).
        if not isinstance(email, str) or claims.get("email_verified") is False:
            email = None
        try:
            return Principal(issuer=self.issuer, subject=sub, name=name[:200],
                             groups=groups, email=email, role=self._role_of(groups),
                             kind="person")
        except ValidationError as err:
            fields = ", ".join(str(e["loc"][0]) for e in err.errors() if e["loc"])
            raise self._refuse(f"its claims do not fit a principal ({fields})") from None

    # -- keys -------------------------------------------------------------------------

    def _fresh(self) -> bool:
        return self._loaded_at is not None and \
            self._clock() - self._loaded_at < self.settings.jwks_max_age_s

    def _may_fetch(self) -> bool:
        return self._attempted_at is None or \
            self._clock() - self._attempted_at >= self.settings.jwks_refresh_min_s

    async def _key(self, kid: str, alg: str) -> jwt.PyJWK:
        if not (self._fresh() and self._known(kid)):
            async with self._lock:  # one fetch at a time; the others then find its keys
                if not (self._fresh() and self._known(kid)) and self._may_fetch():
                    await self._refresh()
        if self._jwks is None:
            raise self._refuse(f"the provider's keys are not available ({self._last_error})")
        jwk = self._jwk(kid)
        if jwk is None:
            raise self._refuse("it is signed by a key the provider does not list"
                               if kid else "it names no key and the provider has several")
        cached = self._keys.get((kid, alg))
        if cached is not None:
            return cached
        if jwk.get("alg") not in (None, alg):
            raise self._refuse(f"its algorithm does not fit its key ({jwk['alg']})")
        if _KTY_OF.get(alg[:2]) != jwk.get("kty"):
            raise self._refuse("its algorithm does not fit the key's type")
        try:
            key = jwt.PyJWK(jwk, algorithm=alg)
        except (jwt.PyJWTError, ValueError, TypeError):
            raise self._refuse("the provider's key for it is not usable") from None
        self._keys[(kid, alg)] = key
        return key

    def _known(self, kid: str) -> bool:
        return self._jwk(kid) is not None

    def _jwk(self, kid: str) -> dict[str, Any] | None:
        if self._jwks is None:
            return None
        if kid:
            return self._jwks.get(kid)
        return next(iter(self._jwks.values())) if len(self._jwks) == 1 else None

    async def _refresh(self) -> None:
        """Fetch the discovery document (if not had yet) and the JWKS; on failure keep
        the keys had before and remember why."""
        self._attempted_at = self._clock()
        try:
            provider = await self.provider()
            document = await self._get_json(provider.jwks_uri, "the provider's JWKS")
            jwks = self._parse_jwks(document)
        except ProviderUnavailable as err:
            self._last_error = str(err)
            return
        if jwks != self._jwks:
            self._keys = {}
        self._jwks, self._loaded_at, self._last_error = jwks, self._clock(), None

    @staticmethod
    def _parse_jwks(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise ProviderUnavailable("the provider's JWKS has no list of keys")
        signing = {}
        for jwk in keys:
            if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
                continue
            kid = jwk.get("kid", "")
            if isinstance(kid, str) and kid not in signing:
                signing[kid] = jwk
        if not signing:
            raise ProviderUnavailable("the provider's JWKS has no signing key")
        return signing

    async def provider(self) -> ProviderMetadata:
        """The provider's discovery document (fetched once, then kept)."""
        if self._provider is not None:
            return self._provider
        # An open route asks for it too (the inbox's config): while the provider is
        # down, it is asked no more often than the keys are.
        failed = self._discovery_failure
        if failed is not None and \
                self._clock() - failed[0] < self.settings.jwks_refresh_min_s:
            raise ProviderUnavailable(failed[1])
        try:
            self._provider = await self._discover()
        except ProviderUnavailable as err:
            self._discovery_failure = (self._clock(), str(err))
            raise
        self._discovery_failure = None
        return self._provider

    async def _discover(self) -> ProviderMetadata:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        document = await self._get_json(url, "the provider's discovery document")
        if document.get("issuer") != self.issuer:
            raise ProviderUnavailable(
                f"the discovery document at {url} names issuer "
                f"{str(document.get('issuer'))[:200]!r}, not HITLFLOW_OIDC_ISSUER "
                f"{self.issuer!r}")
        urls: dict[str, str | None] = {}
        for field in ("jwks_uri", "authorization_endpoint", "token_endpoint"):
            value = document.get(field)
            if value is None and field != "jwks_uri":
                urls[field] = None
                continue
            try:
                urls[field] = check_provider_url(str(value), f"the provider's {field}")
            except ValueError as err:
                raise ProviderUnavailable(str(err)) from None
        return ProviderMetadata(
            issuer=self.issuer, jwks_uri=str(urls["jwks_uri"]),
            authorization_endpoint=urls["authorization_endpoint"],
            token_endpoint=urls["token_endpoint"])

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            response = await self._http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as err:
            raise ProviderUnavailable(
                f"{what} at {url} could not be fetched ({type(err).__name__}: {err})"
            ) from None
        return self._json_of(response, what, url)

    @staticmethod
    def _json_of(response: httpx.Response, what: str, url: str) -> dict[str, Any]:
        if response.status_code != 200:
            raise ProviderUnavailable(f"{what} at {url} answered HTTP {response.status_code}")
        if len(response.content) > MAX_DOCUMENT_BYTES:
            raise ProviderUnavailable(f"{what} at {url} is larger than {MAX_DOCUMENT_BYTES} "
                                      "bytes")
        try:
            document = response.json()
        except ValueError:
            raise ProviderUnavailable(f"{what} at {url} is not JSON") from None
        if not isinstance(document, dict):
            raise ProviderUnavailable(f"{what} at {url} is not a JSON object")
        return document

    # -- the inbox's sign-in ----------------------------------------------------------

    async def inbox_config(self) -> dict[str, Any]:
        """:func:`oidc_inbox_config` with the provider's endpoints (``None`` while the
        provider cannot be reached)."""
        try:
            provider = await self.provider()
        except ProviderUnavailable:
            provider = None
        return inbox_config_of(self.settings, provider)

    async def exchange_code(self, code: str, code_verifier: str,
                            redirect_uri: str) -> tuple[str, Principal, int]:
        """Trade an authorization code (and its PKCE verifier) for the ID token at the
        provider's token endpoint (as a public client, or with the client secret when
        one is set), and verify it:
        ``(id_token, principal, exp)``. Raises ``ValueError`` for malformed input,
        :class:`ProviderUnavailable`, :class:`ProviderRefused` or ``error_class``."""
        if not _PRINTABLE.match(code):
            raise ValueError("code must be 1 to 2048 printable characters")
        if not _CODE_VERIFIER.match(code_verifier):
            raise ValueError("code_verifier must be 43 to 128 characters of "
                             "A-Z a-z 0-9 - . _ ~ (RFC 7636)")
        self._check_redirect(redirect_uri)
        if self.settings.client_id is None:
            raise ValueError("HITLFLOW_OIDC_CLIENT_ID is not set")
        provider = await self.provider()
        if provider.token_endpoint is None:
            raise ProviderUnavailable("the provider's discovery document names no "
                                      "token_endpoint")
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": redirect_uri, "client_id": self.settings.client_id,
                "code_verifier": code_verifier}
        if self.settings.client_secret is not None:  # a confidential client (client_secret_post)
            form["client_secret"] = self.settings.client_secret.get_secret_value()
        try:
            response = await self._http.post(provider.token_endpoint, data=form,
                                             headers={"Accept": "application/json"})
        except httpx.HTTPError as err:
            raise ProviderUnavailable(f"the provider's token endpoint could not be reached "
                                      f"({type(err).__name__})") from None
        if response.status_code in (400, 401):
            error = _oauth_error(response)
            raise ProviderRefused(error, f"the provider refused the code ({error})")
        document = self._json_of(response, "the provider's token answer",
                                 provider.token_endpoint)
        id_token = document.get("id_token")
        if not isinstance(id_token, str):
            raise ProviderUnavailable("the provider's token answer has no id_token")
        principal = await self.verify(id_token)
        exp = jwt.decode(id_token, options={"verify_signature": False})["exp"]
        return id_token, principal, int(exp)

    def _check_redirect(self, redirect_uri: str) -> None:
        if self.settings.redirect_url is not None:
            if redirect_uri != self.settings.redirect_url:
                raise ValueError("redirect_uri is not HITLFLOW_OIDC_REDIRECT_URL")
            return
        parts = urlsplit(redirect_uri)
        if len(redirect_uri) > 2000 or parts.scheme not in ("http", "https") \
                or not parts.hostname or parts.fragment:
            raise ValueError("redirect_uri must be an absolute http(s) URL without a "
                             "fragment")


def _oauth_error(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, str) and re.fullmatch(r"[a-z_]{1,64}", error):
        return error
    return f"HTTP {response.status_code}"
