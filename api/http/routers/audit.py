"""The audit trail over HTTP: a session's exported NDJSON log, and telemetry runs.

Both read what the exporter wrote under the data directory; session ids are
validated before they name a path, so nothing escapes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import FileResponse, PlainTextResponse, StreamingResponse

from api.http.authority import SeenSessionDep, forbidden, require_see
from api.http.deps import PrincipalDep, SettingsDep
from api.http.errors import ApiError
from observation.exporter.checkpoint import CHECKPOINT_NAME
from observation.exporter.keys import VERIFIER_NAME
from observation.exporter.verify import LOG_NAME
from observation.telemetry import (
    JOB_TYPES,
    STATUSES,
    STORE_NAME,
    TelemetryStore,
    TelemetryStoreError,
)
from workflows.people import Refusal

router = APIRouter(tags=["audit"])
JobType = Literal[JOB_TYPES]  # type: ignore[valid-type]
RunStatus = Literal[STATUSES]  # type: ignore[valid-type]


@router.get("/api/sessions/{session_id}/log", response_class=Response,
            responses={200: {"content": {"application/x-ndjson": {}}}})
async def session_log(session_id: SeenSessionDep, settings: SettingsDep,
                      request: Request) -> Response:
    """The session's hash-chained NDJSON log, byte for byte as exported."""
    path = settings.data_dir / "runs" / session_id / LOG_NAME
    try:
        size = path.stat().st_size
    except OSError:
        size = None
    if size is None or not path.is_file():
        raise ApiError(404, "log_not_found", f"no exported log for session {session_id} "
                       "(is the exporter running? `hitlflow log export` writes it)")
    if "range" in request.headers:  # a range is read to its end, never past it
        return FileResponse(path, media_type="application/x-ndjson")
    # The exporter appends while this is sent: send the log as it was when asked (whole
    # lines), not what it grew to, which would overrun the Content-Length.
    return StreamingResponse(_first_bytes(path, size), media_type="application/x-ndjson",
                             headers={"content-length": str(size), "accept-ranges": "bytes"})


async def _first_bytes(path: Path, size: int, chunk: int = 64 * 1024) -> AsyncIterator[bytes]:
    async with await anyio.open_file(path, "rb") as f:
        while size > 0:
            data = await f.read(min(chunk, size))
            if not data:
                return
            size -= len(data)
            yield data


def _text_file(path: Path, code: str, message: str) -> PlainTextResponse:
    try:
        data = path.read_bytes()
    except OSError:
        raise ApiError(404, code, message) from None
    return PlainTextResponse(data, media_type="text/plain; charset=utf-8")


# response_class Response: a PlainTextResponse there would document the errors as text too.
@router.get("/api/sessions/{session_id}/checkpoint", response_class=Response,
            responses={200: {"content": {"text/plain": {}}}})
async def session_checkpoint(session_id: SeenSessionDep, settings: SettingsDep
                             ) -> PlainTextResponse:
    """The signed checkpoint of the session's log (C2SP tlog-checkpoint: origin, size,
    root hash, Ed25519 signature), byte for byte as the exporter wrote it."""
    return _text_file(settings.data_dir / "runs" / session_id / CHECKPOINT_NAME,
                      "checkpoint_not_found", f"no signed checkpoint for session "
                      f"{session_id} (is the exporter running? `hitlflow log export` signs it)")


@router.get("/api/checkpoint-key", response_class=Response,
            responses={200: {"content": {"text/plain": {}}}})
async def checkpoint_key(settings: SettingsDep) -> PlainTextResponse:
    """The verifier key of the checkpoints (`NAME+KEYID+BASE64`), as the exporter
    published it. Pin it out of band: a key served next to the logs proves nothing."""
    return _text_file(settings.data_dir / VERIFIER_NAME, "checkpoint_key_not_found",
                      "no checkpoint key published yet (the exporter publishes it when it "
                      "starts)")


@router.get("/api/telemetry/runs")
async def telemetry_runs(
    settings: SettingsDep, principal: PrincipalDep, request: Request,
    session_id: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")] = None,
    job_type: JobType | None = None,
    status: RunStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> dict[str, Any]:
    """Telemetry runs (one parent per session, children per reasoning step, LLM call,
    work item and gate), filtered by session, job type and status. Without
    `session_id`, every session's: operators only (403 otherwise); with it, 403 for
    a session the principal may not see."""
    if session_id is not None:
        await require_see(request, principal, session_id)
    elif not principal.at_least("operator"):
        raise forbidden(Refusal(rule="role.operator", message=(
            f"{principal.subject} is a {principal.role}: every session's telemetry needs "
            "the operator role; name a session (session_id)")))
    path = settings.data_dir / STORE_NAME
    if not path.is_file():
        return {"runs": []}
    try:
        store = TelemetryStore.open(path, readonly=True)
    except TelemetryStoreError as err:
        raise ApiError(409, "telemetry_unavailable", str(err)) from None
    try:
        runs = store.runs(session_id=session_id, job_type=job_type, status=status,
                          limit=limit, offset=offset)
    except TelemetryStoreError as err:
        raise ApiError(409, "telemetry_unavailable", str(err)) from None
    finally:
        store.close()
    return {"runs": [r.model_dump(mode="json") for r in runs]}
