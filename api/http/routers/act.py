"""Signed one-time action links (issue 26; docs/notifications.md, "Action links").

``GET /act`` serves the confirm page (``api/http/inbox/act.html`` and ``act.js``). The
page reads the token from the URL's fragment (which no server sees), asks
``POST /api/act/inspect`` what it would decide and shows it with a Confirm button, or
the reason it cannot be used. Only Confirm, ``POST /api/act/decide``, decides.
OPENING A LINK NEVER DECIDES ANYTHING: mail scanners and chat previews open links.

The routes are open (the doors ask no credential): the token is the credential, signed
with the data directory's link key (``api.notify.links``). A decision goes through the
same checks and the same update as the inbox's reply (``check_answer``, then the
``reply`` update with ``via: "link"``), as the person the link was sent to: in ``local``
mode that person as ``people.json`` says now (removed: refused; their current role and
groups), in the other modes the principal the token names. A token is single use through
the state of its request: once decided, the request is no longer pending with that
digest. Every failure is a 4xx with a code, and nothing changes:

=================== ====== ===============================================================
code                status why
=================== ====== ===============================================================
link_malformed      400    not a token, or a cut one
link_bad_signature  403    not signed with this server's key, or changed
link_expired        410    past its expiry
link_used           409    this person already decided this request through a link
request_answered    409    the request was answered otherwise (or by someone else)
request_changed     409    what is asked is not what the link was made for
forbidden           403    the person may not answer it (any more); recorded in the log
=================== ====== ===============================================================
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.http.authority import check_answer, forbidden, session_people, you
from api.http.deps import ClientDep, SettingsDep, TuningDep
from api.http.errors import ERROR_RESPONSES, ApiError
from api.http.models import ErrorBody
from api.http.reads import Freshness, fresh_row, store_call, store_of
from api.http.routers.inbox import HEADERS
from api.http.routers.sessions import Actor, _decider, _update
from api.identity.people_store import LOCAL_ISSUER, PeopleFileError, PeopleStore
from api.notify.links import (
    MAX_TOKEN_CHARS,
    LinkClaims,
    LinkError,
    LinkKeyError,
    link_secret,
    verify,
)
from api.settings import HitlflowSettings
from observation.exporter.verify import LOG_NAME
from workflows.config import valid_session_id
from workflows.messages import ReplyInput
from workflows.people import Principal, Refusal

log = logging.getLogger("hitlflow.api")
router = APIRouter(tags=["action links"])

PAGE_PATH, SCRIPT_PATH = "/act", "/act.js"
INSPECT_PATH, DECIDE_PATH = "/api/act/inspect", "/api/act/decide"
#: The paths the doors leave open (api.http.doors.OPEN_PATHS): the token is the credential.
PATHS = frozenset({PAGE_PATH, SCRIPT_PATH, INSPECT_PATH, DECIDE_PATH})

_LINK_ERRORS = {"malformed": (400, "link_malformed"), "bad_signature": (403, "link_bad_signature"),
                "expired": (410, "link_expired")}
#: What the two POSTs answer besides 200 (the API's errors, and an expired link).
RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    410: {"model": ErrorBody, "description": "The link expired (`link_expired`); nothing "
          "changed"}}
#: Each refusal's status and code (for the docs and the OpenAPI document).
CODES = {"link_malformed": 400, "link_bad_signature": 403, "link_expired": 410,
         "link_used": 409, "request_answered": 409, "request_changed": 409, "forbidden": 403}


# -- the key ----------------------------------------------------------------------------


async def load_link_secret(data_dir: Path) -> bytes | None:
    """The link key for the API's lifespan (``app.state.link_secret``): made once in the
    data directory; None (logged, the routes answer 503) when its file is refused."""
    try:
        return await asyncio.to_thread(link_secret, data_dir)
    except LinkKeyError as err:
        log.error("action links cannot be checked: %s", err)
        return None


async def get_link_secret(request: Request) -> bytes:
    secret = getattr(request.app.state, "link_secret", None)
    if secret is None:
        raise ApiError(503, "links_unavailable", "this API cannot check action links: its "
                       "link key cannot be used (its log says why)")
    return secret


LinkSecretDep = Annotated[bytes, Depends(get_link_secret)]


# -- the page ---------------------------------------------------------------------------


#: The confirm page's files in ``api/http/inbox/`` (not the inbox's: served here) -> type.
FILES = {"act.html": "text/html; charset=utf-8", "act.js": "text/javascript; charset=utf-8"}


def _file(name: str) -> Response:
    body = resources.files("api.http.inbox").joinpath(name).read_bytes()
    return Response(body, media_type=FILES[name],
                    headers={**HEADERS, "Cache-Control": "no-store"})


@router.get(PAGE_PATH, include_in_schema=False)
async def act_page() -> Response:
    """The confirm page; it decides nothing by being opened."""
    return _file("act.html")


@router.get(SCRIPT_PATH, include_in_schema=False)
async def act_script() -> Response:
    return _file("act.js")


# -- the API ----------------------------------------------------------------------------


class LinkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=MAX_TOKEN_CHARS, description=(
        "The token of an action link (what follows `#t=` in its URL)."))


class LinkRecipientView(BaseModel):
    issuer: str
    subject: str
    name: str = ""
    email: str | None = None


class LinkView(BaseModel):
    """What a link would decide, shown on the confirm page before anything is decided."""

    session_id: str
    request_id: str
    kind: str
    prompt: str = ""
    asked: dict[str, Any] | None = None
    digest: str
    decision: str = Field(description="`approve` or `reject`")
    recipient: LinkRecipientView = Field(description="Whom the link was sent to: the "
                                         "decision is recorded as theirs, through a link.")
    expires_at: str
    sent_at: str


class LinkDecided(BaseModel):
    session_id: str
    request_id: str
    decision: str
    status: str | None = None
    journal_seq: int | None = None


def _claims(secret: bytes, token: str) -> LinkClaims:
    try:
        return verify(secret, token, datetime.now(UTC))
    except LinkError as err:
        status, code = _LINK_ERRORS[err.reason]
        raise ApiError(status, code, err.message) from None


def _recipient(request: Request, settings: HitlflowSettings, claims: LinkClaims) -> Principal:
    """Who decides: in ``local`` mode the person as people.json says now; else the
    principal the token names."""
    named = claims.recipient
    if settings.effective_auth_mode != "local":
        return named.principal()
    store = getattr(request.app.state, "act_people", None)
    if store is None:
        store = request.app.state.act_people = PeopleStore(settings.data_dir)
    try:
        person = store.read().find(named.subject) if named.issuer == LOCAL_ISSUER else None
    except PeopleFileError as err:
        log.error("action links: the people file cannot be read: %s", err)
        raise ApiError(503, "people_unavailable", "the API cannot read its people file "
                       "(its log says why)") from None
    if person is None:
        raise forbidden(Refusal(rule="link.recipient", message=(
            f"{named.subject} is no longer one of this server's people: the link sent to "
            "them no longer decides anything")))
    return person.principal()


def _decided_via_link(settings: HitlflowSettings, session_id: str, request_id: str,
                      who: Principal) -> bool:
    """Whether the session's log shows ``who`` deciding (or approving) ``request_id``
    through a link."""
    if not valid_session_id(session_id):
        return False
    path = settings.data_dir / "runs" / session_id / LOG_NAME
    needle = json.dumps(request_id)
    try:
        with path.open("rb") as f:
            for raw in f:
                if needle.encode() not in raw:
                    continue
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                p = line.get("payload") or {}
                by = p.get("principal") or {}
                if line.get("type") in ("ISSUE_RESOLVED", "ISSUE_APPROVAL_RECORDED") and \
                        p.get("issue_id") == request_id and p.get("via") == "link" and \
                        (by.get("issuer"), by.get("subject")) == (who.issuer, who.subject):
                    return True
    except OSError:
        return False
    return False


async def _gone(settings: HitlflowSettings, claims: LinkClaims, who: Principal,
                why: str) -> ApiError:
    """The request is no longer open to this link: used by this person, or not."""
    if await asyncio.to_thread(_decided_via_link, settings, claims.session_id,
                               claims.request_id, who):
        return ApiError(409, "link_used", f"this link was already used: {who.name or who.subject} "
                        f"decided request {claims.request_id} through a link")
    return ApiError(409, "request_answered", f"request {claims.request_id} was {why}: "
                    "this link no longer decides anything")


async def _still_open(request: Request, settings: HitlflowSettings, claims: LinkClaims,
                      who: Principal) -> dict[str, Any]:
    """The pending request the link decides, as the read model has it; the refusal
    otherwise (nothing recorded: reading changes nothing)."""
    store = store_of(request.app.state)
    row = await store_call(store, store.session, claims.session_id)
    if row is None:
        raise ApiError(404, "session_not_found", f"no session {claims.session_id}")
    pending = row.get("pending")
    if not pending or pending.get("request_id") != claims.request_id:
        raise await _gone(settings, claims, who, "answered already")
    if pending.get("digest") != claims.digest:
        raise ApiError(409, "request_changed", f"what request {claims.request_id} asks changed "
                       "since this link was sent: open the session in the inbox")
    return pending


async def _may_answer(request: Request, settings: HitlflowSettings, claims: LinkClaims,
                      who: Principal, pending: dict[str, Any]) -> None:
    """Inspect's check (the decide's is ``check_answer``, which records a refusal)."""
    people = await session_people(request, claims.session_id)
    refusal = you(who, people, pending).refusal
    if refusal is None:
        return
    if refusal.rule == "already_approved":
        raise await _gone(settings, claims, who, f"approved by {who.subject} already")
    raise forbidden(Refusal(rule=refusal.rule, message=refusal.message))


@router.post(INSPECT_PATH, response_model=LinkView, responses=RESPONSES)
async def inspect(body: LinkBody, settings: SettingsDep, secret: LinkSecretDep,
                  request: Request, response: Response) -> LinkView:
    """What an action link would decide, and for whom; changes nothing. A link that
    cannot be used: 400 `link_malformed`, 403 `link_bad_signature`, 410 `link_expired`,
    409 `link_used` / `request_answered` / `request_changed`, 403 `forbidden`."""
    response.headers["Cache-Control"] = "no-store"
    claims = _claims(secret, body.token)
    who = _recipient(request, settings, claims)
    pending = await _still_open(request, settings, claims, who)
    await _may_answer(request, settings, claims, who, pending)
    return LinkView(
        session_id=claims.session_id, request_id=claims.request_id,
        kind=str(pending.get("kind") or ""), prompt=str(pending.get("prompt") or ""),
        asked=pending.get("asked"), digest=claims.digest, decision=claims.decision,
        recipient=LinkRecipientView(issuer=who.issuer, subject=who.subject, name=who.name,
                                    email=who.email),
        expires_at=datetime.fromtimestamp(claims.exp, UTC).isoformat(),
        sent_at=datetime.fromtimestamp(claims.iat, UTC).isoformat())


#: The reply update's refusals, as a link says them.
_CHANGED = frozenset({"stale_digest"})
_GONE = frozenset({"already_approved", "reply_refused"})


@router.post(DECIDE_PATH, response_model=LinkDecided, responses=RESPONSES)
async def decide(body: LinkBody, settings: SettingsDep, secret: LinkSecretDep,
                 client: ClientDep, tuning: TuningDep, request: Request,
                 response: Response) -> LinkDecided:
    """Decide what the link says, as the person it was sent to (recorded with
    `via: "link"`). The request must still be pending with the link's digest and the
    person still allowed to answer it. The same refusals as inspect (a `forbidden` is
    recorded in the session's log); nothing else changes."""
    response.headers["Cache-Control"] = "no-store"
    claims = _claims(secret, body.token)
    who = _recipient(request, settings, claims)
    pending = await _still_open(request, settings, claims, who)
    if any(a.get("issuer") == who.issuer and a.get("subject") == who.subject
           for a in pending.get("approvals") or [] if isinstance(a, dict)):
        raise await _gone(settings, claims, who, f"approved by {who.subject} already")
    await check_answer(request, client, who, claims.session_id, claims.request_id)
    answer = ReplyInput(request_id=claims.request_id, approve=claims.decision == "approve",
                        digest=claims.digest, by=_decider(who), principal=who, via="link")
    try:
        ack = await _update(client, claims.session_id, "reply", answer, code="reply_refused",
                            closed="nothing is pending", tuning=tuning,
                            changed=request.app.state.on_change,
                            limit=settings.max_input_bytes,
                            actor=Actor(who, "reply", claims.request_id))
    except ApiError as err:
        if err.code in _CHANGED:
            raise ApiError(409, "request_changed", f"what request {claims.request_id} asks "
                           "changed since this link was sent: open the session in the "
                           "inbox") from None
        if err.code in _GONE:
            raise await _gone(settings, claims, who, "answered already") from None
        raise
    # Read your write: the confirm page, opened again, shows the link used.
    store = store_of(request.app.state)
    await fresh_row(store, claims.session_id, Freshness(min_journal_seq=ack.journal_seq),
                    tuning.freshness_wait_s)
    return LinkDecided(session_id=claims.session_id, request_id=claims.request_id,
                       decision=claims.decision, status=ack.status.value,
                       journal_seq=ack.journal_seq)
