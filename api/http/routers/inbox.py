"""The inbox: the web page where a person sees and answers the sessions that wait
for them (``GET /``), and its static files (``/inbox/inbox.css`` and the JavaScript
modules under ``/inbox/``, ``inbox.js`` the entry that imports the others).

The page is plain HTML and JavaScript modules shipped inside the package
(``api/http/inbox/``): no build step, nothing fetched from elsewhere at run time. It only
calls the HTTP API (with the bearer token the person typed, when one is configured), so
these routes are open: the page holds no data, and every call it makes is guarded like
any other.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from api.http.errors import ApiError

router = APIRouter(tags=["inbox"], include_in_schema=False)

#: file name -> media type; nothing else is served.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "inbox.css": "text/css; charset=utf-8",
    **{f"{module}.js": "text/javascript; charset=utf-8" for module in (
        "inbox",  # the entry: routes the page to a view, asks for the token
        "api", "dom", "stream", "list", "session", "forms", "decide", "conversation",
        "contracts", "oidc", "notifications")},
}
#: The paths the bearer token does not guard (api.http.doors.OPEN_PATHS).
PATHS = frozenset({"/", *(f"/inbox/{name}" for name in FILES if name != "index.html")})
HEADERS = {
    # Revalidate every time: a new version of the package shows at the next reload.
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    # Only this origin's own scripts, styles and API; no inline script, no framing.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
}


def _file(name: str) -> Response:
    body = resources.files("api.http.inbox").joinpath(name).read_bytes()
    return Response(body, media_type=FILES[name], headers=HEADERS)


@router.get("/")
async def inbox_page() -> Response:
    """The inbox page (a single page: the list at ``/``, a session at ``/#/s/<id>``)."""
    return _file("index.html")


@router.get("/inbox/{name}")
async def inbox_file(name: str) -> Response:
    if name not in FILES or name == "index.html":
        raise ApiError(404, "not_found", f"no inbox file {name!r}")
    return _file(name)
