"""What the notifier's parts pass each other: a notice, a message, a channel."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from workflows.config import NoticeKind


class Notice(BaseModel):
    """One thing worth telling people, read off one log line (``rm_notices``)."""

    notice_id: str  # "<session_id>:<seq>": stable across restarts and rebuilds
    kind: NoticeKind
    session_id: str
    seq: int  # the log line it comes from
    at: str  # that line's time (ISO 8601)
    title: str = ""  # the session's title
    request_id: str | None = None
    request_kind: str | None = None  # approval, confirm, choose, form, step, message
    prompt: str = ""
    digest: str | None = None
    asked: dict[str, Any] | None = None
    # Whom the request is addressed to now (after an escalation: with escalated_to);
    # empty: the session's people (owner and approvers)
    addressees: list[str] = Field(default_factory=list)
    escalated_to: list[str] = Field(default_factory=list)
    owner: str | None = None
    approvers: list[str] = Field(default_factory=list)  # the session's
    session_notify: list[dict[str, Any]] = Field(default_factory=list)  # config.notify
    answer: dict[str, Any] | None = None  # auto_decided: what was decided
    by: str | None = None
    status: str | None = None  # ended: how the session ended


class Links(BaseModel):
    page: str  # the request's (or session's) page in the inbox
    approve: str | None = None  # signed one-time action links, where allowed
    reject: str | None = None


class Message(BaseModel):
    """One delivery to one channel (and, for e-mail, one address): an outbox row."""

    message_id: str  # stable: the webhook-id, the Message-ID; receivers dedupe on it
    channel: str
    recipient: str | None = None  # an e-mail address, or the person links are bound to
    notice: Notice
    links: Links


class DeliveryFailed(Exception):
    """A send that did not reach its receiver; ``permanent``: trying again cannot
    help (a 4xx other than 408/429, an address the server refused)."""

    def __init__(self, detail: str, *, permanent: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.permanent = permanent


class Channel(Protocol):
    name: str

    async def send(self, message: Message) -> str:
        """Deliver ``message``; returns what the receiver answered, in a few words
        (raises :class:`DeliveryFailed`)."""
        ...


_VERB = {"opened": "waits for you", "reminded": "still waits for you (reminder)",
         "escalated": "was escalated to you", "expired": "expired unanswered",
         "auto_decided": "was decided by its timeout", "ended": "ended"}


def summary(notice: Notice) -> str:
    """One line saying what happened, for subjects and headers."""
    what = (f"session {notice.title or notice.session_id}" if notice.kind == "ended"
            else f"{notice.request_kind or 'request'} {notice.request_id} in session "
                 f"{notice.title or notice.session_id}")
    tail = f" ({notice.status})" if notice.kind == "ended" and notice.status else ""
    return f"{what} {_VERB[notice.kind]}{tail}"
