"""Who decides (issue 24, "Done when"), end to end over HTTP on the real stack: a worker,
the exporter, the read model and the API with its real doors, people signing in with
their own credentials, never a test-only principal.

The same test body runs in two identity modes:

* ``local``: two people added with ``hitlflow people add`` (their keys, as the command
  prints them once);
* ``oidc``: the same two people at a real OpenID Connect provider the test starts
  (``oidc-provider-mock``), signed in with its ID tokens; roles from their groups.

Ann (approver) starts the demo session addressed to her, with Vic as a viewer. Vic
sees it and may not answer it: the API says why (the rule), refuses his approval with
a 403 naming the rule, records the refusal in the session's log and changes nothing
else. A reply with a stale digest is a 409. Ann's approval runs the tool, and the log
names her (not the body's ``by``) and the digest she approved.

The inbox in Chromium (the viewer sees the session and no button, and why; the
approver approves) is ``test_the_inbox_says_who_decides``; ``HITLFLOW_SCREENSHOTS=docs/``
keeps its pictures (docs/inbox-viewer.png, docs/inbox-approver.png).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from api.cli.main import app as cli
from api.http.app import create_app
from api.settings import HitlflowSettings
from observation.exporter.keys import load_or_create_signer
from tests.api.http_support import (
    HttpStack,
    demo_body,
    error_of,
    eventually,
    serve,
    stack_settings,
    waiting,
)
from tests.support.inbox_browser import Pages
from tests.support.sessions import running_exporter, running_worker

TOKEN = "who-decides-api-token"
RULE = {"name": "note-deletes", "tool": "delete_*", "approvers": ["ann"]}
TWO = {"name": "two-person", "tool": "delete_*", "approvers": ["ann", "bob"],
       "approvals_required": 2}
PROMPT = "Approve irreversible action: Call tool delete_note(name='old-draft') on notes"


@dataclass
class People:
    """The stack, and each person's bearer credential and issuer."""

    stack: HttpStack
    issuer: str
    credential: dict[str, str]  # "ann" / "bob" / "vic" -> their key or ID token
    names: dict[str, str]  # -> their display name

    def as_(self, who: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.credential[who]}"}


def people_added_with_the_cli(data_dir: Path) -> dict[str, str]:
    keys = {}
    for name, role in (("ann", "approver"), ("bob", "approver"), ("vic", "viewer")):
        out = CliRunner().invoke(cli, ["people", "add", name, "--role", role,
                                       "--data-dir", str(data_dir)])
        assert out.exit_code == 0, out.output
        keys[name] = out.stdout.strip().splitlines()[-1]
        assert keys[name].startswith("hfk_"), out.stdout
    return keys


@asynccontextmanager
async def up_like_stack(client: Client, settings: HitlflowSettings, port: int
                        ) -> AsyncIterator[HttpStack]:
    """``running_stack``, wired as ``hitlflow up`` wires it: the API wakes the exporter
    for every write it accepted (a session waiting for a second approval changes no
    status the exporter's discovery would see)."""
    signer = load_or_create_signer(settings.data_dir)
    async with running_worker(client, settings.task_queue), \
            running_exporter(client, settings.data_dir, settings.task_queue,
                             signer=signer) as exporter, \
            serve(create_app(settings, on_change=exporter.wake), port) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield HttpStack(http=http, url=server.url, client=client, settings=settings)


@pytest.fixture(scope="module")
def provider() -> Iterator[object]:
    from tests.api.identity.oidc_support import Provider

    p = Provider()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module", params=["local", "oidc"])
