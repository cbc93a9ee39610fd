"""Links in messages: the request's page in the inbox and, where allowed, signed,
expiring, one-time approve and reject links bound to the session, the request, the
digest of what is asked, the decision and the person they were sent to
(docs/notifications.md, "Action links"; the threat model in docs/security.md).

A token is ``hfl1.<claims>.<signature>``: ``<claims>`` the base64url of a compact JSON
object (:class:`LinkClaims`), ``<signature>`` the base64url of its HMAC-SHA256 under
the key of :func:`link_secret`. It travels in the URL's fragment
(``<base>/act#t=<token>``), which browsers never send to a server: it is in no access
log and no ``Referer``. Opening the link shows a confirm page; only the page's POST
decides (``api.http.routers.act``). A token is single use through the state of its
request: once decided, the request is no longer pending with that digest.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.identity.private_file import PrivateFileError, read_private
from api.notify.model import Links, Notice
from api.notify.settings import NotifyConfig
from workflows.people import Principal, PrincipalRef, Role

#: The key file in the data directory, and its size.
LINK_KEY_NAME = "link-key"
KEY_BYTES = 32
#: The token's version prefix, and the most a token may be (a URL must stay usable).
PREFIX = "hfl1"
MAX_TOKEN_CHARS = 8192
#: The notices whose messages carry approve/reject links (a request still open).
LINKED_NOTICES = frozenset({"opened", "reminded", "escalated"})
#: The requests answered by approve or reject (``workflows.agent.answer_of``: an
#: approval's answer is ``{"approved": bool}``; a plan step's is a choice among
#: approve, skip and reset, which is not a yes or no).
LINKED_REQUESTS = frozenset({"approval"})

Decision = Literal["approve", "reject"]
LinkReason = Literal["malformed", "bad_signature", "expired"]


class LinkKeyError(Exception):
    """The link key file cannot be used; the message says how to fix it."""


class LinkError(Exception):
    """A token that cannot be used: ``reason`` is ``malformed``, ``bad_signature`` or
    ``expired``."""

    def __init__(self, reason: LinkReason, message: str) -> None:
        super().__init__(message)
        self.reason: LinkReason = reason
        self.message = message


class LinkRecipient(BaseModel):
    """The person a link was sent to, as the notifier knew them when it sent it."""

    model_config = ConfigDict(extra="forbid")

    issuer: str = Field(min_length=1, max_length=500)
    subject: str = Field(min_length=1, max_length=500)
    name: str = Field(default="", max_length=200)
    email: str | None = Field(default=None, max_length=320)
    groups: list[str] = Field(default_factory=list, max_length=200)
    role: Role = "viewer"  # a bare PrincipalRef binds no role: the least

    def principal(self) -> Principal:
        return Principal(issuer=self.issuer, subject=self.subject, name=self.name,
                         groups=list(self.groups), role=self.role, kind="person",
                         email=self.email)


class LinkClaims(BaseModel):
    """What a token says; all of it signed."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(min_length=1, max_length=128)
    request_id: str = Field(min_length=1, max_length=200)
    digest: str = Field(min_length=1, max_length=200)
    decision: Decision
    recipient: LinkRecipient
    jti: str = Field(min_length=16, max_length=64)
    iat: int
    exp: int


# -- the key ----------------------------------------------------------------------------


def _read_key(path: Path) -> bytes | None:
    """The key in ``path`` after the checks of every private file (a regular file of
    this user, not a symbolic link, readable by nobody else) and of its size."""
    try:
        key = read_private(path, what="the link key", limit=KEY_BYTES)
    except PrivateFileError as err:
        raise LinkKeyError(str(err)) from None
    if key is not None and len(key) != KEY_BYTES:
        raise LinkKeyError(f"{path} does not hold a {KEY_BYTES}-byte key: remove it (every "
                           "action link sent so far stops working) and start again")
    return key


