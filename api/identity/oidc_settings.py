"""Settings of the ``oidc`` auth mode (``HITLFLOW_OIDC_*``; docs/security.md,
"OpenID Connect").

The API accepts ``Authorization: Bearer <JWT>`` issued by one OpenID Connect
provider, ``issuer``: its discovery document and its keys (JWKS) are fetched from
there. A token must be for ``audience`` (default: ``client_id``, the id of the inbox's
registration at the provider, which is what an ID token is for).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: Asymmetric signatures only: ``none`` and the HMAC family (HS*) are never accepted,
#: whatever the settings say (an HS256 token "signed" with the provider's public key
#: would otherwise verify).
ALLOWED_ALGORITHMS = frozenset({
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
})
DEFAULT_ALGORITHMS = ["RS256", "ES256", "PS256"]
_LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_provider_url(url: str, what: str) -> str:
    """An address of the provider is https (plain http only on this machine: a provider
    started by a test or a developer), absolute, without credentials or a fragment."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute https URL, not {url!r}")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"{what} must use https (plain http only on loopback): {url!r}")
    if parts.username or parts.password or parts.fragment:
        raise ValueError(f"{what} must not carry credentials or a fragment: {url!r}")
    return url


class OidcSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HITLFLOW_OIDC_", extra="ignore")

    # The provider's issuer identifier, exactly as its discovery document and its
    # tokens' `iss` say it (e.g. https://login.example.com/realms/staff).
    issuer: str | None = None
    # The inbox's client id at the provider (a public client: no secret).
    client_id: str | None = None
    # Only for a provider that will not give a public client a token: the API sends
    # it with the code (client_secret_post); it never reaches the browser.
    client_secret: SecretStr | None = Field(default=None, repr=False)
    # The `aud` a token must carry; empty: the client id.
    audience: str | None = None
    # Signature algorithms accepted (comma-separated); never `none` or HS*.
    algorithms: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_ALGORITHMS))
    # The claim that lists a person's groups (roles come from them,
    # HITLFLOW_ROLE_GROUPS); a dotted path reaches into an object
    # (e.g. `realm_access.roles`) when no claim has the whole name.
    groups_claim: str = Field(default="groups", min_length=1, max_length=200)
    # Clock skew tolerated on `exp`, `nbf` and `iat`, seconds.
    leeway_s: float = Field(default=30.0, ge=0, le=300)
    # Where the provider sends the browser back after sign-in: the inbox's address as the
    # provider has it registered (e.g. https://hitlflow.example.com/). Empty: the inbox's
    # own address, as the browser sees it.
    redirect_url: str | None = None
    # Scopes the inbox asks for.
    scopes: str = "openid profile email"
    # An unknown key id refetches the provider's keys at most this often, seconds
    # (made-up key ids must not make the API hammer the provider).
    jwks_refresh_min_s: float = Field(default=60.0, ge=0, le=86_400)
    # Keys are refetched when older than this, seconds (a key the provider withdrew
    # stops being accepted).
    jwks_max_age_s: float = Field(default=3600.0, ge=1, le=7 * 86_400)
    # Timeout of each call to the provider, seconds.
    http_timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("issuer", "client_id", "client_secret", "audience", "redirect_url",
                     mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_provider_url(value, "HITLFLOW_OIDC_ISSUER")
            if urlsplit(value).query:
                raise ValueError("HITLFLOW_OIDC_ISSUER must not have a query")
        return value

    @field_validator("redirect_url")
    @classmethod
    def _redirect_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_provider_url(value, "HITLFLOW_OIDC_REDIRECT_URL")
        return value

    @field_validator("algorithms", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("HITLFLOW_OIDC_ALGORITHMS names no algorithm")
        refused = [alg for alg in value if alg not in ALLOWED_ALGORITHMS]
        if refused:
            raise ValueError(
                f"HITLFLOW_OIDC_ALGORITHMS: {', '.join(refused)} not accepted; only "
                f"asymmetric signatures ({', '.join(sorted(ALLOWED_ALGORITHMS))})")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _scopes_have_openid(self) -> OidcSettings:
        if "openid" not in self.scopes.split():
            raise ValueError("HITLFLOW_OIDC_SCOPES must include openid")
        return self

    @property
    def configured(self) -> bool:
        return self.issuer is not None and self.expected_audience is not None

    @property
    def expected_audience(self) -> str | None:
        return self.audience or self.client_id

    def require(self) -> None:
        """Refuse to run the ``oidc`` mode half configured."""
        missing = [name for name, value in (("HITLFLOW_OIDC_ISSUER", self.issuer),
                                            ("HITLFLOW_OIDC_CLIENT_ID or _AUDIENCE",
                                             self.expected_audience)) if value is None]
        if missing:
            raise ValueError(f"auth mode oidc needs {' and '.join(missing)}")
