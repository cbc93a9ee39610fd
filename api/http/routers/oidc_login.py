"""``POST /api/auth/oidc/token``: the last step of the inbox's OpenID Connect sign-in
(authorization code with PKCE; docs/security.md, "OpenID Connect").

The inbox may only call its own origin (its Content-Security-Policy), and a provider's
token endpoint seldom allows a browser's cross-origin call: so the inbox sends the
code, its PKCE verifier and its redirect URI here, the API trades them at the
provider's token endpoint (adding the client secret only when one is configured) and
answers with the verified ID token, which the inbox then sends as its bearer token.
The path is open (no credential exists yet); what it answers is only what the
provider gave for that code. Served only when the API runs in auth mode ``oidc``
(``app.state.oidc_bearer``, else the ``api.identity.oidc.OidcBearer`` the doors
made for ``HITLFLOW_OIDC_ISSUER``); 404 otherwise.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.http.errors import ERROR_RESPONSES, ApiError
from api.identity.oidc import OidcBearer, ProviderRefused, ProviderUnavailable, live_bearer
from api.identity.oidc_settings import OidcSettings
from workflows.people import Principal

router = APIRouter(tags=["auth"])
TOKEN_PATH = "/api/auth/oidc/token"
#: The paths the doors leave open (api.http.doors.OPEN_PATHS).
PATHS = frozenset({TOKEN_PATH})


class OidcTokenRequest(BaseModel):
    """What the provider sent the browser back with, and the verifier only it knows."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, max_length=2048)
    code_verifier: str = Field(min_length=43, max_length=128, description=(
        "The PKCE code verifier whose S256 challenge started the sign-in (RFC 7636)."))
    redirect_uri: str = Field(min_length=1, max_length=2000, description=(
        "The redirect URI the sign-in started with (the inbox's address)."))


class OidcTokenAnswer(BaseModel):
    token: str = Field(description="The verified ID token: send it as "
                       "`Authorization: Bearer <token>`.")
    token_type: Literal["Bearer"] = "Bearer"
    expires_at: int = Field(description="When the token expires (Unix seconds).")
    principal: Principal


async def get_oidc_bearer(request: Request) -> OidcBearer:
    """The app's (``app.state.oidc_bearer``), else the one the doors made for the
    configured issuer; 404 in another auth mode."""
    bearer = getattr(request.app.state, "oidc_bearer", None)
    if bearer is None:
        bearer = live_bearer(OidcSettings().issuer)
    if bearer is None:
        raise ApiError(404, "oidc_not_configured", "the API does not run in auth mode oidc")
    return bearer


OidcBearerDep = Annotated[OidcBearer, Depends(get_oidc_bearer)]


@router.post(TOKEN_PATH, response_model=OidcTokenAnswer, responses=ERROR_RESPONSES)
async def oidc_token(body: OidcTokenRequest, oidc: OidcBearerDep,
                     response: Response) -> OidcTokenAnswer:
    """Trade an authorization code for a verified ID token (400 if the provider refuses
    the code, 401 if its token does not verify, 503 if it cannot be reached)."""
    response.headers["Cache-Control"] = "no-store"
    try:
        token, principal, expires_at = await oidc.exchange_code(
            body.code, body.code_verifier, body.redirect_uri)
    except ValueError as err:
        raise ApiError(422, "invalid_oidc_request", str(err)) from None
    except ProviderRefused as err:
        raise ApiError(400, "oidc_code_refused", str(err)) from None
    except ProviderUnavailable as err:
        raise ApiError(503, "oidc_provider_unavailable",
                       f"the OpenID provider cannot be used: {err}") from None
    except Exception as err:
        if isinstance(err, oidc.error_class):
            raise ApiError(401, "unauthorized", str(err)) from None
        raise
    return OidcTokenAnswer(token=token, expires_at=expires_at, principal=principal)
