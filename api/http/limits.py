"""The raw-body guard: a request's JSON is held to the limits of ``workflows.limits``
before anything parses it (docs/security.md, "Limits").

Python's ``json`` recurses, so a body nested thousands of levels deep is a
``RecursionError`` in the parser, and one a few hundred deep passes the parser but
not the worker that must decode the session's history later. ``JsonLimits`` sees the
body as the route reads it, scans it without recursing, and answers 422 before
FastAPI's parser, pydantic or Temporal see it: ``too_deep`` (more levels of arrays
and objects than ``HITLFLOW_MAX_JSON_DEPTH``) or ``invalid_number`` (``1e400``,
``NaN``, ``Infinity``: numbers JSON cannot carry, which would otherwise be changed
into ``null`` or ``0`` on the way). A route that takes no body never reads it, so
nothing is scanned for it and nothing of it is used.
"""

from __future__ import annotations

import asyncio
import email.message
import functools
import json

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import Client

from api.http.errors import ApiError
from workflows.limits import JsonProblem, scan_json_text

#: The setting that sets the depth (``HitlflowSettings.max_json_depth``).
DEPTH_SETTING = "HITLFLOW_MAX_JSON_DEPTH"
#: The setting that sets the size (``HitlflowSettings.max_input_bytes``).
SIZE_SETTING = "HITLFLOW_MAX_INPUT_BYTES"
#: Bodies larger than this are scanned in a worker thread (the event loop serves on).
_THREAD_BYTES = 64 * 1024


class JsonLimitExceeded(ApiError, StarletteHTTPException):
    """A 422 raised while the route reads its body: FastAPI lets an HTTP exception
    through as it is, and the API's handler of ``ApiError`` answers it."""

    def __init__(self, problem: JsonProblem) -> None:
        if problem.kind == "depth":
            code, message = "too_deep", f"{problem.message} (the limit: {DEPTH_SETTING})"
        else:
            code, message = "invalid_number", problem.message
        ApiError.__init__(self, 422, code, message)
        self.status_code, self.detail = 422, message


def parsed_as_json(headers: Headers) -> bool:
    """Whether FastAPI parses a body with these headers as JSON (no content type, or
    ``application/json`` / ``application/*+json``), as it decides it."""
    value = headers.get("content-type")
    if not value:
        return True
    return _json_content_type(value)


@functools.lru_cache(maxsize=256)
def _json_content_type(value: str) -> bool:
    """``parsed_as_json`` of one ``Content-Type`` (the email parser is slow, and
    clients send the same few values; the cache holds the last 256)."""
    message = email.message.Message()
    message["content-type"] = value
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


def body_problem(body: bytes, max_depth: int) -> JsonProblem | None:
    """The first limit a JSON body exceeds, or None (also for bytes that are not JSON
    text: the parser refuses those itself)."""
    try:  # the bytes as `json.loads` reads them (UTF-8, -16 or -32)
        text = body.decode(json.detect_encoding(body), "surrogatepass")
    except (UnicodeDecodeError, LookupError):
        return None
    return scan_json_text(text, max_depth)


class JsonLimits:
    """ASGI middleware: the JSON body of every request, scanned when it is read."""

    def __init__(self, app: ASGIApp, max_depth: int) -> None:
        self.app, self.max_depth = app, max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not parsed_as_json(Headers(scope=scope)):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def scanned() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    body = b"".join(chunks)
                    chunks.clear()
                    problem = body_problem(body, self.max_depth) if len(body) <= _THREAD_BYTES \
                        else await asyncio.to_thread(body_problem, body, self.max_depth)
                    if problem is not None:
                        raise JsonLimitExceeded(problem)
            return message

        await self.app(scope, scanned, send)


def check_input_size(client: Client, value: object, limit: int, what: str) -> None:
    """422 ``too_large`` when ``value``, encoded as the session's history will hold it
    (the client's own data converter: defaults filled in, numbers as pydantic writes
    them), is over ``limit`` bytes. A body within the 1 MiB the API reads can grow past
    what Temporal takes in one payload (2 MB), and an update that does is accepted by
    the server but not by the worker's answer: the session sticks."""
    (payload,) = client.data_converter.payload_converter.to_payloads([value])
    size = payload.ByteSize()
    if size > limit:
        raise ApiError(422, "too_large", f"{what} is {size} bytes as the session's history "
                       f"holds it, over the limit of {limit} bytes (the limit: {SIZE_SETTING})")
