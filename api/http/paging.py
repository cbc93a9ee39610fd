"""Paged reads: the `limit` and `cursor` query parameters and opaque cursors.

A cursor is an offset into an append-only list (see ``observation.log_pages``),
tagged with what it pages and a digest of the session id, unpadded base64url
(``observation.tokens``: one spelling per cursor). A cursor for another list or
session, past the end, or one that does not decode is a 400; an empty one is none.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from fastapi import Query

from api.http.errors import ApiError
from observation.tokens import decode_token, encode_token

DEFAULT_LIMIT, MAX_LIMIT = 50, 500
Listing = Literal["contracts", "memory", "history", "timeline"]

LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=(
    f"Page size, 1 to {MAX_LIMIT}."))]
CursorQuery = Annotated[str | None, Query(max_length=200, description=(
    "Where the page starts: the `next_cursor` of the previous page (opaque)."))]


def _tag(listing: Listing, session_id: str) -> str:
    return f"{listing}:{hashlib.sha256(session_id.encode()).hexdigest()[:12]}"


def encode_cursor(listing: Listing, session_id: str, offset: int | None) -> str | None:
    if offset is None:
        return None
    return encode_token(f"{_tag(listing, session_id)}:{offset}".encode())


def invalid_cursor(why: str) -> ApiError:
    return ApiError(400, "invalid_cursor", f"cursor is not one this API gave out: {why}")


def decode_cursor(cursor: str | None, listing: Listing, session_id: str) -> int:
    """The offset a cursor names (0 without one, or an empty one). A cursor decodes
    only in the one spelling :func:`encode_cursor` gives it."""
    if not cursor:
        return 0
    try:
        tag, _, offset = decode_token(cursor).decode().rpartition(":")
        value = int(offset) if offset.isascii() and offset.isdigit() else -1
    except (ValueError, UnicodeError):
        raise invalid_cursor("it does not decode") from None
    if tag != _tag(listing, session_id) or value < 0 \
            or encode_cursor(listing, session_id, value) != cursor:
        raise invalid_cursor(f"it does not page this session's {listing}")
    return value


def check_offset(offset: int, total: int) -> None:
    """A cursor past the end was never given out (lists only grow)."""
    if offset > total:
        raise invalid_cursor(f"it points past the end ({total} entries)")
