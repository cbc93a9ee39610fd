"""Who may do what to a session, at the API (issue 24, docs/http-api.md "Authority").

The principal comes from the doors (``deps.PrincipalDep``), never from a body. A
session's people come from the read model (``rm_access``, folded from the config
its log recorded), or, before the exporter has reached a new session, from the
memo the API gave it when it started it (``PEOPLE_MEMO``: Temporal describes it
without a worker). The answers are ``workflows.people``'s: a refusal is a 403
``forbidden`` naming the rule, and a refused act (reply, message, end, cancel) is
recorded in the session's log by the ``record_refusal`` signal; nothing else
changes. The workflow checks replies again (its validator): the API's check is the
cheap first one, the workflow's the one that holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from temporalio.client import Client

from api.http.deps import OnChange, PrincipalDep, SessionIdDep, get_client
from api.http.errors import ApiError, temporal_errors
from api.http.models import RefusalView, YouView
from api.http.reads import store_call, store_of
from observation.read_model.access import ANSWER
from observation.read_model.store import Audience
from workflows.messages import RefusalInput
from workflows.people import (
    Action,
    People,
    Principal,
    Refusal,
    may_act,
    may_answer,
    may_see,
)

log = logging.getLogger("hitlflow.api")

#: The memo key of the people the API started a session with.
PEOPLE_MEMO = "hitlflow.people"
FORBIDDEN = "forbidden"


def forbidden(refusal: Refusal) -> ApiError:
    return ApiError(403, FORBIDDEN, refusal.message, extra={"rule": refusal.rule})


def audience(principal: Principal, waiting_for: bool = False) -> Audience:
    """The read model's view of who is asking for a list."""
    names = (principal.subject, *(f"group:{g}" for g in principal.groups))
    return Audience(names=names, email=principal.email,
                    sees_all=principal.at_least("operator"),
                    answers=principal.at_least("approver"), waiting_for=waiting_for)


@dataclass(frozen=True)
class SessionAccess:
    """Who a session names: its people, and its pending request's own deciders."""

    people: People = field(default_factory=People)
    request_id: str | None = None
    approvers: list[str] = field(default_factory=list)
    rule: str | None = None
    pending: dict[str, Any] | None = None


def _people(named: dict[str, list[str]]) -> People:
    owners = named.get("owner") or []
    return People.model_construct(owner=owners[0] if owners else None,
                                  approvers=named.get("approver", []),
                                  viewers=named.get("viewer", []))


async def _memo_people(client: Client, session_id: str) -> People:
    """The people the API started the session with (Temporal's record; 404 when it
    knows no such session)."""
    with temporal_errors(session_id):
        desc = await client.get_workflow_handle(session_id).describe()
    try:
        value = await desc.memo_value(PEOPLE_MEMO, None)
    except Exception:
        value = None
    if not isinstance(value, dict):
        return People()
    try:
        return People.model_validate(value)
    except ValueError:
        return People()


async def session_people(request: Request, session_id: str, *, memo: bool = True,
                         named: dict[str, list[str]] | None = None) -> People:
    """The session's people, from the read model (with ``memo``, Temporal's memo when
    it names nobody: the exporter has not reached it yet)."""
    if named is None:
        store = store_of(request.app.state)
        named = await store_call(store, store.access, session_id)
    if named.keys() - {ANSWER}:
        return _people(named)
    return await _memo_people(await get_client(request), session_id) if memo else People()


async def session_access(request: Request, session_id: str, *,
                         memo: bool = True) -> SessionAccess:
    """The session's people and its pending request, from the read model."""
    store = store_of(request.app.state)
    named = await store_call(store, store.access, session_id)
    row = await store_call(store, store.session, session_id)
    pending = row["pending"] if row is not None else None
    people = await session_people(request, session_id, memo=memo, named=named)
    return SessionAccess(
        people=people, pending=pending,
        request_id=pending.get("request_id") if pending else None,
        approvers=list((pending or {}).get("approvers") or named.get(ANSWER) or []),
        rule=(pending or {}).get("rule"))


async def seen_people(request: Request, principal: Principal, session_id: str, *,
                      memo: bool = True) -> People:
    """The session's people; 403 unless the principal may see it: operators, the people
    it names, and those its pending request is addressed to (a rule's approvers)."""
    store = store_of(request.app.state)
    named = await store_call(store, store.access, session_id)
    people = await session_people(request, session_id, memo=memo, named=named)
    if principal.at_least("operator"):
        return people
    refusal = may_see(principal, people)
    if refusal is not None and not principal.named_by_any(named.get(ANSWER) or []):
        raise forbidden(refusal)
    return people


