"""The session list's page token (``observation.tokens``' page-token format): what
``SqlStore.list_sessions`` gives out and takes back."""

from __future__ import annotations

import json
from datetime import datetime

from observation.tokens import (
    TokenError,
    decode_page_token,
    decode_token,
    encode_page_token,
    encode_token,
)
from workflows.config import valid_session_id


class InvalidPageToken(ValueError):
    """A list page token this store never gave out."""


#: What the session list's tokens page (``observation.tokens``' page-token format):
#: every session, whatever the filter; the position is ``[started_at, session_id]``.
SESSION_LIST = "sessions"


def session_list_token(started_at: str, session_id: str) -> str:
    return encode_page_token(SESSION_LIST, "",
                             json.dumps([started_at, session_id], separators=(",", ":")))


def _timestamp(value: str) -> bool:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def session_list_position(token: str) -> tuple[str, str]:
    """The position a token :func:`session_list_token` gave out names: exactly its
    spelling, a start time (or "", none recorded) and a valid session id. The bare
    position (the release before's token) is taken too, until the next release."""
    try:
        position, spelling = decode_page_token(token, SESSION_LIST, ""), session_list_token
    except TokenError:
        try:
            position, spelling = decode_token(token).decode(), _bare_position
        except (TokenError, UnicodeError):
            raise InvalidPageToken(token) from None
    started_at, session_id = _pair(position)
    if spelling(started_at, session_id) != token:
        raise InvalidPageToken(token)
    return started_at, session_id


def _bare_position(started_at: str, session_id: str) -> str:
    return encode_token(json.dumps([started_at, session_id], separators=(",", ":")).encode())


def _pair(position: str) -> tuple[str, str]:
    try:
        started_at, session_id = json.loads(position)
    except (ValueError, TypeError):
        raise InvalidPageToken(position) from None
    if not isinstance(started_at, str) or not isinstance(session_id, str) \
            or not (started_at == "" or _timestamp(started_at)) \
            or not valid_session_id(session_id):
        raise InvalidPageToken(position)
    return started_at, session_id
