"""The e-mail channel: one message per addressee over SMTP (``aiosmtplib``).

STARTTLS when the channel says ``starttls: true`` (the server's certificate is
verified against the system's trust store; ``SSL_CERT_FILE`` names another); a login
with ``username`` and the password from the environment variable ``password_env``,
read when the channel is built and never logged nor put in an error. A password is
sent only over STARTTLS or to a loopback address.

Each message has a plain-text and an HTML part: what happened (``summary``), what is
asked (the prompt, the tool and arguments, the digest), the request's page and, where
the notifier made them, the approve and reject links. Its ``Message-ID`` is derived
from the outbox message's id, so a message sent twice is recognisably the same one.

A recipient the server refuses with a 5xx at ``RCPT`` is a permanent failure; any
other failure (a connection, a timeout, a 4xx, the login) may pass and is retried.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import json
from email.errors import MessageError
from email.message import EmailMessage
from email.utils import formatdate

import aiosmtplib

from api.notify.model import DeliveryFailed, Message, summary
from api.notify.settings import EmailChannel, NotifyConfigError, secret_from_env

#: What the subject and header values may hold at most.
_SUBJECT_CHARS = 200
#: What of the asked JSON a message shows at most.
_ASKED_CHARS = 4000


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _one_line(text: str, limit: int = _SUBJECT_CHARS) -> str:
    """A header value: no line breaks (no header injection), bounded."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def message_id(outbox_id: str, sender: str) -> str:
    """The ``Message-ID`` of an outbox message: the same for every try of it."""
    domain = sender.rpartition("@")[2].strip("<> ") or "hitlflow.invalid"
    digest = hashlib.sha256(outbox_id.encode("utf-8")).hexdigest()[:40]
    return f"<hitlflow.{digest}@{_one_line(domain, 200)}>"


def _asked_text(message: Message) -> str:
    asked = message.notice.asked
    if not asked:
        return ""
    text = json.dumps(asked, indent=2, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _ASKED_CHARS else text[:_ASKED_CHARS] + "\n…"


def text_body(message: Message) -> str:
    n, links = message.notice, message.links
    lines = [summary(n) + ".", ""]
    if n.prompt:
        lines += [n.prompt, ""]
    if asked := _asked_text(message):
        lines += ["What is asked:", asked, ""]
    if n.digest:
        lines += [f"Digest: {n.digest}", ""]
    lines += [f"Open it in the inbox: {links.page}", ""]
    if links.approve and links.reject:
        lines += [f"Approve: {links.approve}", f"Reject: {links.reject}", "",
                  "Opening a link decides nothing: it shows what is asked and a Confirm "
                  "button. The links work once, for you only; do not forward them.", ""]
    lines.append(f"Session {n.session_id}" + (f", request {n.request_id}" if n.request_id
                                              else "") + ".")
    return "\n".join(lines) + "\n"


def html_body(message: Message) -> str:
    n, links = message.notice, message.links
    e = html.escape
    parts = [f"<p><strong>{e(summary(n))}.</strong></p>"]
    if n.prompt:
        parts.append(f"<p>{e(n.prompt)}</p>")
    if asked := _asked_text(message):
        parts.append(f"<p>What is asked:</p><pre>{e(asked)}</pre>")
    if n.digest:
        parts.append(f"<p>Digest: <code>{e(n.digest)}</code></p>")
    buttons = [f'<a href="{e(links.page)}">Open it in the inbox</a>']
    if links.approve and links.reject:
        buttons += [f'<a href="{e(links.approve)}">Approve</a>',
                    f'<a href="{e(links.reject)}">Reject</a>']
    parts.append("<p>" + " &middot; ".join(buttons) + "</p>")
    if links.approve and links.reject:
        parts.append("<p><small>Opening a link decides nothing: it shows what is asked and "
                     "a Confirm button. The links work once, for you only; do not forward "
                     "them.</small></p>")
    where = f"Session {n.session_id}" + (f", request {n.request_id}" if n.request_id else "")
    parts.append(f"<p><small>{e(where)}.</small></p>")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"></head><body>"
            + "".join(parts) + "</body></html>\n")


class EmailSender:
    """``Channel`` over SMTP (``api.notify.channels.SENDERS``)."""

    def __init__(self, name: str, config: EmailChannel) -> None:
        self.name, self.config = name, config
        self._password = secret_from_env(config.password_env, f"channel {name}")
        if self._password is not None and config.username is None:
            raise NotifyConfigError(f"channel {name}: password_env without a username")
        if self._password is not None and not config.starttls and not _loopback(config.host):
            raise NotifyConfigError(f"channel {name}: a password is only sent over "
                                    f"STARTTLS (set starttls: true) or to a loopback host, "
                                    f"not in the clear to {config.host}")

    def build(self, message: Message) -> EmailMessage:
        """The e-mail of ``message`` (plain text and HTML)."""
        if not message.recipient:
            raise DeliveryFailed("no e-mail address to send to", permanent=True)
        mail = EmailMessage()
        mail["Subject"] = _one_line(summary(message.notice))
        mail["From"] = self.config.sender
        mail["To"] = message.recipient
        mail["Date"] = formatdate(localtime=False, usegmt=True)
        mail["Message-ID"] = message_id(message.message_id, self.config.sender)
        mail["X-Hitlflow-Message-Id"] = _one_line(message.message_id, 300)
        mail["X-Hitlflow-Session"] = _one_line(message.notice.session_id, 200)
        mail["Auto-Submitted"] = "auto-generated"
        mail.set_content(text_body(message))
        mail.add_alternative(html_body(message), subtype="html")
        return mail

    async def send(self, message: Message) -> str:
        try:
            mail = self.build(message)
        except (ValueError, MessageError) as err:  # an address it cannot write
            raise DeliveryFailed(f"cannot write the e-mail: {err}", permanent=True) from None
        c = self.config
        try:
            _, answer = await aiosmtplib.send(
                mail, hostname=c.host, port=c.port, start_tls=c.starttls, use_tls=False,
                username=c.username if self._password is not None else None,
                password=self._password, timeout=c.timeout_s)
        except aiosmtplib.SMTPRecipientsRefused as err:
            codes = [r.code for r in err.recipients]
            said = "; ".join(f"{r.code} {_one_line(r.message, 200)}" for r in err.recipients)
            raise DeliveryFailed(f"the server refused the recipient: {said}",
                                 permanent=all(500 <= code < 600 for code in codes)) from None
        except aiosmtplib.SMTPResponseException as err:
            raise DeliveryFailed(f"the server answered {err.code} "
                                 f"{_one_line(err.message, 200)}") from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as err:
            raise DeliveryFailed(f"{type(err).__name__}: {_one_line(str(err), 200)}") from None
        return _one_line(answer, 200)
