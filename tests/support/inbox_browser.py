"""The inbox in a real browser, for the tests that drive it: Playwright and the
system's Debian ``chromium`` (browser downloads are not reachable here). The
``browser`` and ``pages`` fixtures (tests/api/conftest.py) are built from these."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.browser_origin import chromium_path

#: Where expect() waits for a DOM condition at most (a worker and an exporter on a
#: shared machine stand between a click and what it shows).
EXPECT_MS = 30_000


class Pages:
    """A browser context's open pages: their pictures for the docs, and all of them
    saved on a failure (to a temporary directory named in the failure)."""

    def __init__(self, context) -> None:
        self.context = context
        self.open: dict[str, object] = {}
        keep = os.environ.get("HITLFLOW_SCREENSHOTS")
        self.keep = Path(keep) if keep else None

    async def new(self, name: str):
        page = self.open[name] = await self.context.new_page()
        return page

    async def picture(self, page, name: str) -> None:
        if self.keep is not None:
            self.keep.mkdir(parents=True, exist_ok=True)
            height = await page.evaluate("document.body.scrollHeight + 16")
            size = page.viewport_size
            await page.screenshot(path=self.keep / f"{name}.png", clip={
                "x": 0, "y": 0, "width": size["width"], "height": min(height, size["height"])})

    @contextlib.asynccontextmanager
    async def kept_on_failure(self) -> AsyncIterator[None]:
        try:
            yield
        except BaseException as err:
            where = tempfile.mkdtemp(prefix="hitlflow-inbox-")
            for name, page in self.open.items():
                try:
                    await page.screenshot(path=Path(where) / f"{name}.png", full_page=True)
                except Exception as shot:  # a page that died still leaves the others
                    (Path(where) / f"{name}.txt").write_text(repr(shot))
            print(f"inbox screenshots: {where}")
            err.add_note(f"screenshots of every open page: {where}")
            raise


@contextlib.asynccontextmanager
async def launched_chromium() -> AsyncIterator[object]:
    """The system's chromium under Playwright, with expect() waiting ``EXPECT_MS``."""
    chromium = chromium_path()
    try:
        from playwright.async_api import async_playwright, expect
    except ImportError as err:  # a dev extra: never a silent skip
        pytest.fail(f"playwright is not installed ({err}): pip install -e '.[dev]'")
    expect.set_options(timeout=EXPECT_MS)
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=chromium)
        try:
            yield launched
        finally:
            await launched.close()


@contextlib.asynccontextmanager
async def kept_pages(browser, height: int = 720) -> AsyncIterator[Pages]:
    """A new context's pages (960 wide), every one saved if the block fails."""
    context = await browser.new_context(viewport={"width": 960, "height": height})
    kept = Pages(context)
    try:
        async with kept.kept_on_failure():
            yield kept
    finally:
        await context.close()
