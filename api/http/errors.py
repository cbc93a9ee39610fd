"""One error shape for every response: ``{"error": {"code", "message"}}``.

Bad input is always a 4xx. The 503s are not caused by input and mean "not known
yet": Temporal is unreachable (``temporal_unavailable``), no worker answered a query
or an update in time (``worker_unavailable``; the update may still be applied), or
the session's workflow task is being retried after a lost worker
(``session_recovering``; not taken). A write's 503 carries ``Retry-After`` and its
idempotency key (``api.http.idempotency``): resent with it, it is safe. A session
whose workflow task keeps failing for a cause of its own refuses every request
with 409 ``session_stuck`` (``api.http.stuck`` adds why). A 409 means nothing was
recorded and nothing will be. A 500 (``internal_error``) is a bug.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from temporalio.client import (
    RPCTimeoutOrCancelledError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import TemporalError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from api.http.models import ErrorBody
from workflows import people

log = logging.getLogger("hitlflow.api")

#: Error responses documented on every route (OpenAPI, schemathesis).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": what}
    for code, what in {
        400: "Malformed request (e.g. invalid JSON), or a Host header the API does not "
             "answer to (`host_not_allowed`, HITLFLOW_API_ALLOWED_HOSTS)",
        401: "Missing or wrong bearer token (unless HITLFLOW_API_AUTH=off)",
        403: "The principal may not do this to this session (`forbidden`, `rule` names "
             "the rule that refuses it); nothing changed",
        404: "Unknown session, contract or route",
        409: "The session is not in a state that takes this request (or it is stuck: "
             "`session_stuck`, its workflow task keeps failing); nothing was recorded "
             "and nothing will be",
        413: "Request body too large",
        422: "The request does not validate",
        503: "Temporal unreachable, or no worker answered in time, or the session's "
             "workflow task is being retried after a lost worker (`session_recovering`): "
             "the outcome is not known yet; a write says `Retry-After` and its "
             "`Idempotency-Key`, and resending it with that key is safe",
    }.items()
}

_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 406: "not_acceptable", 409: "conflict",
                 413: "body_too_large", 415: "unsupported_media_type", 422: "validation_error",
                 429: "too_many_requests", 503: "unavailable"}


class ApiError(Exception):
    """``extra``: more of the error's body (``rule`` of a 403, ``errors`` of a 422)."""

    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers
        self.extra = extra or {}


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None,
                   extra: dict[str, Any] | None = None) -> JSONResponse:
    body = ErrorBody.model_validate({"error": {"code": code, "message": message,
                                               **(extra or {})}})
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status,
                        headers=headers)


#: The ``type`` of the ApplicationError a reply's validator refuses with, and the API's
#: answer (workflows.people): 403 naming the rule, 409 with the conflict's code, 422
#: with the schema's errors.
_ANSWER_INVALID = getattr(people, "ANSWER_INVALID", "AnswerInvalid")


def _detail(cause: object) -> dict[str, Any]:
    details = getattr(cause, "details", None) or ()
    first = details[0] if len(details) else None
    return first if isinstance(first, dict) else {}


def _answer_refusal(cause: object, message: str) -> ApiError | None:
    """The API error for a reply the workflow's validator refused as not this
    principal's (403), conflicting (409) or invalid (422); None for any other."""
    kind = getattr(cause, "type", None)
    detail = _detail(cause)
    if kind == people.ANSWER_FORBIDDEN:
        return ApiError(403, "forbidden", message,
                        extra={"rule": str(detail.get("rule") or "forbidden")})
    if kind == people.ANSWER_CONFLICT:
        return ApiError(409, str(detail.get("code") or "conflict"), message)
    if kind == _ANSWER_INVALID:
        errors = detail.get("errors")
        return ApiError(422, str(detail.get("code") or "invalid_arguments"), message,
                        extra={"errors": errors if isinstance(errors, list) else []})
    return None


#: The error code of a request to a session whose workflow task keeps failing.
SESSION_STUCK = "session_stuck"


def is_task_failing(err: BaseException) -> bool:
    """The server refused a query or an update because the workflow task keeps failing
    (its only sign is the message: "... due to Workflow Task in failed state.")."""
    return isinstance(err, RPCError) and err.status == RPCStatusCode.FAILED_PRECONDITION \
        and "workflow task in failed state" in err.message.lower()


#: The google.rpc detail of an update the server aborted before the workflow took it.
_NOT_READY = "temporal.api.errordetails.v1.WorkflowNotReadyFailure"
#: The waits before sending such an update again (then its error is the answer).
NOT_READY_RETRY_S = (0.05, 0.2, 0.5)
T = TypeVar("T")


def is_update_not_ready(err: BaseException | None) -> bool:
    """The server aborted an update before the workflow took it (``WorkflowNotReady``,
    "... due to unexpected workflow task failure": e.g. it came while the workflow
    task that continues the session as new at a wait was completing, which the server
    refuses while an update is pending). Nothing was applied: sending it again is safe."""
    if not isinstance(err, RPCError) or err.status != RPCStatusCode.FAILED_PRECONDITION:
        return False
    try:
        details = err.grpc_status.details
    except Exception:  # details that do not parse: not this case
        return False
    return any(d.type_url.rsplit("/", 1)[-1] == _NOT_READY for d in details)


