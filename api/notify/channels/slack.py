"""The Slack channel: a Block Kit message to a Slack-compatible incoming webhook.

One message per notice: a header (what happened, :func:`api.notify.model.summary`),
a section with the prompt and what is asked, a context line naming the session, the
request and the digest of what is asked, and an actions block whose buttons link to
the approve and reject pages (when the message carries signed action links) and
always to the request's page in the inbox. Buttons only link: opening a link decides
nothing (the action page asks to confirm).

The webhook URL is a secret (whoever has it may post to the channel): it comes from
the config (``url``) or from the environment variable ``url_env`` names, read when
the sender is built, and it is never logged nor put in an error (``httpx`` logs each
request's URL at INFO; a filter here blanks the URLs of the channels built).

Slack answers ``ok`` with 200. 408, 429 and 5xx (and a receiver that cannot be
reached) are worth trying again; any other answer is a permanent
:class:`~api.notify.model.DeliveryFailed`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

from api.notify.model import DeliveryFailed, Message, summary
from api.notify.settings import SlackChannel, secret_from_env

#: Slack's limits (https://api.slack.com/reference/block-kit/blocks): what a message
#: may hold. Text over a limit is cut (with "…"), never refused by Slack.
MAX_BLOCKS = 50
HEADER_TEXT = 150
SECTION_TEXT = 3000
CONTEXT_TEXT = 3000
BUTTON_TEXT = 75
BUTTON_URL = 3000
FALLBACK_TEXT = 3000  # the top-level `text`: what notifications and screen readers show
RETRYABLE = frozenset({408, 429})


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def escape(text: str) -> str:
    """Text as mrkdwn shows it literally: ``&``, ``<`` and ``>`` escaped (so an agent's
    prompt cannot make links or ``<!channel>`` mentions)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": cut(text, limit), "emoji": False}


def _mrkdwn(text: str, limit: int) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": cut(text, limit)}


def _asked(asked: dict[str, Any] | None, room: int) -> str:
    if not asked:
        return ""
    text = json.dumps(asked, indent=2, ensure_ascii=False, sort_keys=True)
    block = "*What is asked:*\n```" + escape(text) + "```"
    if len(block) <= room:
        return block
    keep = max(0, room - len("*What is asked:*\n```…```"))
    return "*What is asked:*\n```" + escape(text)[:keep] + "…```"


def blocks_of(message: Message) -> dict[str, Any]:
    """The webhook's JSON body: ``text`` (the fallback) and ``blocks``."""
    notice, links = message.notice, message.links
    title = summary(notice)
    prompt = escape(notice.prompt) if notice.prompt else ""
    if notice.kind == "ended":
        body = f"The session ended: *{escape(notice.status or 'ended')}*."
    elif notice.kind == "auto_decided" and notice.answer is not None:
        body = "Decided by its timeout: `" + escape(
            json.dumps(notice.answer, ensure_ascii=False)) + "`"
    else:
        body = prompt or "_(no prompt)_"
    if notice.escalated_to:
        body += "\n*Escalated to:* " + escape(", ".join(notice.escalated_to))
    asked = _asked(notice.asked, SECTION_TEXT - len(body) - 2)
    section = body + ("\n\n" + asked if asked else "")
    facts = [f"session `{escape(notice.session_id)}`"]
    if notice.request_id:
        facts.append(f"request `{escape(notice.request_id)}`")
    if notice.digest:
        facts.append(f"digest `{escape(notice.digest)}`")
    facts.append(f"message `{escape(message.message_id)}`")
    buttons = []
    if links.approve:
        buttons.append(_button("approve", "Approve", links.approve, "primary"))
    if links.reject:
        buttons.append(_button("reject", "Reject", links.reject, "danger"))
    buttons.append(_button("open", "Open", links.page))
    blocks = [
        {"type": "header", "text": _plain(title, HEADER_TEXT)},
        {"type": "section", "text": _mrkdwn(section, SECTION_TEXT)},
        {"type": "context", "elements": [_mrkdwn(" · ".join(facts), CONTEXT_TEXT)]},
        {"type": "actions", "block_id": "hitlflow-actions", "elements": buttons},
    ]
    return {"text": cut(title, FALLBACK_TEXT), "blocks": blocks[:MAX_BLOCKS]}


def _button(action: str, text: str, url: str, style: str | None = None) -> dict[str, Any]:
    if len(url) > BUTTON_URL:
        # A link cut short would not work: refuse it (the page link is short; a signed
        # link that long means a public_url that is wrong).
        raise DeliveryFailed(f"the {action} link is longer than Slack's {BUTTON_URL} "
                             "characters", permanent=True)
    button: dict[str, Any] = {"type": "button", "action_id": f"hitlflow-{action}",
                              "text": _plain(text, BUTTON_TEXT), "url": url}
    if style:
        button["style"] = style
    return button


class _BlankSecretUrls(logging.Filter):
    """On the ``httpx`` logger: the URLs of Slack channels replaced by ``<secret url>``."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.urls and isinstance(record.args, tuple):
            record.args = tuple(_blank(str(a), self.urls) if any(
                u in str(a) for u in self.urls) else a for a in record.args)
        if self.urls and isinstance(record.msg, str):
            record.msg = _blank(record.msg, self.urls)
        return True


def _blank(text: str, urls: set[str]) -> str:
    for url in urls:
        text = text.replace(url, "<secret url>")
    return text


_FILTER = _BlankSecretUrls()
logging.getLogger("httpx").addFilter(_FILTER)


class SlackSender:
    """``Channel`` for ``type: slack``: ``await send(message)`` posts it."""

    def __init__(self, name: str, config: SlackChannel) -> None:
        self.name = name
        self.config = config
        url = config.url if config.url is not None else secret_from_env(
            config.url_env, f"channel {name}: url_env")
        assert url is not None  # the config gives exactly one of url and url_env
        self._url = url
        _FILTER.urls.add(url)

    def __repr__(self) -> str:  # never the URL
        return f"SlackSender({self.name!r})"

    async def send(self, message: Message) -> str:
        payload = blocks_of(message)
        try:
            async with httpx.AsyncClient(timeout=self.config.timeout_s,
                                         follow_redirects=False) as http:
                r = await http.post(self._url, json=payload)
        except httpx.HTTPError as err:
            raise DeliveryFailed(f"{self.name}: the receiver could not be reached: "
                                 f"{type(err).__name__}: {self._blanked(str(err))}"
                                 ) from None
        said = self._blanked(r.text.strip()[:200]) or r.reason_phrase
        if 200 <= r.status_code < 300:
            return f"{r.status_code} {said}"
        permanent = not (r.status_code in RETRYABLE or r.status_code >= 500)
        raise DeliveryFailed(f"{self.name}: the receiver answered {r.status_code}: {said}",
                             permanent=permanent)

    def _blanked(self, text: str) -> str:
        return _blank(text, {self._url})
