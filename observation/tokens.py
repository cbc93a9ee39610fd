"""Opaque tokens on the wire (page tokens, cursors): unpadded base64url, strictly.

A token decodes only if it is exactly what encoding its bytes gives back. The
standard decoder is lenient: it skips characters outside the alphabet and takes
padding, so ``!!`` decodes to nothing (and would read as "from the start") and one
token has many spellings. Here each has one spelling, and anything else is a
:class:`TokenError`.
"""

from __future__ import annotations

import base64
import binascii
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
