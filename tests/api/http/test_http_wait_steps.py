"""The wait's steps over HTTP (issue 26): a broken wait config is a 422 that starts
nothing; a session's pending request shows when it was reminded and escalated and whom
it is for now, from the read model, and its log has the two lines. (Real dev server,
timers of one and two seconds: the test waits for what the API shows, not for time.)"""

from __future__ import annotations

import pytest

from tests.api.http_support import (
    TOKEN,
    HttpStack,
    confirm_body,
    error_of,
    session_until,
    waiting,
)
from tests.support.inbox_browser import EXPECT_MS, Pages

WAIT = {"remind_after_s": 1, "escalate_after_s": 2, "escalate_to": ["carol"]}


@pytest.mark.parametrize("broken, said", [
    ({"remind_after_s": 5, "escalate_after_s": 3, "escalate_to": ["carol"]},
     "remind_after_s (5) must come before escalate_after_s (3)"),
    ({"escalate_after_s": 5, "escalate_to": ["carol"], "reply_timeout_s": 5},
     "escalate_after_s (5) must come before reply_timeout_s (5)"),
    ({"remind_after_s": 9, "reply_timeout_s": 3}, "must come before reply_timeout_s"),
    ({"escalate_after_s": 5}, "escalate_after_s and escalate_to go together"),
    ({"escalate_to": ["carol"]}, "escalate_after_s and escalate_to go together"),
    ({"escalate_after_s": 5, "escalate_to": [""]}, "escalate_to"),
    ({"escalate_after_s": 5, "escalate_to": "carol"}, "escalate_to"),
    ({"remind_after_s": -1}, "remind_after_s"),
    ({"remind_after_s": "soon"}, "remind_after_s"),
    ({"notify": [{"channel": "no spaces"}]}, "channel"),
])
async def test_a_broken_wait_config_is_a_422_and_starts_nothing(http_stack: HttpStack,
                                                                broken, said):
    http = http_stack.http
    sid = f"s-broken-wait-{abs(hash(str(broken))) % 10**8}"
    r = await http.post("/api/sessions", params={"session_id": sid},
                        json={**confirm_body(), **broken})
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["code"] == "validation_error" and said in error["message"], error
    assert (await http.get(f"/api/sessions/{sid}")).status_code == 404


async def test_the_pending_request_shows_the_steps_and_its_new_addressees(
        http_stack: HttpStack):
    http = http_stack.http
    r = await http.post("/api/sessions", json={**confirm_body(), **WAIT})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    first = await session_until(http, sid, waiting("confirm"))
    assert first["pending"]["reminded_at"] is None and first["pending"]["escalated_to"] == []
    s = await session_until(http, sid, lambda s: (s["pending"] or {}).get("escalated_at")
                            is not None, what="the escalation")
    p = s["pending"]
    assert s["live"] is False  # from the read model
    assert p["request_id"] == first["pending"]["request_id"]
    assert p["reminded_at"] is not None and p["reminded_at"] < p["escalated_at"]
    assert p["escalated_to"] == ["carol"] and p["approvers"][-1] == "carol"
    log = (await http.get(f"/api/sessions/{sid}/log")).text
    assert log.count('"type":"ISSUE_REMINDED"') == 1
    assert log.count('"type":"ISSUE_ESCALATED"') == 1
    r = await http.post(f"/api/sessions/{sid}/cancel", json={})
    assert r.status_code in (200, 202), r.text


@pytest.mark.browser
async def test_the_inbox_shows_the_steps_on_the_waiting_request(http_stack: HttpStack,
                                                               pages: Pages):
    """The session page says when the request was reminded and to whom it was escalated;
    the conversation has a line for each step."""
    from playwright.async_api import expect

    r = await http_stack.http.post("/api/sessions", json={**confirm_body(), **WAIT})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    page = await pages.new("wait-steps")
    await page.goto(f"{http_stack.url}/#/s/{sid}")
    await page.get_by_label("API token").fill(TOKEN)
    await page.get_by_label("API token").press("Enter")
    steps = page.locator("#wait-steps")
    await expect(steps).to_contain_text("Reminded at", timeout=EXPECT_MS)
    await expect(steps).to_contain_text("Escalated to carol at", timeout=EXPECT_MS)
    conversation = page.locator("#conversation")
    await expect(conversation).to_contain_text("Reminded", timeout=EXPECT_MS)
    await expect(conversation).to_contain_text("Escalated", timeout=EXPECT_MS)
    await expect(conversation).to_contain_text("to carol", timeout=EXPECT_MS)
    await pages.picture(page, "wait-steps")
    await http_stack.http.post(f"/api/sessions/{sid}/cancel", json={})