async def people(request: pytest.FixtureRequest, dev_env: WorkflowEnvironment,
                 free_port: Callable[[], int], tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[People]:
    mode = request.param
    data_dir = tmp_path_factory.mktemp(f"who-{mode}")
    settings = stack_settings(dev_env.client, data_dir, f"who-{mode}", TOKEN).model_copy(
        update={"auth_mode": mode, "role_groups": {"approver": ["approvers"]}})
    with pytest.MonkeyPatch.context() as env:
        if mode == "local":
            issuer, credential = "local", people_added_with_the_cli(data_dir)
            names = {who: who for who in credential}
        else:
            from tests.api.identity.oidc_support import CLIENT, SECRET

            provider = request.getfixturevalue("provider")
            for name, value in {"ISSUER": provider.issuer, "CLIENT_ID": CLIENT,
                                "CLIENT_SECRET": SECRET}.items():
                env.setenv(f"HITLFLOW_OIDC_{name}", value)
            issuer = provider.issuer
            names = {"ann": "Ann", "bob": "Bob", "vic": "Vic"}
            credential = {who: provider.person(who, name=names[who], groups=[
                "staff" if who == "vic" else "approvers"]) for who in names}
        async with up_like_stack(dev_env.client, settings, free_port()) as stack:
            found = People(stack=stack, issuer=issuer, credential=credential, names=names)
            for who, role in (("ann", "approver"), ("bob", "approver"), ("vic", "viewer")):
                me = await stack.http.get("/api/whoami", headers=found.as_(who))
                assert me.status_code == 200, me.text
                assert (me.json()["issuer"], me.json()["subject"], me.json()["role"]) == \
                    (issuer, who, role)
            yield found


async def started(people: People, notes: Path, rule: dict = RULE,
                  viewers: tuple[str, ...] = ("vic",)) -> str:
    """The demo session, started by Ann, its deletes addressed by ``rule`` (default: to
    her); Vic may watch."""
    r = await people.stack.http.post("/api/sessions", headers=people.as_("ann"), json={
        **demo_body(notes), "people": {"viewers": list(viewers)}, "rules": [rule]})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


async def session_as(people: People, who: str, sid: str, **params: str) -> dict:
    r = await people.stack.http.get(f"/api/sessions/{sid}", headers=people.as_(who),
                                    params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def waiting_approval(people: People, sid: str) -> dict:
    async def get() -> dict:
        return await session_as(people, "ann", sid)
    return await eventually(get, waiting("approval"), what="waiting for the approval")


async def log_lines(people: People, sid: str) -> list[dict]:
    r = await people.stack.http.get(f"/api/sessions/{sid}/log", headers=people.as_("ann"))
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines()]


async def waiting_for_me(people: People, who: str) -> set[str]:
    r = await people.stack.http.get("/api/sessions", headers=people.as_(who),
                                    params={"waiting_for": "me", "limit": "1000"})
    assert r.status_code == 200, r.text
    return {s["session_id"] for s in r.json()["sessions"]}


async def test_the_viewer_is_refused_and_the_approver_decides(people: People, tmp_path: Path):
    http = people.stack.http
    notes = tmp_path / "notes"
    notes.mkdir()
    sid = await started(people, notes)
    before = await waiting_approval(people, sid)
    pending = before["pending"]
    assert pending["prompt"] == PROMPT
    assert (pending["approvers"], pending["rule"]) == (["ann"], "note-deletes")
    assert pending["digest"].startswith("sha256:"), pending

    # Vic sees the session, and why it is not his to answer; it is not waiting for him.
    seen = await session_as(people, "vic", sid)
    assert seen["pending"] == pending
    assert seen["you"]["may_answer"] is False
    assert seen["you"]["refusal"]["rule"] == "role.approver"
    assert "vic" in seen["you"]["refusal"]["message"]
    assert (await session_as(people, "ann", sid))["you"]["may_answer"] is True
    assert sid in await waiting_for_me(people, "ann")
    assert sid not in await waiting_for_me(people, "vic")

    # His approval, with the right digest and Ann's name in `by`: 403 naming the rule.
    r = await http.post(f"/api/sessions/{sid}/reply", headers=people.as_("vic"), json={
        "request_id": pending["request_id"], "digest": pending["digest"], "approve": True,
        "by": "ann"})
    assert r.status_code == 403, r.text
    assert r.json()["error"]["rule"] == "role.approver"
    assert error_of_403(r)["code"] == "forbidden"

    # Nothing changed: still waiting for the same request, no reply, nothing resolved.
    after = await session_as(people, "ann", sid)
    assert after["status"] == "waiting_user" and after["pending"] == pending
    assert after["replies"] == 0
    assert not [e for e in await log_lines(people, sid) if e["type"] == "ISSUE_RESOLVED"]

    # A reply for a digest that is not the one asked: 409, nothing changes.
    stale = "sha256:" + "0" * 64
    r = await http.post(f"/api/sessions/{sid}/reply", headers=people.as_("ann"), json={
        "request_id": pending["request_id"], "digest": stale, "approve": True})
    assert r.status_code == 409, r.text
    assert error_of(r)["code"] == "stale_digest"
    again = await session_as(people, "ann", sid)
    assert again["pending"] == pending and again["replies"] == 0

    # Ann approves, with someone else's name in `by`: the log names her, and the digest.
    r = await http.post(f"/api/sessions/{sid}/reply", headers=people.as_("ann"), json={
        "request_id": pending["request_id"], "digest": pending["digest"], "approve": True,
        "by": "mallory"})
    assert r.status_code == 202, r.text

    async def resolved() -> list[dict]:
        return [e for e in await log_lines(people, sid) if e["type"] == "ISSUE_RESOLVED"]
    first = (await eventually(resolved, bool, what="the approval in the log"))[0]["payload"]
    assert first["principal"] == {"issuer": people.issuer, "subject": "ann",
                                  "name": first["principal"]["name"]}
    assert first["principal"]["name"] in ("ann", "Ann")
    assert first["digest"] == pending["digest"]
    assert "mallory" not in json.dumps(first)
    # Vic's refused attempt is in the log too: who, what and which rule (the line is
    # journalled with the session's next step, here the approved call).
    lines = await log_lines(people, sid)
    [refused] = [e["payload"] for e in lines if e["type"] == "interaction.reply.refused"]
    assert (refused["action"], refused["rule"], refused["request_id"]) == (
        "reply", "role.approver", pending["request_id"])
    assert (refused["principal"]["issuer"], refused["principal"]["subject"]) == (
        people.issuer, "vic")
    assert [e["type"] for e in lines].index("interaction.reply.refused") < \
        [e["type"] for e in lines].index("ISSUE_RESOLVED")
    # The approved call ran: the draft is gone, and the session asks its next question.
    await eventually(lambda: session_as(people, "ann", sid), waiting("confirm"),
                     what="the next question")
    assert not (notes / "old-draft.note").exists()


def error_of_403(r: httpx.Response) -> dict:
    """A 403's error: its code, message and the rule it names."""
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "rule"}, body
    return body["error"]


