"""``GET /api/whoami``: who the API takes the caller for (the principal its doors
established); ``GET /api/auth/config`` (open): how to sign in to this API, for the
inbox: the mode, and for ``oidc`` what the inbox needs for the code flow."""

from __future__ import annotations

import inspect
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel

from api.http.deps import PrincipalDep, SettingsDep
from workflows.people import PrincipalKind, Role

router = APIRouter(tags=["identity"])


class WhoAmI(BaseModel):
    issuer: str
    subject: str
    name: str
    groups: list[str]
    role: Role
    kind: PrincipalKind
    email: str | None = None


@router.get("/api/whoami", response_model=WhoAmI)
async def whoami(principal: PrincipalDep) -> WhoAmI:
    """The caller's principal: issuer, subject, display name, groups, role, kind."""
    return WhoAmI(issuer=principal.issuer, subject=principal.subject, name=principal.name,
                  groups=list(principal.groups), role=principal.role, kind=principal.kind,
                  email=principal.email)


class AuthConfig(BaseModel):
    mode: Literal["local", "oidc", "proxy", "off"]
    oidc: dict[str, Any] | None = None


@router.get("/api/auth/config", response_model=AuthConfig, response_model_exclude_none=True)
async def auth_config(settings: SettingsDep) -> AuthConfig:
    """How to sign in here (open: it holds no secret). ``local``: a person's key or the
    API token as a bearer; ``proxy``: the proxy signs people in; ``oidc``: the code
    flow with PKCE at the provider named in ``oidc``; ``off``: no sign-in."""
    mode = settings.effective_auth_mode
    if mode != "oidc":
        return AuthConfig(mode=mode)
    try:
        from api.identity import oidc  # type: ignore[attr-defined, unused-ignore]

        answer = oidc.oidc_inbox_config(settings)
        if inspect.isawaitable(answer):
            answer = await answer
    except (ImportError, AttributeError):
        answer = None
    return AuthConfig(mode=mode, oidc=answer)