async def seen_of(request: Request, principal: Principal, session_ids: list[str]
                  ) -> list[str]:
    """Those of ``session_ids`` the principal may see (a session's forks, listed with
    it: a fork's owner may differ from its parent's)."""
    if principal.at_least("operator"):
        return session_ids
    seen = []
    for sid in session_ids:
        try:
            await seen_people(request, principal, sid, memo=False)
        except ApiError as err:
            if err.status_code != 403:
                raise
            continue
        seen.append(sid)
    return seen


async def require_see(request: Request, principal: Principal, session_id: str) -> None:
    """403 unless the principal may see the session (operators see all, unasked)."""
    if principal.at_least("operator"):
        return
    await seen_people(request, principal, session_id)


async def seen_session(session_id: SessionIdDep, principal: PrincipalDep,
                       request: Request) -> str:
    await require_see(request, principal, session_id)
    return session_id


#: A session id the principal may see (403 naming the rule otherwise).
SeenSessionDep = Annotated[str, Depends(seen_session)]


def answer_refusal(principal: Principal, access: SessionAccess,
                   request_id: str | None) -> Refusal | None:
    """``may_answer`` against what the read model knows of the request: its own
    approvers when it is the pending one, else the session's people (the workflow's
    validator checks the request's own again)."""
    mine = request_id is None or request_id == access.request_id
    return may_answer(principal, access.people, access.approvers if mine else None,
                      access.rule if mine else None)


async def record_refusal(client: Client, session_id: str, principal: Principal,
                         action: str, refusal: Refusal, request_id: str | None = None,
                         changed: OnChange | None = None) -> None:
    """The refused attempt into the session's log (best effort: a closed session takes
    no signal, and the 403 stands either way); ``changed`` wakes the exporter for it."""
    try:
        await client.get_workflow_handle(session_id).signal(
            "record_refusal", RefusalInput(
                principal=principal, action=action, rule=refusal.rule[:200],
                message=refusal.message[:2000],
                request_id=request_id[:200] if request_id else None))
        if changed is not None:
            changed(session_id)
    except Exception as err:
        log.warning("session %s: the refusal of %s's %s was not recorded: %s: %s",
                    session_id, principal.subject, action, type(err).__name__,
                    str(err)[:200])


async def refuse(client: Client, session_id: str, principal: Principal, action: str,
                 refusal: Refusal, request_id: str | None = None,
                 changed: OnChange | None = None) -> ApiError:
    """Record the refusal, and the 403 to raise."""
    await record_refusal(client, session_id, principal, action, refusal, request_id,
                         changed)
    return forbidden(refusal)


async def check_act(request: Request, client: Client, principal: Principal,
                    session_id: str, action: Action) -> None:
    """403 (recorded) unless the principal may ``action`` the session."""
    if principal.at_least("operator"):
        return
    access = await session_access(request, session_id)
    if refusal := may_act(principal, access.people, action):
        raise await refuse(client, session_id, principal, action, refusal,
                           changed=request.app.state.on_change)


async def check_answer(request: Request, client: Client, principal: Principal,
                       session_id: str, request_id: str | None) -> SessionAccess:
    """403 (recorded) unless the principal may answer the request."""
    access = await session_access(request, session_id)
    if refusal := answer_refusal(principal, access, request_id):
        raise await refuse(client, session_id, principal, "reply", refusal, request_id,
                           request.app.state.on_change)
    return access


def you(principal: Principal, people: People, pending: dict[str, Any] | None) -> YouView:
    """What the principal may do to the session now."""
    refusal: Refusal | None = None
    if pending is not None:
        refusal = may_answer(principal, people, list(pending.get("approvers") or []),
                             pending.get("rule"))
        approvals = pending.get("approvals") or []
        if refusal is None and any(
                a.get("subject") == principal.subject and a.get("issuer") == principal.issuer
                for a in approvals if isinstance(a, dict)):
            refusal = Refusal(rule="already_approved",
                              message=f"{principal.subject} has already approved this request")
        if refusal is None and pending.get("separation_of_duties") and people.owner and \
                principal.is_named_by(people.owner):
            refusal = Refusal(rule="separation_of_duties", message=(
                "the session's owner may not approve their own agent's action"))
    return YouView(
        may_answer=pending is not None and refusal is None,
        refusal=RefusalView(rule=refusal.rule, message=refusal.message) if refusal else None,
        may_cancel=may_act(principal, people, "cancel") is None,
        may_end=may_act(principal, people, "end") is None)