# -- in the inbox -----------------------------------------------------------------------


@pytest.mark.browser
async def test_the_inbox_says_who_decides(people: People, pages: Pages, tmp_path: Path):
    """The viewer sees the session, who it waits for and why it is not his, and no
    button; the approver sees the digest and approves. In each mode (the sign-in is a
    link with the credential in its fragment, as ``up`` prints)."""
    from playwright.async_api import expect

    url = people.stack.url
    notes = tmp_path / "notes"
    notes.mkdir()
    sid = await started(people, notes)
    pending = (await waiting_approval(people, sid))["pending"]
    shoot = people.issuer == "local"  # one set of pictures for the docs

    viewer = await pages.new("viewer")
    await viewer.goto(f"{url}/#key={people.credential['vic']}")
    await expect(viewer.locator("#who")).to_contain_text("signed in as")
    await expect(viewer.locator("#who")).to_contain_text("(viewer)")
    # Waiting for him: nothing; waiting for anyone he may see: this one.
    await expect(viewer.get_by_role("heading", name="Waiting for you")).to_be_visible()
    await expect(viewer.locator("#count")).to_be_visible()
    await expect(viewer.locator(f'[data-session="{sid}"]')).to_have_count(0)
    await viewer.goto(f"{url}/#/?status=waiting_user")
    card = viewer.locator(f'[data-session="{sid}"]')
    await expect(card).to_contain_text("waits for approval")
    await expect(card).to_contain_text("for ann")
    await card.get_by_role("link", name=sid).click()
    await expect(viewer.locator("#prompt")).to_have_text(PROMPT)
    await expect(viewer.get_by_role("heading", name="Waiting for someone else")).to_be_visible()
    await expect(viewer.locator("#for-whom")).to_have_text("For ann (rule note-deletes).")
    why = viewer.locator("#why-not")
    await expect(why).to_contain_text("Not yours to answer: ")
    await expect(why).to_contain_text("(rule role.approver)")
    await expect(viewer.get_by_role("button", name="Approve")).to_have_count(0)
    await expect(viewer.get_by_role("button", name="Reject")).to_have_count(0)
    await expect(viewer.locator("#pending button")).to_have_count(0)
    if shoot:
        await pages.picture(viewer, "inbox-viewer")

    approver = await pages.new("approver")
    await approver.goto(f"{url}/#key={people.credential['ann']}")
    await expect(approver.locator("#who")).to_contain_text("(approver)")
    mine = approver.locator(f'[data-session="{sid}"]')  # waiting for her
    await expect(mine).to_contain_text("waits for approval")
    await mine.get_by_role("link", name=sid).click()
    await expect(approver.locator("#prompt")).to_have_text(PROMPT)
    await expect(approver.get_by_role("heading", name="Waiting for you")).to_be_visible()
    await expect(approver.locator("#for-whom")).to_have_text("For ann (rule note-deletes).")
    digest = approver.locator("#digest")
    await expect(digest).to_have_attribute("title", pending["digest"])
    await expect(digest).to_have_text(pending["digest"][len("sha256:"):][:12] + "…")
    if shoot:
        await pages.picture(approver, "inbox-approver")

    # What she was shown changed under her (here: her answer names another digest):
    # the API's 409 `stale_digest` says so in place, with a reload; nothing was sent on.
    async def stale(route) -> None:
        body = {**json.loads(route.request.post_data or "{}"), "digest": "sha256:" + "0" * 64}
        await route.continue_(post_data=json.dumps(body))
    await approver.route("**/reply", stale)
    async with approver.expect_response(lambda r: r.url.endswith("/reply")) as answer:
        await approver.get_by_role("button", name="Approve").click()
    assert (await answer.value).status == 409
    assert (await (await answer.value).json())["error"]["code"] == "stale_digest"
    alert = approver.get_by_role("alert")
    await expect(alert).to_contain_text(
        "Not sent: what you were asked changed since this page showed it: reload.")
    await expect(alert.get_by_role("button", name="Reload")).to_be_visible()
    assert (await session_as(people, "ann", sid))["replies"] == 0
    await approver.unroute("**/reply", stale)
    await alert.get_by_role("button", name="Reload").click()  # the request as it is now
    await expect(approver.get_by_role("alert")).to_have_count(0)
    await expect(approver.locator("#digest")).to_have_attribute("title", pending["digest"])

    async with approver.expect_request(lambda q: q.url.endswith("/reply")) as sent:
        await approver.get_by_role("button", name="Approve").click()
    body = json.loads((await sent.value).post_data or "{}")
    assert body == {"request_id": pending["request_id"], "digest": pending["digest"],
                    "approve": True}
    await expect(approver.locator("#prompt")).to_have_text(
        "Shall I read the groceries list back to you?")
    # The viewer's page follows it live, still without a button to answer.
    await expect(viewer.locator("#prompt")).to_have_text(
        "Shall I read the groceries list back to you?")
    await expect(viewer.locator("#pending button")).to_have_count(0)
    assert not (notes / "old-draft.note").exists()


