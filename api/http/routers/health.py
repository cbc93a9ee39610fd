"""``GET /healthz``: liveness (always 200 while the process serves), and whether
Temporal is reachable. Never behind the bearer token."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request

from api.http.deps import SettingsDep
from api.http.models import Health, TemporalHealth

router = APIRouter(tags=["health"])
CHECK_TIMEOUT = timedelta(seconds=2)


@router.get("/healthz", response_model=Health)
async def healthz(request: Request, settings: SettingsDep) -> Health:
    client = getattr(request.app.state, "client", None)
    reachable, error = False, None
    if client is None:
        error = "no Temporal client yet"
    else:
        try:
            reachable = await client.service_client.check_health(timeout=CHECK_TIMEOUT)
        except Exception as err:  # any failure means: not reachable right now
            error = f"{type(err).__name__}: {err}"
    return Health(temporal=TemporalHealth(
        reachable=bool(reachable),
        target=client.service_client.config.target_host if client else settings.target,
        namespace=client.namespace if client else settings.namespace,
        error=error))
