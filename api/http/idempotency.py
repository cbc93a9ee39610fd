"""Idempotency keys: resending a write is always safe.

Every write that goes to a session as an update (reply, message, end, a plan step's
action, revoking a standing decision) has an idempotency key: the client's
``Idempotency-Key`` header, or one the API makes when it sends none. The key names the
Temporal update (with the update's name and who sends it), and Temporal keeps one
outcome per update id in a run: the same request resent with the same key attaches to
the first one while it is in flight, and returns its recorded outcome once it is done;
it never has a second effect. Every answer says the key (``Idempotency-Key`` header;
on a 503 also ``error.idempotency_key``), so a client that sent none can still resend.

The key is scoped to the principal: another principal's request with the same key is
another request.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Annotated

from fastapi import Depends, Header, Response

from api.http.errors import ApiError
from workflows.people import PrincipalRef

HEADER = "Idempotency-Key"
#: What a key may be: up to 128 characters of letters, digits and ``_ . : -``.
KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def check_key(key: str) -> str:
    """``key`` if it is one, else 422 ``invalid_idempotency_key`` (nothing is sent)."""
    if not KEY_PATTERN.fullmatch(key):
        raise ApiError(422, "invalid_idempotency_key", (
            f"the {HEADER} header must be 1-128 characters of letters, digits and "
            f"'_', '.', ':', '-', starting with a letter or a digit (got {len(key)} "
            "characters that are not)"))
    return key


def new_key() -> str:
    return f"k-{uuid.uuid4().hex}"


async def idempotency_key(
    response: Response,
    key: Annotated[str | None, Header(
        alias=HEADER, min_length=1, max_length=128, pattern=KEY_PATTERN.pattern,
        description=(
            "Makes resending the request safe: the same request with the same key "
            "returns the first one's outcome, never a second effect (docs/http-api.md). "
            "Without it the API makes one and answers it in this header."))] = None,
) -> str:
    """The request's key (checked, or made here); the answer carries it. A key that
    does not fit is a 422 ``validation_error`` naming the header (nothing is sent)."""
    key = new_key() if key is None else check_key(key)
    response.headers[HEADER] = key
    return key


IdempotencyKeyDep = Annotated[str, Depends(idempotency_key)]


def update_id(name: str, principal: PrincipalRef, key: str) -> str:
    """The Temporal update id of ``name`` sent by ``principal`` with ``key``."""
    who = hashlib.sha256(f"{principal.issuer}\n{principal.subject}".encode()).hexdigest()
    return f"{name}:{who[:16]}:{key}"


def uncertain_headers(key: str | None, retry_after_s: int) -> dict[str, str]:
    """The headers of a 503 whose request may be resent: ``Retry-After`` and the key."""
    return {"Retry-After": str(retry_after_s), **({HEADER: key} if key else {})}
