"""The e-mail channel (``api.notify.channels.email``) against a real SMTP server the
test starts (``aiosmtpd`` on 127.0.0.1): text and HTML parts with the links, a stable
Message-ID, STARTTLS with a certificate it verifies, a login whose password is in no
log and no error, and a refused recipient that is a permanent failure."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.notify.channels import build_channel
from api.notify.channels.email import EmailSender, message_id
from api.notify.links import links_for, verify
from api.notify.model import DeliveryFailed, Links, Message, Notice
from api.notify.settings import EmailChannel, NotifyConfig, NotifyConfigError
from tests.api.notify.smtp_support import BUSY, REFUSED, parts_of, self_signed, smtp_server
from workflows.people import Principal

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
KEY = b"e" * 32
ANN = Principal(issuer="local", subject="ann", name="Ann", role="approver",
                email="ann@example.com")
PASSWORD = "s3cret-smtp-password-\u00e9"
DIGEST = "sha256:" + "cd" * 32


def notice(**changes: object) -> Notice:
    return Notice.model_validate({
        "notice_id": "s-mail:5", "kind": "opened", "session_id": "s-mail", "seq": 5,
        "at": NOW.isoformat(), "title": "Tidy notes", "request_id": "req-9",
        "request_kind": "approval", "prompt": "Approve delete_note(name='<old>')?",
        "digest": DIGEST, "asked": {"tool": "delete_note", "arguments": {"name": "<old>"}},
        **changes})


def message(to: str | None = "ann@example.com", **changes: object) -> Message:
    n = notice(**changes)
    links = links_for(n, ANN, NotifyConfig(), base_url="http://127.0.0.1:8000", secret=KEY,
                      now=NOW)
    return Message(message_id="s-mail:5:mail:ann@example.com", channel="mail", recipient=to,
                   notice=n, links=links)


def channel(port: int, **changes: object) -> EmailSender:
    config = EmailChannel.model_validate({"type": "email", "host": "127.0.0.1", "port": port,
                                          "sender": "hitlflow@example.com", "timeout_s": 10,
                                          **changes})
    sender = build_channel("mail", config)
    assert isinstance(sender, EmailSender)
    return sender


async def test_a_message_arrives_with_text_html_and_working_links(
        free_port: Callable[[], int]):
    port = free_port()
    msg = message()
    with smtp_server(port) as server:
        answer = await channel(port).send(msg)
    assert "250" in answer or "queued" in answer, answer
    [got] = server.received
    assert (got.mail_from, got.rcpt_tos) == ("hitlflow@example.com", ["ann@example.com"])
    mail = got.message
    assert mail["Subject"] == "approval req-9 in session Tidy notes waits for you"
    assert mail["Message-ID"] == message_id(msg.message_id, "hitlflow@example.com")
    assert mail["Message-ID"].endswith("@example.com>")
    assert mail["X-Hitlflow-Message-Id"] == msg.message_id
    text, page = parts_of(mail)
    assert msg.links.approve and msg.links.reject
    for link in (msg.links.page, msg.links.approve, msg.links.reject):
        assert link in text
    assert f"Approve: {msg.links.approve}" in text and f"Reject: {msg.links.reject}" in text
    assert DIGEST in text and "delete_note" in text and "Opening a link decides nothing" in text
    # The HTML escapes what it shows and links the same URLs.
    assert f'href="{msg.links.approve}"' in page and f'href="{msg.links.reject}"' in page
    assert f'href="{msg.links.page}"' in page
    assert "&lt;old&gt;" in page and "<old>" not in page
    # The approve link's token is the one the notifier signed, for Ann, approving.
    claims = verify(KEY, msg.links.approve.split("#t=", 1)[1], NOW)
    assert (claims.decision, claims.recipient.subject, claims.request_id) == (
        "approve", "ann", "req-9")


async def test_a_message_without_action_links_has_only_the_page(free_port: Callable[[], int]):
    port = free_port()
    msg = message(kind="expired")
    assert msg.links == Links(page="http://127.0.0.1:8000/#/s/s-mail")
    with smtp_server(port) as server:
        await channel(port).send(msg)
    text, page = parts_of(server.received[0].message)
    assert "expired unanswered" in text and msg.links.page in text
    assert "/act#" not in text and "/act#" not in page and "Approve:" not in text


async def test_the_same_message_sent_twice_has_the_same_message_id(
        free_port: Callable[[], int]):
    port = free_port()
    with smtp_server(port) as server:
        await channel(port).send(message())
        await channel(port).send(message())
    first, second = (r.message["Message-ID"] for r in server.received)
    assert first == second


async def test_starttls_and_a_login_whose_password_is_never_shown(
        free_port: Callable[[], int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture):
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the test's CA: verified, not skipped
    monkeypatch.setenv("TEST_SMTP_PASSWORD", PASSWORD)
    caplog.set_level(logging.DEBUG)
    port = free_port()
    secrets = (PASSWORD, base64.b64encode(PASSWORD.encode()).decode(),
               base64.b64encode(f"\0hitlflow\0{PASSWORD}".encode()).decode())
    with smtp_server(port, tls=(cert, key), login=("hitlflow", PASSWORD)) as server:
        # Without STARTTLS the server wants TLS first: a failure that may pass.
        plain = channel(port, host="localhost", username="hitlflow",
                        password_env="TEST_SMTP_PASSWORD")
        with pytest.raises(DeliveryFailed) as err:
            await plain.send(message())
        assert not err.value.permanent
        assert all(s not in str(err.value) for s in secrets)
        # A wrong password: refused, retryable, and the message does not show it.
        monkeypatch.setenv("TEST_SMTP_PASSWORD", "wrong-" + PASSWORD)
        wrong = channel(port, host="localhost", starttls=True, username="hitlflow",
                        password_env="TEST_SMTP_PASSWORD")
        with pytest.raises(DeliveryFailed) as err:
            await wrong.send(message())
        assert not err.value.permanent and "535" in str(err.value)
        assert PASSWORD not in str(err.value) and "wrong-" not in str(err.value)
        assert server.received == []
        monkeypatch.setenv("TEST_SMTP_PASSWORD", PASSWORD)
        good = channel(port, host="localhost", starttls=True, username="hitlflow",
                       password_env="TEST_SMTP_PASSWORD")
        await good.send(message())
    assert server.logins == ["hitlflow"] and len(server.received) == 1
    assert all(s not in repr(good.__dict__.get("config")) for s in secrets)
    ours = [r for r in caplog.records if not r.name.startswith("mail.log")]
    for record in ours:
        assert all(s not in record.getMessage() for s in secrets), record


async def test_starttls_refuses_a_certificate_it_does_not_trust(
        free_port: Callable[[], int], tmp_path: Path):
    cert, key = self_signed(tmp_path)  # not in the trust store
    port = free_port()
    with smtp_server(port, tls=(cert, key)) as server, pytest.raises(DeliveryFailed) as err:
        await channel(port, host="localhost", starttls=True).send(message())
    assert not err.value.permanent and server.received == []


async def test_a_refused_recipient_is_permanent_a_busy_one_is_not(
        free_port: Callable[[], int]):
    port = free_port()
    with smtp_server(port) as server:
        with pytest.raises(DeliveryFailed) as err:
            await channel(port).send(message(to=REFUSED))
        assert err.value.permanent and "550" in err.value.detail
        with pytest.raises(DeliveryFailed) as err:
            await channel(port).send(message(to=BUSY))
        assert not err.value.permanent and "450" in err.value.detail
    assert server.received == []


async def test_a_server_that_is_not_there_is_retried(free_port: Callable[[], int]):
    with pytest.raises(DeliveryFailed) as err:
        await channel(free_port(), timeout_s=5).send(message())
    assert not err.value.permanent


@pytest.mark.parametrize("to", [None, "", "not an address\r\nBcc: x@example.com"])
async def test_no_usable_address_is_permanent_and_nothing_is_sent(
        free_port: Callable[[], int], to: str | None):
    port = free_port()
    with smtp_server(port) as server, pytest.raises(DeliveryFailed) as err:
        await channel(port).send(message(to=to))
    assert err.value.permanent and server.received == []


def test_a_title_cannot_inject_headers():
    sender = channel(25)
    mail = sender.build(message(title="x\r\nBcc: eve@example.com"))
    assert mail["Bcc"] is None and "\n" not in mail["Subject"]


def test_a_password_is_not_sent_in_the_clear_nor_read_when_unset(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TEST_SMTP_PASSWORD", PASSWORD)
    with pytest.raises(NotifyConfigError, match="STARTTLS") as err:
        channel(25, host="smtp.example.com", username="u", password_env="TEST_SMTP_PASSWORD")
    assert PASSWORD not in str(err.value)
    monkeypatch.delenv("TEST_SMTP_PASSWORD")
    with pytest.raises(NotifyConfigError, match="TEST_SMTP_PASSWORD is not set"):
        channel(25, host="smtp.example.com", starttls=True, username="u",
                password_env="TEST_SMTP_PASSWORD")