async def retry_not_ready(send: Callable[[], Awaitable[T]]) -> T:
    """``send()`` (an update), sent again after :data:`NOT_READY_RETRY_S` while the
    server aborts it as not ready (:func:`is_update_not_ready`); any other outcome, or
    the last one, is the answer."""
    for wait in NOT_READY_RETRY_S:
        try:
            return await send()
        except RPCError as err:
            if not is_update_not_ready(err):
                raise
        await asyncio.sleep(wait)
    return await send()


def session_not_found(session_id: str) -> ApiError:
    return ApiError(404, "session_not_found", f"no session {session_id!r}")


def temporal_unavailable(err: BaseException) -> ApiError:
    return ApiError(503, "temporal_unavailable", f"Temporal is not reachable: {err}")


def is_connect_failure(err: BaseException) -> bool:
    """A lazy client that cannot connect raises a plain RuntimeError."""
    return isinstance(err, RuntimeError) and str(err).startswith("Failed client connect")


def from_temporal(err: BaseException, session_id: str | None = None) -> ApiError | None:
    """The API error for a Temporal client error, or None if it is not one."""
    if isinstance(err, WorkflowUpdateFailedError):
        cause = err.cause
        message = getattr(cause, "message", None) or str(cause or err)
        return _answer_refusal(cause, message) or ApiError(409, "refused", message)
    if isinstance(err, WorkflowAlreadyStartedError):
        return ApiError(409, "session_exists",
                        f"a session {session_id or err.workflow_id!r} already exists "
                        "(session ids are never reused)")
    if isinstance(err, WorkflowQueryFailedError):
        return ApiError(409, "query_failed", str(err))
    if isinstance(err, RPCTimeoutOrCancelledError):
        return ApiError(503, "worker_unavailable", "no worker answered in time; is a "
                        "hitlflow worker running for this task queue?")
    if isinstance(err, RPCError):
        if err.status == RPCStatusCode.NOT_FOUND:
            return session_not_found(session_id) if session_id else ApiError(
                404, "not_found", err.message)
        if err.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
            return ApiError(503, "worker_unavailable", "no worker answered in time; is a "
                            "hitlflow worker running for this task queue?")
        if is_task_failing(err):
            who = f"session {session_id}" if session_id else "the session"
            return ApiError(409, SESSION_STUCK, f"{who} is stuck: its workflow task keeps "
                            "failing; it takes no requests until the cause is fixed")
        if err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
            return ApiError(429, "too_many_requests", err.message)
        if err.status == RPCStatusCode.UNAVAILABLE:
            return temporal_unavailable(err)
        return ApiError(503, "temporal_error", f"Temporal refused the call: {err.message}")
    if is_connect_failure(err):
        return temporal_unavailable(err)
    return None


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(p) for p in loc) or "request"


def validation_message(errors: list[dict[str, Any]], limit: int = 10) -> str:
    parts = [f"{_location(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:limit]]
    more = len(errors) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers, exc.extra)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        ctx = next(e.get("ctx") or {} for e in errors if e.get("type") == "json_invalid")
        return error_response(400, "invalid_json",
                              f"the body is not valid JSON: {ctx.get('error', 'decode error')}")
    return error_response(422, "validation_error", validation_message(errors))


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path, and OPTIONS, sorted. (Starlette's
    405 names only the first route whose path matched; each method is asked of the
    router as a request with it would be, so included routers count too.)"""
    routes = request.app.router.routes
    allowed = {"OPTIONS"}
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in routes):
            allowed.add(method)
    return sorted(allowed)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 405:
        allow = allowed_methods(request)
        headers = {"Allow": ", ".join(allow)}
        if request.method == "OPTIONS":  # what the path takes (RFC 9110, 9.3.7)
            return Response(status_code=204, headers=headers)
        return error_response(405, "method_not_allowed", f"{request.method} is not allowed "
                              f"on {request.url.path}; it takes {', '.join(allow)}", headers)
    code = _STATUS_CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    status = exc.status_code if 400 <= exc.status_code < 500 else 503
    return error_response(status, code, message, getattr(exc, "headers", None))


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    mapped = from_temporal(exc)
    if mapped is not None:
        return error_response(mapped.status, mapped.code, mapped.message,
                              extra=mapped.extra)
    log.exception("unexpected error", exc_info=exc)
    return error_response(500, "internal_error", f"unexpected {type(exc).__name__}")


@contextmanager
def temporal_errors(session_id: str | None = None) -> Iterator[None]:
    """Turn Temporal client errors raised inside the block into API errors."""
    try:
        yield
    except ApiError:
        raise
    except Exception as err:
        mapped = from_temporal(err, session_id)
        if mapped is None:
            raise
        raise mapped from err


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(TemporalError, _unexpected)
    app.add_exception_handler(RuntimeError, _unexpected)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
