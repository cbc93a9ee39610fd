"""A session page opened before the exporter reached its session: the head is
Temporal's record (no read-model row, not stale: nothing was asked of it), the log
read right after it has the session's lines, and the stream then has nothing new to
say (the session waits for its person). The page must read the head again once it
holds log lines the head does not reflect, or it shows the record for good (seen as
the fork test's head without "forked from": the exporter wrote the fork's log between
the page's two reads). A real browser (see test_http_inbox.py) on a stack whose
exporter starts only when the page first asks for the log."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from api.http.app import create_app
from observation.exporter.keys import load_or_create_signer
from tests.api.http_support import (
    AUTH,
    chat_body,
    eventually,
    serve,
    session_until,
    stack_settings,
)
from tests.support.inbox_browser import Pages
from tests.support.sessions import running_exporter, running_worker


async def test_a_head_read_before_the_exporter_is_read_again(
        dev_env: WorkflowEnvironment, free_port: Callable[[], int], tmp_path: Path,
        pages: Pages):
    from playwright.async_api import expect

    client = dev_env.client
    settings = stack_settings(client, tmp_path / "data", "late")
    settings.data_dir.mkdir()
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running_worker(client, settings.task_queue))
        server = await stack.enter_async_context(serve(create_app(settings), free_port()))
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH))
        r = await http.post("/api/sessions", json=chat_body())
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        # No exporter yet: the API answers with Temporal's record (seq 0), which says
        # the session waits for its person's next message.
        await session_until(http, sid, lambda s: s["status"] == "waiting_user"
                            and s["seq"] == 0 and not s["stale"])

        async def logged() -> str:
            got = await http.get(f"/api/sessions/{sid}/log")
            return got.text if got.status_code == 200 else ""

        exporting: list[bool] = []

        async def export_first(route) -> None:
            # the page's first log read, after its head: the exporter writes the log now
            if not exporting:
                exporting.append(True)
                await stack.enter_async_context(running_exporter(
                    client, settings.data_dir, settings.task_queue,
                    signer=load_or_create_signer(settings.data_dir)))
                await eventually(logged, lambda text: "hello, what next?" in text,
                                 what="the session's log")
            await route.continue_()

        heads: list[str | None] = []
        page = await pages.new("late")
        page.on("response", lambda resp: heads.append(resp.headers.get("x-hitlflow-seq"))
                if f"/api/sessions/{sid}?" in resp.url and resp.ok else None)
        await page.route(f"**/api/sessions/{sid}/log", export_first)
        await page.goto(f"{server.url}/#/s/{sid}")
        token = page.get_by_label("API token")
        await token.fill(AUTH["authorization"].removeprefix("Bearer "))
        await token.press("Enter")
        await expect(page.locator("#conversation")).to_contain_text("hello, what next?")
        assert exporting and heads[0] == "0", heads  # the first head: Temporal's record
        # ... read again once the read model has the lines the page shows
        view = await session_until(http, sid, lambda s: s["seq"] > 0 and s["turns"] > 0)
        head = page.locator("#head")
        await expect(head).to_contain_text(f"{view['turns']} turn")
        await expect(head).to_contain_text("waiting since")
        await expect(head).not_to_contain_text("has not caught up")
        await page.close()
