"""The inbox's notifications view (#/notifications) in Chromium: an operator finds it
from the header, sees the counts, the channels and the dead letters, sends one again
and then all; a viewer gets no link and, at the address, the API's refusal. With
``HITLFLOW_SCREENSHOTS=docs/`` it keeps docs/inbox-dead-letters.png."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from api.notify.outbox import Outbox
from tests.api.notify.notify_support import api, dead
from tests.support.inbox_browser import Pages


@pytest.mark.browser
async def test_an_operator_sends_dead_letters_again_from_the_inbox(
        tmp_path: Path, free_port: Callable[[], int], pages: Pages,
        monkeypatch: pytest.MonkeyPatch):
    from playwright.async_api import expect

    monkeypatch.setenv("NOTIFY_INBOX_SLACK_URL", "https://hooks.slack.example/services/x")
    config = {"channels": {
        "ops-chat": {"type": "slack", "url_env": "NOTIFY_INBOX_SLACK_URL"},
        "audit-hook": {"type": "webhook", "url": "https://hooks.example.com/h",
                       "secret_env": "NOTIFY_INBOX_HOOK_SECRET"}}}
    async with api(tmp_path, free_port(), config) as a:
        ids = dead(a.store, 3, channel="ops-chat")
        url = str(a.http.base_url).rstrip("/")
        key = {role: a.keys[role]["authorization"].removeprefix("Bearer ")
               for role in a.keys}

        op = await pages.new("operator")
        await op.goto(f"{url}/#key={key['operator']}")
        await expect(op.locator("#who")).to_contain_text("(operator)")
        link = op.get_by_role("link", name="Notifications")
        await expect(link).to_be_visible()
        await link.click()
        await expect(op.get_by_role("heading", name="Notifications")).to_be_visible()
        await expect(op.locator("#notify-counts")).to_have_text(
            "0 pending · 0 delivered · 3 dead")
        await expect(op.locator("#notify-channels")).to_have_text(
            "Channels: audit-hook (webhook), ops-chat (slack)")
        await expect(op.locator("#dead-count")).to_have_text("3 dead letters, newest first.")
        cards = op.locator("#dead-letters > li")
        await expect(cards).to_have_count(3)
        assert [await c.get_attribute("data-message") for c in await cards.all()] == ids[::-1]
        card = op.locator(f'[data-message="{ids[0]}"]')
        await expect(card).to_contain_text("ops-chat · opened s-0.r1 in s-0")
        await expect(card).to_contain_text("1 attempt, dead")
        await expect(card.locator(".last-error")).to_have_text(
            "ops-chat: the receiver answered 410: channel_is_archived")
        await expect(card.get_by_role("link", name="s-0")).to_have_attribute("href", "#/s/s-0")
        assert "hooks.slack.example" not in await op.content()
        await pages.picture(op, "inbox-dead-letters")

        await card.get_by_role("button", name="Resend").click()
        await expect(op.locator("#live")).to_have_text(f"{ids[0]} goes out again")
        await expect(cards).to_have_count(2)
        await expect(op.locator("#notify-counts")).to_have_text(
            "1 pending · 0 delivered · 2 dead")
        assert {m["message_id"]: m["state"] for m in Outbox(a.store).messages()}[ids[0]] == \
            "pending"

        await op.get_by_role("button", name="Resend all").click()
        await expect(op.locator("#live")).to_have_text("2 dead letters sent again")
        await expect(op.locator("#dead-count")).to_have_text("No dead letters.")
        await expect(cards).to_have_count(0)
        await expect(op.get_by_role("button", name="Resend all")).to_be_disabled()
        assert Outbox(a.store).counts() == {"pending": 3, "delivered": 0, "dead": 0}

        # A viewer: no link in the header; at the address, the API's refusal.
        dead(a.store, 1, first=10)
        viewer = await pages.new("viewer")
        await viewer.goto(f"{url}/#key={key['viewer']}")
        await expect(viewer.locator("#who")).to_contain_text("(viewer)")
        await expect(viewer.get_by_role("link", name="Notifications")).to_be_hidden()
        await viewer.goto(f"{url}/#/notifications")
        await expect(viewer.get_by_role("alert")).to_contain_text(
            "viewer is a viewer: notifications need the operator role")
        await expect(viewer.locator("#dead-letters > li")).to_have_count(0)
        assert Outbox(a.store).counts()["dead"] == 1
