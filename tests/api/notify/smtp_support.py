"""A real SMTP server for the e-mail channel's tests: ``aiosmtpd``'s Controller on
127.0.0.1 (its own thread), keeping what it receives; optionally STARTTLS with a
self-signed certificate made here (``cryptography``) and a login it checks."""

from __future__ import annotations

import contextlib
import datetime as dt
import email
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

#: Recipients the server refuses: for good (5xx) and for now (4xx).
REFUSED = "nobody@example.com"
BUSY = "busy@example.com"


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage


@dataclass
class Handler:
    received: list[Received] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address == REFUSED:
            return "550 5.1.1 no such mailbox here"
        if address == BUSY:
            return "450 4.2.1 mailbox busy, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.original_content or envelope.content,
                                           policy=default_policy)
        self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos),
                                      message))  # type: ignore[arg-type]
        self.arrived.set()
        return "250 2.0.0 queued as test-1"


def self_signed(where: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1 (and its key), valid for a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = where / "smtp-cert.pem", where / "smtp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@contextlib.contextmanager
def smtp_server(port: int, *, tls: tuple[Path, Path] | None = None,
                login: tuple[str, str] | None = None) -> Iterator[Handler]:
    """The server on 127.0.0.1:``port`` until the block ends; with ``tls`` (cert, key)
    it offers STARTTLS, with ``login`` it requires that user and password (over TLS)."""
    handler = Handler()
    kwargs: dict[str, object] = {}
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
        kwargs.update(tls_context=context, require_starttls=True)
    if login is not None:
        user, password = login

        def check(server, session, envelope, mechanism, auth_data) -> AuthResult:
            ok = isinstance(auth_data, LoginPassword) and (
                auth_data.login.decode(), auth_data.password.decode()) == (user, password)
            if ok:
                handler.logins.append(user)
            return AuthResult(success=ok, handled=False)

        kwargs.update(authenticator=check, auth_required=True,
                      auth_require_tls=tls is not None)
    controller = Controller(handler, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield handler
    finally:
        controller.stop()


def parts_of(message: EmailMessage) -> tuple[str, str]:
    """The plain-text and HTML parts of a received message."""
    text = message.get_body(("plain",))
    page = message.get_body(("html",))
    assert text is not None and page is not None, message
    return text.get_content(), page.get_content()