def link_secret(data_dir: Path) -> bytes:
    """The key action links are signed with: ``<data_dir>/link-key``, 32 random bytes
    made once (mode 0600, written whole and then linked into place, so two processes
    starting at once agree on one key). A file that is a symbolic link, not this
    user's, readable by others or of the wrong size is a :class:`LinkKeyError`."""
    data_dir = Path(data_dir)
    path = data_dir / LINK_KEY_NAME
    key = _read_key(path)
    if key is not None:
        return key
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=".link-key.", suffix=".tmp")
    except OSError as err:
        raise LinkKeyError(f"{path} cannot be made: {err.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp: mode 0600, O_EXCL
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.link(tmp, path)  # never replaces a file: exclusive like O_EXCL
    except OSError as err:
        raise LinkKeyError(f"{path} cannot be made: {err.strerror}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    key = _read_key(path)
    if key is None:  # made and gone at once: someone else's doing
        raise LinkKeyError(f"{path} was removed while it was made")
    return key


# -- tokens -----------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text or any(c not in _ALPHABET for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _mac(secret: bytes, signed: str) -> bytes:
    return hmac.new(secret, signed.encode("ascii"), hashlib.sha256).digest()


def sign(secret: bytes, claims: LinkClaims) -> str:
    """The token of ``claims``."""
    body = json.dumps(claims.model_dump(mode="json"), separators=(",", ":"),
                      sort_keys=True, ensure_ascii=False).encode("utf-8")
    signed = f"{PREFIX}.{_b64(body)}"
    return f"{signed}.{_b64(_mac(secret, signed))}"


def verify(secret: bytes, token: str, now: datetime) -> LinkClaims:
    """The claims of a token signed with ``secret`` that has not expired at ``now``;
    :class:`LinkError` otherwise (``malformed``, ``bad_signature``, ``expired``, in the
    order they are checked: nothing of an unsigned token is believed)."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise LinkError("malformed", "this is not an action link's token")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise LinkError("malformed", "this is not an action link's token (the link may "
                        "have been cut: copy all of it)")
    prefix, body, mac = parts
    try:
        given, raw = _unb64(mac), _unb64(body)
    except (ValueError, binascii.Error):
        raise LinkError("malformed", "this action link's token is damaged (the link may "
                        "have been cut: copy all of it)") from None
    if not hmac.compare_digest(given, _mac(secret, f"{prefix}.{body}")):
        raise LinkError("bad_signature", "this action link was not signed by this server "
                        "(or it was changed)")
    try:
        claims = LinkClaims.model_validate(json.loads(raw.decode("utf-8")))
    except (ValueError, ValidationError):  # signed by us, so only an old or odd version
        raise LinkError("malformed", "this action link's token cannot be read") from None
    if now.timestamp() >= claims.exp:
        raise LinkError("expired", f"this action link expired at "
                        f"{datetime.fromtimestamp(claims.exp, now.tzinfo).isoformat()}")
    return claims


def recipient_of(who: PrincipalRef) -> LinkRecipient:
    """What a link binds of its recipient (a :class:`Principal` gives all of it)."""
    if isinstance(who, Principal):
        return LinkRecipient(issuer=who.issuer, subject=who.subject, name=who.name,
                             email=who.email, groups=list(who.groups), role=who.role)
    return LinkRecipient(issuer=who.issuer, subject=who.subject, name=who.name)


def action_token(notice: Notice, recipient: PrincipalRef, decision: Decision, *,
                 secret: bytes, now: datetime, ttl_s: float) -> str:
    """A signed token deciding ``notice``'s request with ``decision``, for ``recipient``."""
    assert notice.request_id is not None and notice.digest is not None
    iat = int(now.timestamp())
    return sign(secret, LinkClaims(
        session_id=notice.session_id, request_id=notice.request_id, digest=notice.digest,
        decision=decision, recipient=recipient_of(recipient), jti=secrets.token_hex(16),
        iat=iat, exp=iat + max(1, int(ttl_s))))


# -- URLs -------------------------------------------------------------------------------


def page_url(base_url: str, session_id: str) -> str:
    return f"{base_url.rstrip('/')}/#/s/{quote(session_id, safe='')}"


def act_url(base_url: str, token: str) -> str:
    """The confirm page of a token: the token in the fragment, never sent to a server."""
    return f"{base_url.rstrip('/')}/act#t={token}"


def links_for(notice: Notice, recipient: PrincipalRef | None, config: NotifyConfig, *,
              base_url: str, secret: bytes | None, now: datetime) -> Links:
    """The links of one message: the page always; approve/reject for an approval
    request when ``config.action_links``, a ``secret`` and a ``recipient`` person."""
    base = config.public_url or base_url
    links = Links(page=page_url(base, notice.session_id))
    if not (config.action_links and secret and recipient is not None
            and notice.kind in LINKED_NOTICES and notice.request_kind in LINKED_REQUESTS
            and notice.request_id and notice.digest):
        return links
    if isinstance(recipient, Principal) and recipient.kind != "person":
        return links  # a service or Temporal access: nobody reads its mail
    approve, reject = (action_token(notice, recipient, d, secret=secret, now=now,
                                    ttl_s=config.link_ttl_s) for d in ("approve", "reject"))
    if max(len(approve), len(reject)) > MAX_TOKEN_CHARS:  # a recipient of many groups:
        return links  # a link that would not verify is no link
    return links.model_copy(update={"approve": act_url(base, approve),
                                    "reject": act_url(base, reject)})
