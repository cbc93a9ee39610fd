"""The inbox's message box while the agent works (issue 27): the person picks what the
message does (``if_busy``), a refusal shows in place, an interrupt shows in the
conversation with the cut text marked. A real browser (see test_http_inbox.py) on the
real stack, and a real OpenAI-compatible server that holds its answer."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.api.http_support import HttpStack
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.inbox_browser import Pages

KEY_ENV = "TEST_INBOX_STEER_KEY"


async def until_requests(server: FakeOpenAIServer, n: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while len(server.requests) < n:
        assert loop.time() < deadline, f"{len(server.requests)} requests, not {n}"
        await asyncio.sleep(0.02)


async def test_the_person_interrupts_the_agent_from_the_inbox(
        http_stack: HttpStack, pages: Pages, fake_openai: FakeOpenAIServer,
        monkeypatch: pytest.MonkeyPatch):
    from playwright.async_api import expect

    monkeypatch.setenv(KEY_ENV, "sk-inbox-steer")
    fake_openai.expected_key = "sk-inbox-steer"
    held = threading.Event()
    fake_openai.reply_text("Once upon a time", pieces=["Once upon", " a time"], hold=held,
                           hold_after=1)
    fake_openai.reply_text("A haiku, then.")
    body = {"mode": "interactive", "initial_message": "write an essay", "agent": {"llm": {
        "provider": "openai", "base_url": fake_openai.base_url, "model": "fake-model",
        "api_key_env": KEY_ENV}}}
    try:
        r = await http_stack.http.post("/api/sessions", json=body)
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        await until_requests(fake_openai, 1)  # the agent works: its LLM call is held
        page = await pages.new("steer")
        await page.goto(f"{http_stack.url}/#/s/{sid}")
        token = page.get_by_label("API token")
        await token.fill(http_stack.http.headers["authorization"].removeprefix("Bearer "))
        await token.press("Enter")
        message, choice = page.get_by_label("Message to the agent"), \
            page.get_by_label("While the agent works")
        await expect(message).to_be_visible()
        # reject while it works: the API's 409 in place, nothing sent
        await message.fill("wait for me")
        await choice.select_option("reject")
        await page.get_by_role("button", name="Send").click()
        await expect(page.get_by_role("alert")).to_contain_text(
            "Not sent: the agent is working (if_busy: reject)")
        await choice.select_option("interrupt")
        await message.fill("a haiku instead")
        await page.get_by_role("button", name="Send").click()
        conversation = page.locator("#conversation")
        cut = conversation.locator("li", has_text="Interrupted by")
        await expect(cut).to_contain_text("cut the model's answer")
        await expect(cut.locator(".cut")).to_have_text("Once upon [cut]")
        await expect(conversation).to_contain_text("a haiku instead")
        await expect(conversation).to_contain_text("A haiku, then.")
        await expect(page.get_by_label("Your message")).to_be_visible()  # its next turn ended
        assert "wait for me" not in await conversation.inner_text()
        # the read model counts the turns as the workflow does: the cut one, the new one
        live = await http_stack.client.get_workflow_handle(sid).query("snapshot")
        read = (await http_stack.http.get(f"/api/sessions/{sid}")).json()
        assert live["turns"] == read["turns"] == 2
    finally:
        held.set()
