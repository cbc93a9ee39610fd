"""Action links over HTTP (``api.http.routers.act``) on the real stack (a worker, the
exporter, the read model, the API with its doors; people in ``local`` mode): every link
that must not decide gets its code and changes nothing (the session still waits for the
same request, no reply, no decision in the log); the good one decides once, as the
person it was sent to, through a link; a second use is refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from api.identity.people_store import PeopleStore
from api.notify.links import link_secret, links_for
from api.notify.model import Notice
from api.notify.settings import NotifyConfig
from tests.api.http_support import HttpStack, demo_body, eventually, stack_settings, waiting
from tests.api.test_who_decides import up_like_stack
from workflows.people import Principal

RULE = {"name": "note-deletes", "tool": "delete_*", "approvers": ["ann", "carl"]}


@dataclass
class Stack:
    stack: HttpStack
    keys: dict[str, str]
    secret: bytes
    people: PeopleStore

    def as_(self, who: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.keys[who]}"}

    def principal(self, who: str) -> Principal:
        person = self.people.read().find(who)
        assert person is not None
        return person.principal()


@pytest.fixture(scope="module")
async def act_stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                    tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    data_dir = tmp_path_factory.mktemp("act")
    store = PeopleStore(data_dir)
    keys = {who: store.add(who, role) for who, role in (
        ("ann", "approver"), ("bob", "approver"), ("carl", "approver"), ("vic", "viewer"))}
    settings = stack_settings(dev_env.client, data_dir, "act")
    async with up_like_stack(dev_env.client, settings, free_port()) as stack:
        # The API made the link key in its lifespan; the notifier reads the same file.
        yield Stack(stack, keys, link_secret(data_dir), store)


@pytest.fixture
async def anonymous(act_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """No credentials at all: the token is the credential."""
    async with httpx.AsyncClient(base_url=act_stack.stack.url, timeout=30) as client:
        yield client


async def session(s: Stack, sid: str) -> dict:
    r = await s.stack.http.get(f"/api/sessions/{sid}", headers=s.as_("ann"))
    assert r.status_code == 200, r.text
    return r.json()


async def log_lines(s: Stack, sid: str) -> list[dict]:
    r = await s.stack.http.get(f"/api/sessions/{sid}/log", headers=s.as_("ann"))
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines()]


async def waiting_approval(s: Stack, notes: Path) -> tuple[str, dict]:
    r = await s.stack.http.post("/api/sessions", headers=s.as_("ann"), json={
        **demo_body(notes), "rules": [RULE]})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    view = await eventually(lambda: session(s, sid), waiting("approval"),
                            what="the approval request")
    return sid, view["pending"]


def notice_of(sid: str, pending: dict, **changes: object) -> Notice:
    return Notice.model_validate({
        "notice_id": f"{sid}:1", "kind": "opened", "session_id": sid, "seq": 1,
        "at": datetime.now(UTC).isoformat(), "request_id": pending["request_id"],
        "request_kind": pending["kind"], "prompt": pending["prompt"],
        "digest": pending["digest"], "asked": pending.get("asked"), **changes})


def link(s: Stack, n: Notice, who: str | Principal, decision: str = "approve", *,
         now: datetime | None = None, ttl_s: float = 3600) -> str:
    recipient = who if isinstance(who, Principal) else s.principal(who)
    links = links_for(n, recipient, NotifyConfig(link_ttl_s=ttl_s), base_url=s.stack.url,
                      secret=s.secret, now=now or datetime.now(UTC))
    url = links.approve if decision == "approve" else links.reject
    assert url is not None and url.startswith(f"{s.stack.url}/act#t=")
    return url.split("#t=", 1)[1]


def code_of(r: httpx.Response) -> str:
    body = r.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    assert body["error"]["message"], body
    return body["error"]["code"]


async def unchanged(s: Stack, sid: str, pending: dict) -> None:
    """The session still waits for the same request; nobody has answered it."""
    now = await session(s, sid)
    assert now["status"] == "waiting_user" and now["pending"] == pending, now
    assert now["replies"] == 0
    assert not [e for e in await log_lines(s, sid) if e["type"] == "ISSUE_RESOLVED"]


async def both(client: httpx.AsyncClient, token: str) -> tuple[httpx.Response, httpx.Response]:
    return (await client.post("/api/act/inspect", json={"token": token}),
            await client.post("/api/act/decide", json={"token": token}))


async def test_links_that_must_not_decide_say_why_and_change_nothing(
        act_stack: Stack, anonymous: httpx.AsyncClient, tmp_path: Path):
    s = act_stack
    sid, pending = await waiting_approval(s, tmp_path)
    good = link(s, notice_of(sid, pending), "ann")

    # Inspecting the good link shows what it would decide, for whom; it decides nothing.
    r = await anonymous.post("/api/act/inspect", json={"token": good})
    assert r.status_code == 200, r.text
    view = r.json()
    assert (view["session_id"], view["request_id"], view["digest"], view["decision"],
            view["kind"], view["prompt"]) == (sid, pending["request_id"], pending["digest"],
                                              "approve", "approval", pending["prompt"])
    assert view["asked"] == pending["asked"] and view["asked"]["tool"] == "delete_note"
    assert (view["recipient"]["issuer"], view["recipient"]["subject"]) == ("local", "ann")
    assert r.headers["cache-control"] == "no-store"
    for _ in range(2):
        assert (await anonymous.post("/api/act/inspect", json={"token": good})).status_code == 200
    await unchanged(s, sid, pending)

    # A changed claim, another key, a cut token: refused before anything is looked up.
    prefix, body, mac = good.split(".")
    tampered = f"{prefix}.{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}.{mac}"
    foreign = links_for(notice_of(sid, pending), s.principal("ann"), NotifyConfig(),
                        base_url=s.stack.url, secret=b"z" * 32, now=datetime.now(UTC))
    expired = link(s, notice_of(sid, pending), "ann",
                   now=datetime.now(UTC) - timedelta(hours=2), ttl_s=3600)
    changed = link(s, notice_of(sid, pending, digest="sha256:" + "0" * 64), "ann")
    other_request = link(s, notice_of(sid, pending, request_id="req-not-this-one"), "ann")
    viewer = link(s, notice_of(sid, pending), "vic")
    for token, status, code in (
            (tampered, 403, "link_bad_signature"),
            (foreign.approve.split("#t=", 1)[1], 403, "link_bad_signature"),  # type: ignore[union-attr]
            (good[:40], 400, "link_malformed"), ("not-a-token", 400, "link_malformed"),
            (expired, 410, "link_expired"),
            (changed, 409, "request_changed"),
            (other_request, 409, "request_answered"),
            (viewer, 403, "forbidden")):
        for r in await both(anonymous, token):
            assert (r.status_code, code_of(r)) == (status, code), (code, r.text)
    await unchanged(s, sid, pending)
    # The viewer's attempt to decide is recorded like any refused reply (who, which rule).
    async def refused() -> list[tuple[str, str]]:
        return [(e["payload"]["principal"]["subject"], e["payload"]["rule"])
                for e in await log_lines(s, sid) if e["type"] == "interaction.reply.refused"]
    assert await eventually(refused, bool, what="the refusal in the log") == [
        ("vic", "role.approver")]

    # A person removed from people.json: their link no longer decides anything.
    carl = link(s, notice_of(sid, pending), "carl")
    assert (await anonymous.post("/api/act/inspect", json={"token": carl})).status_code == 200
    s.people.remove("carl")
    for r in await both(anonymous, carl):
        assert (r.status_code, code_of(r)) == (403, "forbidden"), r.text
        assert r.json()["error"]["rule"] == "link.recipient"
    # Bodies that are not a token: the usual 415 and 422, nothing looked at.
    for r in (await anonymous.post("/api/act/decide", content=good),
              await anonymous.post("/api/act/decide", json={}),
              await anonymous.post("/api/act/decide", json={"token": good, "approve": False}),
              await anonymous.post("/api/act/decide", json={"token": "x" * 9000})):
        assert r.status_code in (415, 422), r.text
    await unchanged(s, sid, pending)


async def test_the_link_decides_once_as_its_recipient(act_stack: Stack,
                                                      anonymous: httpx.AsyncClient,
                                                      tmp_path: Path):
    s = act_stack
    sid, pending = await waiting_approval(s, tmp_path)
    n = notice_of(sid, pending)
    approve, reject = link(s, n, "ann"), link(s, n, "ann", "reject")
    bob = link(s, n, "bob")  # not one of the rule's approvers
    for r in await both(anonymous, bob):
        assert (r.status_code, code_of(r)) == (403, "forbidden"), r.text

    r = await anonymous.post("/api/act/decide", json={"token": approve})
    assert r.status_code == 200, r.text
    assert (r.json()["session_id"], r.json()["request_id"], r.json()["decision"]) == (
        sid, pending["request_id"], "approve")

    async def resolved() -> list[dict]:
        return [e["payload"] for e in await log_lines(s, sid) if e["type"] == "ISSUE_RESOLVED"
                and e["payload"]["issue_id"] == pending["request_id"]]
    [decision] = await eventually(resolved, bool, what="the decision in the log")
    assert decision["answer"]["approved"] is True and decision["digest"] == pending["digest"]
    assert (decision["principal"]["issuer"], decision["principal"]["subject"]) == (
        "local", "ann")
    assert decision["via"] == "link"
    await eventually(lambda: session(s, sid), waiting("confirm"), what="the next question")
    assert not (tmp_path / "old-draft.note").exists()

    # The same link again, and her other link: used. Nothing changes.
    before = await session(s, sid)
    for token in (approve, reject):
        for r in await both(anonymous, token):
            assert (r.status_code, code_of(r)) == (409, "link_used"), r.text
    after = await session(s, sid)
    assert (after["pending"], after["replies"]) == (before["pending"], before["replies"])
    assert len(await resolved()) == 1


async def test_a_request_answered_in_the_inbox_is_not_a_used_link(act_stack: Stack,
                                                                  anonymous: httpx.AsyncClient,
                                                                  tmp_path: Path):
    s = act_stack
    sid, pending = await waiting_approval(s, tmp_path)
    token = link(s, notice_of(sid, pending), "ann")
    r = await s.stack.http.post(f"/api/sessions/{sid}/reply", headers=s.as_("ann"), json={
        "request_id": pending["request_id"], "digest": pending["digest"], "approve": False})
    assert r.status_code == 202, r.text
    await eventually(lambda: session(s, sid), lambda v: v["pending"] is None
                     or v["pending"]["request_id"] != pending["request_id"],
                     what="the reply in the read model")
    for r in await both(anonymous, token):
        assert (r.status_code, code_of(r)) == (409, "request_answered"), r.text


async def test_the_confirm_page_is_open_and_holds_no_data(anonymous: httpx.AsyncClient):
    r = await anonymous.get("/act")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["referrer-policy"] == "no-referrer"
    assert '<script type="module" src="act.js"></script>' in r.text
    js = await anonymous.get("/act.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "api/act/inspect" in js.text and "api/act/decide" in js.text
    # Opening it decides nothing: it is a GET of a static page, and the API's decide is
    # POST only, with a JSON body.
    assert (await anonymous.get("/api/act/decide")).status_code == 405
    r = await anonymous.post("/api/act/decide", data={"token": "x"})
    assert r.status_code == 415


async def test_two_approvals_one_link_each(act_stack: Stack, anonymous: httpx.AsyncClient,
                                           tmp_path: Path):
    """Two approvals needed: Ann's link records hers (the request stays open, and her
    link is used); Bob's link then decides it."""
    s = act_stack
    r = await s.stack.http.post("/api/sessions", headers=s.as_("ann"), json={
        **demo_body(tmp_path), "people": {"viewers": ["bob"]}, "rules": [
            {"name": "two", "tool": "delete_*", "approvers": ["ann", "bob"],
             "approvals_required": 2}]})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    pending = (await eventually(lambda: session(s, sid), waiting("approval"),
                                what="the approval request"))["pending"]
    n = notice_of(sid, pending)
    ann, bob = link(s, n, "ann"), link(s, n, "bob")
    r = await anonymous.post("/api/act/decide", json={"token": ann})
    assert r.status_code == 200, r.text
    now = await session(s, sid)
    assert now["status"] == "waiting_user" and now["pending"]["request_id"] == \
        pending["request_id"]
    assert [a["subject"] for a in now["pending"]["approvals"]] == ["ann"]

    async def used() -> httpx.Response:
        return await anonymous.post("/api/act/inspect", json={"token": ann})
    r = await eventually(used, lambda r: r.status_code == 409, what="her link used")
    assert code_of(r) == "link_used"
    r = await anonymous.post("/api/act/decide", json={"token": ann})
    assert (r.status_code, code_of(r)) == (409, "link_used")
    assert (await session(s, sid))["pending"]["approvals"] == now["pending"]["approvals"]
    r = await anonymous.post("/api/act/decide", json={"token": bob})
    assert r.status_code == 200, r.text
    await eventually(lambda: session(s, sid), waiting("confirm"), what="the next question")
