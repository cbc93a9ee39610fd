"""The inbox's "Fork from here" (issue 27): on a person's message, the person gives the
message the new session starts with instead; the page moves to the fork, which names
its parent. A real browser (see test_http_inbox.py) on the real stack."""

from __future__ import annotations

from tests.api.http_support import HttpStack, chat_body, session_until, waiting
from tests.support.inbox_browser import Pages


async def test_fork_from_here_on_a_message_of_the_conversation(http_stack: HttpStack,
                                                             pages: Pages):
    from playwright.async_api import expect

    http = http_stack.http
    body = chat_body()
    body["agent"]["llm"]["responses"] = [{"text": "hello, what next?"},
                                         {"text": "bye"}, {"text": "bye again"}]
    r = await http.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    await session_until(http, sid, waiting("message"))
    r = await http.post(f"/api/sessions/{sid}/messages", json={"text": "tell me a joke"})
    assert r.status_code == 202, r.text
    await session_until(http, sid, lambda s: waiting("message")(s) and s["llm_calls"] == 2)

    page = await pages.new("fork")
    await page.goto(f"{http_stack.url}/#/s/{sid}")
    token = page.get_by_label("API token")
    await token.fill(http.headers["authorization"].removeprefix("Bearer "))
    await token.press("Enter")
    conversation = page.locator("#conversation")
    said = conversation.locator("li", has_text="tell me a joke")
    await expect(said).to_be_visible()
    page.once("dialog", lambda d: d.accept("tell me a riddle"))
    await said.get_by_role("button", name="Fork from here").click()
    await expect(page.locator("#forked-from")).to_have_text(sid)
    fork = page.url.rsplit("/", 1)[-1]
    assert fork != sid
    await expect(conversation).to_contain_text("tell me a riddle")
    await expect(conversation).to_contain_text("Forked from")
    await expect(conversation).to_contain_text("bye")
    assert "tell me a joke" not in await conversation.inner_text()
    # the parent is untouched: it still waits after its own second turn
    parent = (await http.get(f"/api/sessions/{sid}")).json()
    assert waiting("message")(parent) and parent["llm_calls"] == 2
    # ... and lists its fork (the read model's lineage), in the API and on its page
    parent = await session_until(http, sid, lambda s: [f["session_id"] for f in s["forks"]]
                                 == [fork])
    (listed,) = parent["forks"]
    assert listed["seq"] > 0
    await page.goto(f"{http_stack.url}/#/s/{sid}")
    await expect(page.locator("#forks")).to_have_text(
        f"Forks: {fork} (from line {listed['seq']})")
    await page.locator("#forks").get_by_role("link", name=fork).click()
    await expect(page.locator("#forked-from")).to_have_text(sid)
    fork_view = (await http.get(f"/api/sessions/{fork}")).json()
    assert fork_view["forks"] == [] and fork_view["forked_from"]["seq"] == listed["seq"]
