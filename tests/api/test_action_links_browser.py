"""Issue 26, "Done when": an e-mail arrives at the SMTP server the test starts, with
working links; in Chromium the approve link shows the confirm page, a link opened but
not confirmed decides nothing, confirming approves (the log names the person the link
was sent to, through a link), and a second use is refused with nothing changed.

The stack is real (a worker, the exporter, the read model, the API with its doors;
people in ``local`` mode); the e-mail goes through ``EmailSender`` to ``aiosmtpd``
with the links ``links_for`` made for the waiting session's request."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.notify.channels.email import EmailSender
from api.notify.links import links_for
from api.notify.model import Message
from api.notify.settings import EmailChannel, NotifyConfig
from tests.api.http.test_act import (  # noqa: F401  (act_stack: the module's stack)
    Stack,
    act_stack,
    log_lines,
    notice_of,
    session,
    waiting_approval,
)
from tests.api.http_support import eventually, waiting
from tests.api.notify.smtp_support import parts_of, smtp_server
from tests.support.inbox_browser import Pages


@pytest.mark.browser
async def test_an_emailed_approve_link_confirms_once(act_stack: Stack,  # noqa: F811
                                                     pages: Pages, tmp_path: Path,
                                                     free_port: Callable[[], int]):
    from playwright.async_api import expect

    s = act_stack
    sid, pending = await waiting_approval(s, tmp_path)
    n = notice_of(sid, pending)
    links = links_for(n, s.principal("ann"), NotifyConfig(), base_url=s.stack.url,
                      secret=s.secret, now=datetime.now(UTC))
    port = free_port()
    mail = EmailSender("mail", EmailChannel(type="email", host="127.0.0.1", port=port,
                                            sender="hitlflow@example.com"))
    with smtp_server(port) as server:
        await mail.send(Message(message_id=f"{n.notice_id}:mail:ann", channel="mail",
                                recipient="ann@example.com", notice=n, links=links))
    [received] = server.received
    assert received.rcpt_tos == ["ann@example.com"]
    text, html = parts_of(received.message)
    # The link as the person gets it: from the e-mail, not from the test's variables.
    [approve] = re.findall(r"^Approve: (\S+)\r?$", text, re.M)
    assert approve == links.approve and f'href="{approve}"' in html
    assert approve.startswith(f"{s.stack.url}/act#t=")

    page = await pages.new("link")
    await page.goto(approve)
    await expect(page.locator("#title")).to_have_text("Approve this request?")
    await expect(page.locator("#prompt")).to_have_text(pending["prompt"])
    await expect(page.locator("#digest")).to_have_text(pending["digest"])
    await expect(page.locator("#recipient")).to_have_text("ann")
    await expect(page.locator("#asked")).to_contain_text("delete_note")
    confirm = page.get_by_role("button", name="Confirm: approve")
    await expect(confirm).to_be_visible()
    assert "#t=" not in page.url  # the token left the address bar
    await pages.picture(page, "action-link-confirm")

    # Opened, not confirmed: nothing is decided (a scanner or a preview does this much).
    await page.reload()
    await expect(confirm).to_be_visible()
    now = await session(s, sid)
    assert now["status"] == "waiting_user" and now["pending"] == pending
    assert now["replies"] == 0
    assert not [e for e in await log_lines(s, sid) if e["type"] == "ISSUE_RESOLVED"]

    await confirm.click()
    await expect(page.locator("#title")).to_have_text("Approved")
    await expect(page.locator("#outcome")).to_contain_text("Approved as ann, through this link")

    async def resolved() -> list[dict]:
        return [e["payload"] for e in await log_lines(s, sid) if e["type"] == "ISSUE_RESOLVED"
                and e["payload"]["issue_id"] == pending["request_id"]]
    [decision] = await eventually(resolved, bool, what="the decision in the log")
    assert (decision["principal"]["issuer"], decision["principal"]["subject"]) == (
        "local", "ann")
    assert decision["via"] == "link" and decision["answer"]["approved"] is True
    assert decision["digest"] == pending["digest"]
    after = await eventually(lambda: session(s, sid), waiting("confirm"),
                             what="the next question")

    # The same link again: used, and nothing changes.
    again = await pages.new("again")
    await again.goto(approve)
    await expect(again.locator("#title")).to_have_text("This link was already used")
    await expect(again.locator("#code")).to_have_text("link_used")
    await expect(again.get_by_role("button")).to_have_count(0)
    later = await session(s, sid)
    assert (later["pending"], later["replies"]) == (after["pending"], after["replies"])
    assert len(await resolved()) == 1
