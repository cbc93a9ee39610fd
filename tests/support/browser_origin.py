"""A web page of another origin that tries requests against a server, in a real browser.

A page the operator opens in their browser can send requests to any address the
browser reaches, 127.0.0.1 included: the browser sends "simple" ones (GET, or a POST
of a form, ``text/plain`` or nothing) without asking the server first, and only keeps
the answer from the page; anything else (a JSON body, an ``Authorization`` header) it
first asks the server about (a CORS preflight). ``foreign_page()`` plays that page:
it serves a tiny HTML page on a 127.0.0.1 port of its own (so another origin than any
server under test), opens it in Chromium (Playwright, driving the system's chromium as
the inbox's browser test does), and runs the given ``fetch()``es from it, returning
what the page could see of each. It knows nothing of hitlflow: point it at any HTTP
API (hitlflow's, Temporal's).

    async with foreign_page(port) as page:
        [outcome] = await page.attempt(Attempt("a form POST to cancel", url, body="a=1",
                                               content_type=FORM))
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from api.http.app import ApiServer

FORM = "application/x-www-form-urlencoded"
TEXT = "text/plain"
#: The page: it holds nothing; the requests are run in it by ``ForeignPage.attempt``.
PAGE = "<!doctype html><title>another site</title><p>another site</p>"

_RUN = """async (attempts) => {
  const out = [];
  for (const a of attempts) {
    const headers = { ...a.headers };
    if (a.content_type !== null) headers["Content-Type"] = a.content_type;
    const init = { method: a.method, mode: a.mode, headers, cache: "no-store",
                   credentials: "include" };
    if (a.body !== null) init.body = a.body;
    try {
      const r = await fetch(a.url, init);
      const opaque = r.type === "opaque";
      out.push({ sent: true, status: opaque ? null : r.status,
                 body: opaque ? null : await r.text(), error: null });
    } catch (e) {
      out.push({ sent: false, status: null, body: null, error: String(e) });
    }
  }
  return out;
}"""


def chromium_path() -> str:
    """The system's chromium; missing, the test fails in CI (``CI`` set) and is
    skipped elsewhere, saying how to get it."""
    found = os.environ.get("HITLFLOW_CHROMIUM") or shutil.which("chromium") \
        or shutil.which("chromium-browser")
    why = ("the browser tests need Debian's chromium (apt-get install chromium; "
           ".ci/run installs it) or HITLFLOW_CHROMIUM=<path>")
    if not found:
        if os.environ.get("CI"):
            pytest.fail(f"no chromium found: {why}")
        pytest.skip(f"no chromium found: {why}")
    return found


@dataclass(frozen=True)
class Attempt:
    """One request the page tries. ``what`` says what it tried (failure messages).

    ``mode="no-cors"`` sends a simple request as a form or a script tag would: the
    browser lets it out and hides the answer (``Outcome.status`` is None). ``"cors"``
    is what a page does to read the answer, or to send a JSON body or an
    ``Authorization`` header: the browser asks first (a preflight) unless it is simple.
    ``content_type=None`` sends no Content-Type (with ``body=None``: an empty POST)."""

    what: str
    url: str
    method: str = "POST"
    content_type: str | None = None
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    mode: Literal["cors", "no-cors"] = "no-cors"


@dataclass(frozen=True)
class Outcome:
    """What the page saw: ``sent`` (the browser let the request out and it was
    answered, though perhaps unreadably), the status and body when the page may read
    them (never across origins without CORS), or the browser's ``error``."""

    attempt: Attempt
    sent: bool
    status: int | None
    body: str | None
    error: str | None

    @property
    def readable(self) -> bool:
        return self.status is not None


class ForeignPage:
    def __init__(self, page: Any, origin: str) -> None:
        self.page, self.origin = page, origin

    async def attempt(self, *attempts: Attempt) -> list[Outcome]:
        """Run ``attempts`` from the page, one after the other."""
        raw = await self.page.evaluate(_RUN, [asdict(a) for a in attempts])
        return [Outcome(a, **r) for a, r in zip(attempts, raw, strict=True)]


@asynccontextmanager
async def foreign_page(port: int) -> AsyncIterator[ForeignPage]:
    """The page served on http://127.0.0.1:``port``/ and open in Chromium, for the block;
    the server and the browser are stopped afterwards."""
    chromium = chromium_path()
    try:
        from playwright.async_api import async_playwright
    except ImportError as err:  # a dev extra: never a silent skip
        pytest.fail(f"playwright is not installed ({err}): pip install -e '.[dev]'")
    site = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    site.get("/")(lambda: HTMLResponse(PAGE))
    server = ApiServer(site, "127.0.0.1", port)
    await server.start()
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium)
            try:
                page = await (await browser.new_context()).new_page()
                await page.goto(f"{server.url}/")
                yield ForeignPage(page, server.url)
            finally:
                await browser.close()
    finally:
        await server.stop()


def described(outcomes: list[Outcome]) -> str:
    """The outcomes, one a line, for a failure message."""
    return "\n".join(json.dumps({"tried": o.attempt.what, "sent": o.sent, "status": o.status,
                                 "error": o.error}) for o in outcomes)
