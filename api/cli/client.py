"""A small synchronous client of the HTTP API, for the command line.

Every failure becomes an :class:`ApiClientError` with the API's own error code and
message (or ``unreachable`` when there is no API at the address).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from api.cli.sse_client import SseMessage, SseParser, parse_lines
from api.settings import HitlflowSettings

#: The API sends a keep-alive comment every 15 s; silence this long means a dead link.
READ_TIMEOUT_S = 60.0


class ApiClientError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


def default_api_url(settings: HitlflowSettings | None = None) -> str:
    """The address ``hitlflow up`` serves on (``HITLFLOW_API_HOST``/``_PORT``)."""
    s = settings or HitlflowSettings()
    host = "127.0.0.1" if s.api_host in ("0.0.0.0", "::", "") else s.api_host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{s.api_port}"


def _error_of(r: httpx.Response) -> ApiClientError:
    try:
        err = r.json()["error"]
        return ApiClientError(r.status_code, str(err["code"]), str(err["message"]))
    except (ValueError, KeyError, TypeError):
        return ApiClientError(r.status_code, f"http_{r.status_code}", r.text[:500] or
                              r.reason_phrase)


class ApiClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreachable(self, err: Exception) -> ApiClientError:
        return ApiClientError(0, "unreachable", f"cannot reach the API at {self.base_url} "
                              f"({type(err).__name__}: {err}); is `hitlflow up` running?")

    def request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.TransportError as err:
            raise self._unreachable(err) from None
        if r.status_code >= 400:
            raise _error_of(r)
        return r.json() if r.content else None

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        """POST ``body`` as JSON (``{}`` when None: the API takes only JSON to change things)."""
        return self.request("POST", path, json={} if body is None else body, **kw)

    def events(self, session_id: str, last_event_id: str | None = None
               ) -> Iterator[SseMessage]:
        """The session's SSE stream from after ``last_event_id``, until it ends."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        try:
            timeout = httpx.Timeout(30, read=READ_TIMEOUT_S)
            with self._http.stream("GET", f"/api/sessions/{session_id}/events",
                                   headers=headers, timeout=timeout) as r:
                if r.status_code >= 400:
                    r.read()
                    raise _error_of(r)
                yield from parse_lines(r.iter_lines(), SseParser())
        except httpx.TransportError as err:
            raise self._unreachable(err) from None
