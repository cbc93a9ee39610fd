"""The inbox (``GET /``): its static files, and a person answering the demo session in
a real browser — Playwright driving the system's Debian ``chromium`` (browser
downloads are not reachable here; ``.ci/run`` installs the package when missing) —
on the real stack with a bearer token configured.

``HITLFLOW_SCREENSHOTS=docs/`` keeps the README's pictures of the inbox; on a
failure, every open page is saved to a temporary directory named in the failure.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from api.http.command_policy import SHELL
from api.http.routers import act, inbox
from api.settings import DEMO_COMMAND
from tests.api.http_support import (
    HttpStack,
    confirm_body,
    demo_body,
    error_of,
    running_stack,
    stack_settings,
)
from tests.support.inbox_browser import EXPECT_MS, Pages

TOKEN = "inbox-s3cret"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
async def inbox_stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                      tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpStack]:
    """Like ``http_stack``, with ``HITLFLOW_API_TOKEN`` set (plans' shell commands
    allowed too: the plan gate's session)."""
    settings = stack_settings(dev_env.client, tmp_path_factory.mktemp("inbox-data"), "inbox",
                              TOKEN, commands=[SHELL, DEMO_COMMAND])
    async with running_stack(dev_env.client, settings, free_port(), AUTH) as stack:
        yield stack


# -- the static files ------------------------------------------------------------------

OTHER_PATHS = ["/inbox/index.html", "/inbox/", "/inbox/nope.js", "/inbox/..%2Fapp.py",
               "/inbox/%2E%2E%2Frouters%2Finbox.py", "/inbox/__init__.py", "/inbox/inbox.js/x",
               "/index.html"]


async def test_the_page_is_served_without_the_token_and_nothing_else_is(inbox_stack: HttpStack):
    async with httpx.AsyncClient(base_url=inbox_stack.url, timeout=30) as anonymous:
        for path, media in [("/", "text/html"), ("/inbox/inbox.js", "text/javascript"),
                            ("/inbox/inbox.css", "text/css"),
                            *((f"/inbox/{name}", "text/javascript") for name in inbox.FILES
                              if name.endswith(".js") and name != "inbox.js")]:
            r = await anonymous.get(path)
            assert r.status_code == 200, (path, r.text)
            assert r.headers["content-type"].startswith(media)
            assert "default-src 'self'" in r.headers["content-security-policy"]
        page = (await anonymous.get("/")).text
        # Everything it loads is its own (offline: no CDN), by relative paths.
        assert 'src="inbox/inbox.js"' in page and 'href="inbox/inbox.css"' in page
        assert '<script type="module" src="inbox/inbox.js">' in page  # it imports the rest
        assert "http://" not in page and "https://" not in page
        r = await anonymous.post("/")
        assert r.status_code == 405 and error_of(r)["code"] == "method_not_allowed"
        # Only those paths are open; the token guards the rest, files or not.
        for path in [*OTHER_PATHS, "/api/sessions"]:
            r = await anonymous.get(path)
            assert r.status_code == 401 and error_of(r)["code"] == "unauthorized", path
    for path in OTHER_PATHS:  # with the token: none of them is a file it serves
        r = await inbox_stack.http.get(path)
        assert r.status_code == 404 and error_of(r)["code"] == "not_found", path


def test_the_served_files_are_the_modules_the_page_loads():
    """The allow-list names exactly the package's inbox files, and every module the
    entry reaches by ``import`` is on it (a module left off would break the page)."""
    package = resources.files("api.http.inbox")
    shipped = {f.name for f in package.iterdir() if f.name.endswith((".html", ".js", ".css"))}
    shipped -= set(act.FILES)  # the action links' confirm page, served by its own router
    assert set(inbox.FILES) == shipped
    reached, todo = set(), ["inbox.js"]
    while todo:
        name = todo.pop()
        reached.add(name)
        text = package.joinpath(name).read_text()
        for imported in re.findall(r'^import .* from "\./([\w-]+\.js)";$', text, re.M):
            assert imported in inbox.FILES, (name, imported)
            if imported not in reached:
                todo.append(imported)
    assert reached == {name for name in shipped if name.endswith(".js")}
    assert all(len(package.joinpath(n).read_text().splitlines()) <= 400 for n in reached)


# -- in a browser ----------------------------------------------------------------------


async def _sign_in(page, expect) -> None:
    """The API wants a token: a wrong one is refused with the API's words, then the
    right one is kept in the tab's session storage."""
    field = page.get_by_label("API token")
    await expect(page.get_by_role("alert")).to_have_text("a bearer token is required")
    await field.fill("not-the-token")
    await field.press("Enter")
    await expect(page.get_by_role("alert")).to_have_text("the bearer token is wrong")
    await page.get_by_label("API token").fill(TOKEN)
    await page.get_by_role("button", name="Sign in").click()


@pytest.mark.browser
async def test_a_person_answers_the_demo_session_in_the_inbox(
        inbox_stack: HttpStack, pages: Pages, tmp_path: Path):
    from playwright.async_api import expect

    stack = inbox_stack
    notes = tmp_path / "notes"
    notes.mkdir()
    inbox = await pages.new("inbox")
    await inbox.goto(f"{stack.url}/")
    await _sign_in(inbox, expect)
    await expect(inbox.get_by_role("heading", name="Waiting for you")).to_be_visible()

    # A session that starts while the inbox is open shows up in it, with what it waits for.
    r = await stack.http.post("/api/sessions", json=demo_body(notes))
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    card = inbox.locator(f'[data-session="{sid}"]')
    await expect(card).to_contain_text("waits for approval")
    await expect(card).to_contain_text("Call tool delete_note(name='old-draft')")
    listed = (await stack.http.get("/api/sessions", params={"status": "waiting_user"})).json()
    assert [s["pending"]["kind"] for s in listed["sessions"] if s["session_id"] == sid] \
        == ["approval"]
    await pages.picture(inbox, "inbox")

    # A second tab whose live stream is cut keeps the approval form: it goes stale.
    stale = await pages.new("stale")
    await stale.route("**/events", lambda route: route.abort())
    await stale.goto(f"{stack.url}/#/s/{sid}")
    await _sign_in(stale, expect)  # session storage is per tab
    await expect(stale.get_by_role("button", name="Approve")).to_be_visible()

    # The list keeps the keyboard's place when it changes under it; Enter opens.
    link = inbox.get_by_role("link", name=sid)
    await link.focus()
    r = await stack.http.post("/api/sessions", json=confirm_body())
    assert r.status_code == 201, r.text
    await expect(inbox.locator(f'[data-session="{r.json()["session_id"]}"]')).to_contain_text(
        "go on?")
    await expect(link).to_be_focused()

    # Its first stream ends at once (a dropped connection): the page reconnects with
    # Last-Event-ID, the last log line it has read.
    asked: list[str | None] = []
    reconnected = asyncio.Event()

    async def first_stream_drops(route) -> None:
        asked.append(route.request.headers.get("last-event-id"))
        if len(asked) > 1:
            reconnected.set()
        if len(asked) == 1:
            await route.fulfill(status=200, content_type="text/event-stream",
                                body="retry: 50\n\n")
        else:
            await route.continue_()

    await inbox.route("**/events", first_stream_drops)
    await inbox.keyboard.press("Enter")

    # The session page: the conversation with each tool call's safety class, the
    # contracts with their state, and the approval form.
    conversation = inbox.locator("#conversation")
    await expect(inbox.locator("#prompt")).to_have_text(
        "Approve irreversible action: Call tool delete_note(name='old-draft') on notes")
    await expect(conversation).to_contain_text(
        "Tidy up my notes: save the groceries list, drop the old draft.")
    await expect(conversation.locator("li", has_text="notes.delete_note")).to_contain_text(
        "irreversible")
    await expect(conversation.locator("li", has_text="notes.write_note").first).to_contain_text(
        "reversible")
    await expect(inbox.locator("#contracts li", has_text="delete_note")).to_contain_text(
        "waiting")
    await asyncio.wait_for(reconnected.wait(), EXPECT_MS / 1000)
    at_wait = (await stack.http.get(f"/api/sessions/{sid}")).json()["seq"]
    assert asked[:2] == [str(at_wait)] * 2, (asked, at_wait)
    # Readable on a phone: nothing wider than the screen.
    await inbox.set_viewport_size({"width": 375, "height": 740})
    assert await inbox.evaluate(
        "document.documentElement.scrollWidth <= window.innerWidth"), "wider than a phone"
    await inbox.set_viewport_size({"width": 960, "height": 720})
    await pages.picture(inbox, "inbox-session")

    # Approve with the keyboard; the session moves on live (no reload, no polling):
    # the tool runs and the agent's question arrives over the stream.
    await inbox.get_by_label("Comment (optional)").fill("the draft can go")
    await inbox.keyboard.press("Tab")
    await expect(inbox.get_by_role("button", name="Approve")).to_be_focused()
    await inbox.keyboard.press("Enter")
    await expect(inbox.locator("#prompt")).to_have_text(
        "Shall I read the groceries list back to you?")
    await expect(inbox.get_by_role("heading", name="Waiting for you")).to_be_focused()
    await expect(conversation).to_contain_text("approved · “the draft can go”")
    await expect(conversation.locator("li", has_text="Result delete_note")).to_contain_text(
        '"deleted":true')

    # The stale tab's approval is refused: the API's 409 message, in place.
    async with stale.expect_response(lambda resp: resp.url.endswith("/reply")) as answer:
        await stale.get_by_role("button", name="Approve").click()
    refused = await answer.value
    assert refused.status == 409
    message = (await refused.json())["error"]["message"]
    await expect(stale.get_by_role("alert")).to_have_text(f"Not sent: {message}")

    # Answer the question; the session ends, and leaves the inbox.
    await inbox.get_by_role("button", name="Yes").click()
    await expect(inbox.locator("#head")).to_contain_text("succeeded")
    await expect(conversation).to_contain_text("Done: groceries saved, the old draft deleted.")
    await expect(inbox.get_by_role("heading", name="Nothing waits for you")).to_be_visible()
    assert sorted(p.name for p in notes.iterdir() if not p.name.startswith(".")) \
        == ["groceries.note"]  # the draft went
    await inbox.get_by_role("link", name="← Inbox").click()
    await expect(inbox.locator("#count")).to_be_visible()
    await expect(inbox.locator(f'[data-session="{sid}"]')).to_have_count(0)


CHOOSE_FORM_CHAT = {"initial_message": "Order a print", "agent": {"llm": {
    "provider": "scripted", "responses": [
        {"ecs_request": {"kind": "choose", "prompt": "Which colour?",
                         "options": ["red", "green"]}},
        {"ecs_request": {"kind": "form", "prompt": "Where does it go?", "fields": [
            {"name": "city", "label": "City"},
            {"name": "copies", "label": "Copies", "type": "number"},
            {"name": "gift", "label": "Gift wrap", "type": "boolean", "required": False}]}},
        {"text": "Noted."},
        {"text": "Anything else?"}]}}}
GATED_PLAN = {"plan": {"name": "release", "steps": [
    {"name": "go / no-go", "gate": True},
    {"name": "publish", "run": "echo published v1", "verify": "human"}]}}


@pytest.mark.browser
async def test_each_kind_of_request_gets_its_form(inbox_stack: HttpStack, pages: Pages):
    """choose, form, message and end, and a plan's gate and human verification."""
    from playwright.async_api import expect

    stack = inbox_stack
    sids = []
    for body in (CHOOSE_FORM_CHAT, GATED_PLAN):
        r = await stack.http.post("/api/sessions", json=body)
        assert r.status_code == 201, r.text
        sids.append(r.json()["session_id"])
    chat, plan = sids
    page = await pages.new("kinds")
    conversation, prompt = page.locator("#conversation"), page.locator("#prompt")
    await page.goto(f"{stack.url}/#/s/{chat}")
    await page.get_by_label("API token").fill(TOKEN)
    await page.get_by_label("API token").press("Enter")

    await expect(prompt).to_have_text("Which colour?")
    await page.get_by_role("radio", name="green").check()
    await page.get_by_role("button", name="Send").click()
    await expect(prompt).to_have_text("Where does it go?")
    await expect(conversation).to_contain_text("chose green")
    await page.get_by_label("City").fill("Oslo")
    await page.get_by_label("Copies").fill("2")
    await page.get_by_label("Gift wrap").check()
    await page.get_by_role("button", name="Send").click()
    # The values go as the form's schema says: a number, a boolean.
    await expect(conversation).to_contain_text('{"city":"Oslo","copies":2,"gift":true}')
    await expect(page.get_by_label("Your message")).to_be_visible()
    await page.get_by_label("Your message").fill("Add a card, please.")
    await page.get_by_role("button", name="Send").click()
    await expect(conversation.locator("li.who-agent", has_text="Anything else?")).to_be_visible()
    await expect(conversation).to_contain_text("Add a card, please.")
    await page.get_by_role("button", name="End the conversation").click()
    await expect(page.locator("#head")).to_contain_text("succeeded")

    await page.goto(f"{stack.url}/#/s/{plan}")
    await expect(prompt).to_have_text("gate: go / no-go")
    # Broken input: a reset forward is refused by the API, its words in place.
    await page.get_by_label("Step to reset to (for Reset)").fill("1")
    await page.get_by_role("button", name="Reset to step").click()
    await expect(page.get_by_role("alert")).to_contain_text(
        "Not sent: reset to step 1 would move forward past the cursor (0)")
    await expect(page.get_by_role("button", name="Reset to step")).to_be_focused()
    await page.get_by_role("button", name="Approve step").click()
    await expect(prompt).to_have_text("verify_human: verify step 1 and approve it")
    # The person who verifies the step sees what it printed.
    await expect(conversation.locator("li", has_text="Step 1 ran")).to_contain_text(
        "published v1")
    await page.get_by_role("button", name="Approve step").click()
    await expect(page.locator("#head")).to_contain_text("succeeded")
