"""Notifications for operators (issue 26): the outbox's counts and dead letters, sending
dead letters again, and a test message through a channel (docs/http-api.md
"Notifications", docs/notifications.md "Dead letters").

Every route needs the operator role or above (403 ``forbidden``, rule
``role.operator``, otherwise). The outbox is the notifier's (``api.notify.outbox``),
kept in the read model's database: these routes read and change its rows, they never
send a queued message themselves; a dead letter sent again is delivered by the
notifier, with the same message id, for a new window. A test message is sent now,
through the channel itself and not the outbox, and the answer says what the receiver
answered (or, 502, why it failed). Channel URLs and secrets are never in an answer.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from api.http.authority import forbidden
from api.http.deps import NotifyState, OutboxDep, PrincipalDep, get_notify_state
from api.http.errors import ApiError
from api.http.reads import store_call, store_of
from api.identity.people_store import EMAIL_CHAR
from api.notify.model import DeliveryFailed, Links, Message, Notice
from api.notify.settings import NotifyConfigError
from workflows.people import Principal, Refusal

log = logging.getLogger("hitlflow.api")
router = APIRouter(tags=["notifications"])

MAX_PAGE = 500
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,200}$"


async def operator(principal: PrincipalDep) -> Principal:
    if not principal.at_least("operator"):
        raise forbidden(Refusal(rule="role.operator", message=(
            f"{principal.subject} is a {principal.role}: notifications need the "
            "operator role")))
    return principal


OperatorDep = Annotated[Principal, Depends(operator)]
NotifyStateDep = Annotated[NotifyState, Depends(get_notify_state)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeadLetter(BaseModel):
    """A message the notifier could not deliver within its window (or that its
    receiver refused for good)."""

    model_config = ConfigDict(extra="allow")
    message_id: str = Field(description="The message's stable id (the webhook-id, the "
                            "Message-ID): sent again, it keeps it.")
    channel: str
    recipient: str | None = None
    kind: str = Field(description="The notice: opened, reminded, escalated, expired, "
                      "auto_decided or ended.")
    session_id: str
    request_id: str | None = None
    attempts: int
    last_error: str | None = None
    created_at: str | None = Field(default=None, description="When it was routed (UTC).")
    dead_at: str | None = Field(default=None, description="When it became a dead letter.")


class DeadLetterPage(BaseModel):
    dead_letters: list[DeadLetter]
    offset: int
    next_offset: int | None = Field(description="The `offset` of the next page; null on "
                                    "the last.")


class Resent(BaseModel):
    message_id: str
    resent: Literal[True] = True


class ResentAll(BaseModel):
    resent: int = Field(description="How many dead letters went back to the outbox.")


class ChannelView(BaseModel):
    name: str
    type: Literal["webhook", "slack", "email"]


class NotificationsView(BaseModel):
    configured: bool = Field(description="Whether the API has a notify config "
                             "(HITLFLOW_NOTIFY_CONFIG).")
    config_error: str | None = Field(default=None, description="Why the notify config "
                                     "cannot be used (null when it can, or when none).")
    counts: dict[str, int] = Field(description="Outbox messages by state: pending, "
                                   "delivered, dead.")
    channels: list[ChannelView]


class ChannelTest(_Body):
    channel: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$",
                         description="A channel of the notify config, by name.")
    to: str | None = Field(default=None, min_length=3, max_length=320,
                           pattern=rf"^{EMAIL_CHAR}+@{EMAIL_CHAR}+$",
                           description="E-mail channels: the address to send to "
                           "(default: the caller's e-mail address).")


class ChannelTestSent(BaseModel):
    channel: str
    type: str
    message_id: str
    recipient: str | None = None
    answer: str = Field(description="What the receiver answered, in a few words.")


class ResendAllRequest(_Body):
    pass


class ResendRequest(_Body):
    pass


@router.get("/api/notifications", response_model=NotificationsView)
async def notifications(_: OperatorDep, notify: NotifyStateDep, outbox: OutboxDep,
                        request: Request) -> NotificationsView:
    """The outbox's counts (pending, delivered, dead) and the channels of the notify
    config by name and type (never their URLs or secrets)."""
    store = store_of(request.app.state)
    counts = await store_call(store, outbox.counts)
    channels = [ChannelView(name=n, type=c.type) for n, c in sorted(
        (notify.config.channels if notify.config else {}).items())]
    return NotificationsView(configured=notify.config is not None,
                             config_error=notify.error, counts=counts, channels=channels)


@router.get("/api/notifications/dead-letters", response_model=DeadLetterPage)
async def dead_letters(
    _: OperatorDep, outbox: OutboxDep, request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=(
        f"Page size, 1 to {MAX_PAGE}."))] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1, description=(
        "Where the page starts: 0, or the previous page's `next_offset`."))] = 0,
) -> DeadLetterPage:
    """The dead letters, newest first, a page at a time."""
    store = store_of(request.app.state)
    rows = await store_call(store, outbox.dead_letters, limit + 1, offset)
    more = len(rows) > limit
    return DeadLetterPage(dead_letters=[DeadLetter.model_validate(r) for r in rows[:limit]],
                          offset=offset, next_offset=offset + limit if more else None)


@router.post("/api/notifications/dead-letters/resend", response_model=ResentAll)
async def resend_all(_: ResendAllRequest, who: OperatorDep, outbox: OutboxDep,
                     request: Request) -> ResentAll:
    """Every dead letter back to the outbox: each is delivered again, with its own
    message id, for a new window. Body: ``{}``."""
    store = store_of(request.app.state)
    count = await store_call(store, outbox.resend_dead)
    log.info("notifications: %s sent %d dead letters again", who.subject, count)
    return ResentAll(resent=count)


@router.post("/api/notifications/dead-letters/{message_id}/resend", response_model=Resent)
async def resend(
    _: ResendRequest, who: OperatorDep, outbox: OutboxDep, request: Request,
    message_id: Annotated[str, Path(pattern=MESSAGE_ID_PATTERN, description=(
        "A dead letter's `message_id`."))],
) -> Resent:
    """One dead letter back to the outbox, with the same message id, for a new window
    (404 ``dead_letter_not_found`` when no dead letter has that id). Body: ``{}``."""
    store = store_of(request.app.state)
    if not await store_call(store, outbox.resend, message_id):
        raise ApiError(404, "dead_letter_not_found", f"no dead letter {message_id!r} "
                       "(it may have been sent again already)")
    log.info("notifications: %s sent dead letter %s again", who.subject, message_id)
    return Resent(message_id=message_id)


@router.post("/api/notifications/test", response_model=ChannelTestSent, responses={
    502: {"description": "The receiver failed or could not be reached: `delivery_failed`, "
          "the message says why"}})
async def send_test(body: ChannelTest, who: OperatorDep, notify: NotifyStateDep,
                    request: Request) -> ChannelTestSent:
    """Send a test message through a channel now (not through the outbox) and say what
    its receiver answered. 409 ``notify_not_configured`` without a notify config (or
    ``notify_config_invalid``), 404 ``channel_not_found``, 409 ``channel_unusable`` when
    the channel cannot be built (e.g. its secret's environment variable is not set),
    422 ``recipient_required`` for an e-mail channel with no address, 502
    ``delivery_failed`` with the receiver's answer or the reason."""
    if notify.config is None:
        if notify.error is not None:
            raise ApiError(409, "notify_config_invalid", notify.error)
        raise ApiError(409, "notify_not_configured", "the API has no notify config "
                       "(HITLFLOW_NOTIFY_CONFIG names it; docs/notifications.md)")
    config = notify.config.channels.get(body.channel)
    if config is None:
        known = ", ".join(sorted(notify.config.channels)) or "none"
        raise ApiError(404, "channel_not_found", f"no channel {body.channel!r} in the "
                       f"notify config (its channels: {known})")
    recipient = body.to
    if config.type == "email":
        recipient = recipient or who.email
        if recipient is None:
            raise ApiError(422, "recipient_required", f"{who.subject} has no e-mail "
                           "address: name one (`to`)")
    channel = _build(body.channel, config)
    base = (notify.config.public_url or str(request.base_url)).rstrip("/")
    message = trial_message(body.channel, recipient, who, base)
    try:
        answer = await channel.send(message)
    except DeliveryFailed as err:
        log.warning("notifications: %s's test message through %s failed: %s",
                    who.subject, body.channel, err.detail)
        raise ApiError(502, "delivery_failed", err.detail) from None
    log.info("notifications: %s sent a test message through %s: %s", who.subject,
             body.channel, answer)
    return ChannelTestSent(channel=body.channel, type=config.type, message_id=message.message_id,
                    recipient=recipient, answer=answer)


def _build(name: str, config: Any) -> Any:
    from api.notify.channels import build_channel

    try:
        return build_channel(name, config)
    except NotifyConfigError as err:
        raise ApiError(409, "channel_unusable", str(err)) from None
    except (ImportError, AttributeError):
        raise ApiError(409, "channel_unusable", f"channel {name}: the {config.type} "
                       "channel is not available in this version") from None


def trial_message(channel: str, recipient: str | None, who: Principal, base: str) -> Message:
    """A message that names itself a test: no session waits, the link opens the
    inbox's notifications view."""
    now = datetime.now(UTC)
    test_id = uuid.uuid4().hex
    notice = Notice(
        notice_id=f"test:{test_id}", kind="opened", session_id="notify-test", seq=0,
        at=now.isoformat(), title="notify-test", request_id=f"test-{test_id[:8]}",
        request_kind="test message",
        prompt=(f"A test message from hitlflow, sent by {who.name or who.subject} to "
                f"check the channel {channel}. Nothing waits for you."))
    return Message(message_id=f"msg_test_{test_id}", channel=channel, recipient=recipient,
                   notice=notice, links=Links(page=f"{base}/#/notifications"))
