"""Paged reads: the `limit` and `cursor` query parameters and their opaque tokens.

Every paged endpoint takes `cursor` and answers `next_cursor` (null on the last page);
the token is ``observation.tokens``' one page-token format, in one spelling each. A
session's lists page by offset into an append-only list (see ``observation.log_pages``),
scoped to the session. A token for another list or session, past the end, or one that
does not decode is a 400; an empty one is none.

`GET /api/sessions` answered `next_page_token` and took `page_token` before: both still
work until the next release (deprecated in the OpenAPI schema; a bad `page_token` is an
`invalid_page_token` as it was).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query

from api.http.errors import ApiError
from observation.tokens import TokenError, decode_page_token, encode_page_token

DEFAULT_LIMIT, MAX_LIMIT = 50, 500
Listing = Literal["contracts", "memory", "history", "timeline"]

LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=(
    f"Page size, 1 to {MAX_LIMIT}."))]
CURSOR_DOC = "Where the page starts: the `next_cursor` of the previous page (opaque)."
CursorQuery = Annotated[str | None, Query(max_length=200, description=CURSOR_DOC)]
#: The session list's cursors carry Temporal's own token with `stuck`: longer.
ListCursorQuery = Annotated[str | None, Query(max_length=4096, description=CURSOR_DOC)]
PageTokenQuery = Annotated[str | None, Query(
    max_length=4096, deprecated=True,
    description="Deprecated (until the next release): `cursor` under its old name.")]


def encode_cursor(listing: Listing, session_id: str, offset: int | None) -> str | None:
    if offset is None:
        return None
    return encode_page_token(listing, session_id, str(offset))


def invalid_cursor(why: str, param: str = "cursor") -> ApiError:
    """400 ``invalid_cursor`` (``invalid_page_token`` for the old parameter's name)."""
    return ApiError(400, f"invalid_{param}", f"{param} is not one this API gave out: {why}")


def decode_cursor(cursor: str | None, listing: Listing, session_id: str) -> int:
    """The offset a cursor names (0 without one, or an empty one). A cursor decodes
    only in the one spelling :func:`encode_cursor` gives it."""
    if not cursor:
        return 0
    try:
        offset = decode_page_token(cursor, listing, session_id)
    except TokenError:
        raise invalid_cursor(f"it does not page this session's {listing}") from None
    if not (offset.isascii() and offset.isdigit() and str(int(offset)) == offset):
        raise invalid_cursor(f"it does not page this session's {listing}")
    return int(offset)


def check_offset(offset: int, total: int) -> None:
    """A cursor past the end was never given out (lists only grow)."""
    if offset > total:
        raise invalid_cursor(f"it points past the end ({total} entries)")
