"""Roles from groups, for people whose groups come from elsewhere (the proxy's
``X-Forwarded-Groups``, an OIDC token's groups claim): ``HITLFLOW_ROLE_GROUPS``
(``admin=hitlflow-admins;operator=ops;approver=staff``) names, for each role, the
groups that give it; the highest role any of a person's groups gives wins, else
``HITLFLOW_DEFAULT_ROLE`` (viewer unless set)."""

from __future__ import annotations

from collections.abc import Iterable

from api.settings import HitlflowSettings
from workflows.people import ROLES, Role


def role_from_groups(groups: Iterable[str], settings: HitlflowSettings) -> Role:
    """The role ``groups`` give under ``settings`` (see the module's docstring)."""
    have = set(groups)
    for role in reversed(ROLES):  # the highest first
        if have.intersection(settings.role_groups.get(role, ())):
            return role
    return settings.default_role