@pytest.mark.browser
async def test_the_inbox_shows_who_has_approved_so_far(people: People, pages: Pages,
                                                       tmp_path: Path):
    """Two approvals needed: after Ann's, the request says so to Bob (with his button)
    and to Ann (who may not approve twice: no button, and why); Bob's approval runs it."""
    from playwright.async_api import expect

    url = people.stack.url
    notes = tmp_path / "notes"
    notes.mkdir()
    # A rule's approvers do not make a person one of the session's: Bob is named a
    # viewer so that he may see it (the rule lets him answer).
    sid = await started(people, notes, TWO, viewers=("vic", "bob"))
    pending = (await waiting_approval(people, sid))["pending"]
    assert pending["approvals_required"] == 2
    r = await people.stack.http.post(f"/api/sessions/{sid}/reply", headers=people.as_("ann"),
                                     json={"request_id": pending["request_id"],
                                           "digest": pending["digest"], "approve": True})
    assert r.status_code == 202, r.text
    ann, bob = people.names["ann"], people.names["bob"]

    # Read your write: the read model shows her approval once it has the reply's line.
    now = await session_as(people, "bob", sid, min_journal_seq=str(r.json()["journal_seq"]))
    assert now["stale"] is False
    assert [(a["issuer"], a["subject"]) for a in now["pending"]["approvals"]] == [
        (people.issuer, "ann")]
    assert now["you"]["may_answer"] is True
    mine = await session_as(people, "ann", sid)
    assert (mine["you"]["may_answer"], mine["you"]["refusal"]["rule"]) == (
        False, "already_approved")

    first = await pages.new("first")
    await first.goto(f"{url}/#key={people.credential['ann']}")
    await expect(first.locator("#who")).to_contain_text("(approver)")
    await first.goto(f"{url}/#/s/{sid}")
    await expect(first.get_by_role("heading", name="Waiting for someone else")).to_be_visible()
    await expect(first.locator("#approvals")).to_have_text(
        f"Needs 2 approvals from different people; approved so far by {ann} (1 of 2).")
    await expect(first.locator("#why-not")).to_contain_text("(rule already_approved)")
    await expect(first.locator("#pending button")).to_have_count(0)

    second = await pages.new("second")
    await second.goto(f"{url}/#key={people.credential['bob']}")
    card = second.locator(f'[data-session="{sid}"]')  # waiting for him
    await expect(card).to_contain_text("1 of 2 approvals")
    await card.get_by_role("link", name=sid).click()
    await expect(second.get_by_role("heading", name="Waiting for you")).to_be_visible()
    await expect(second.locator("#for-whom")).to_have_text(
        "For ann and bob (rule two-person).")
    await expect(second.locator("#approvals")).to_have_text(
        f"Needs 2 approvals from different people; approved so far by {ann} (1 of 2).")
    await second.get_by_role("button", name="Approve").click()
    await expect(second.locator("#prompt")).to_have_text(
        "Shall I read the groceries list back to you?")
    await expect(first.locator("#prompt")).to_have_text(
        "Shall I read the groceries list back to you?")
    assert not (notes / "old-draft.note").exists()
    resolved = [e["payload"] for e in await log_lines(people, sid)
                if e["type"] == "ISSUE_RESOLVED"]
    assert resolved[0]["principal"]["subject"] == "bob"
    assert resolved[0]["principal"]["name"] == bob
