"""Opaque tokens on the wire (page tokens, cursors): unpadded base64url, strictly, and
the one page-token format of every paged read.

A token decodes only if it is exactly what encoding its bytes gives back. The
standard decoder is lenient: it skips characters outside the alphabet and takes
padding, so ``!!`` decodes to nothing (and would read as "from the start") and one
token has many spellings. Here each has one spelling, and anything else is a
:class:`TokenError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")


class TokenError(ValueError):
    """Not a token this encoding produces."""


def encode_token(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str) -> bytes:
    """The bytes of a token :func:`encode_token` gave out, or :class:`TokenError`."""
    if not _ALPHABET.fullmatch(token):
        raise TokenError("it is not unpadded base64url")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("it is not unpadded base64url") from None
    if encode_token(raw) != token:  # a length of 4n+1, or bits set past the last byte
        raise TokenError("it is not unpadded base64url")
    return raw


# -- page tokens -------------------------------------------------------------------------
#
# Every paged read of the API gives out one kind of token (the `cursor` its next page
# takes): ``<list>:<scope digest>:<position>`` as a token above. ``list`` names what it
# pages (``contracts``, ``sessions``, ...); the digest (12 hex digits of SHA-256) is of
# what it pages within (the session, for a session's lists), so a token for another
# list or session is refused; ``position`` is the list's own (an offset, a key). The
# cursors of a session's lists had this form before it was everyone's: they still page.


def _digest(scope: str) -> str:
    return hashlib.sha256(scope.encode()).hexdigest()[:12]


def encode_page_token(listing: str, scope: str, position: str) -> str:
    return encode_token(f"{listing}:{_digest(scope)}:{position}".encode())


def decode_page_token(token: str, listing: str, scope: str) -> str:
    """The position of a token :func:`encode_page_token` gave out for ``listing`` and
    ``scope``, or :class:`TokenError`."""
    try:
        text = decode_token(token).decode()
    except UnicodeError:
        raise TokenError("it does not decode") from None
    prefix = f"{listing}:{_digest(scope)}:"
    if not text.startswith(prefix):
        raise TokenError(f"it does not page this {listing}")
    return text.removeprefix(prefix)
