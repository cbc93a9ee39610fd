"""Edit before approve and "approve, and do not ask again" (issue 24, parts 4 and 6),
end to end over HTTP on the stack ``hitlflow up`` runs (a worker, the exporter, the read
model, the API with its real doors), with people added by ``hitlflow people add`` and
the demo notes MCP server, which records every call it carries out (``.calls.log``).

* Edit: an approver answers an editable request with other arguments; the edited call
  is the one that runs, once; the log's ISSUE_RESOLVED has both digests and the
  editor. Arguments that fail the tool's input schema are a 422 with the schema's
  error; arguments for a request that is not editable are a 403 naming ``editable``;
  either changes nothing.
* Standing decisions: after an approval with ``remember``, the next matching call runs
  without a request and its log line names the standing decision and its author; a
  call with other arguments still asks; once an operator revokes it, the same call
  asks again.
* The same through ``hitlflow session reply --remember`` and ``--arguments``.
* The inbox in Chromium: the approver edits the arguments and approves; the log names
  both digests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from api.cli.demo_config import notes_server
from api.cli.main import app as cli
from tests.api.http_support import HttpStack, eventually, stack_settings
from tests.api.test_who_decides import up_like_stack
from tests.support.inbox_browser import Pages
from workflows.decisions import asked_tool_call
from workflows.people import digest_of

TOKEN = "edit-and-standing-api-token"
#: Deletes of drafts may be edited by Ann; any other delete is Ann's to answer as asked.
EDIT_RULES = [
    {"name": "draft-deletes", "tool": "delete_note", "arguments": {"name": "draft-*"},
     "editable": True, "approvers": ["ann"]},
    {"name": "note-deletes", "tool": "delete_*", "approvers": ["ann"]},
]
#: Writes (reversible) are asked too, so that the same call can come again.
ASK_WRITES = {"name": "writes", "tool": "write_note", "decision": "ask", "approvers": ["ann"]}
DONE = {"text": "done", "end": True}


@dataclass
class Stack:
    stack: HttpStack
    keys: dict[str, str]  # ann (approver), vic (viewer), ops (operator) -> their key

    def as_(self, who: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.keys[who]}"}

    @property
    def http(self) -> httpx.AsyncClient:
        return self.stack.http


@pytest.fixture(scope="module")
async def up(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
             tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    data_dir = tmp_path_factory.mktemp("edit-standing")
    keys = {}
    for name, role in (("ann", "approver"), ("vic", "viewer"), ("ops", "operator")):
        out = CliRunner().invoke(cli, ["people", "add", name, "--role", role,
                                       "--data-dir", str(data_dir)])
        assert out.exit_code == 0, out.output
        keys[name] = out.stdout.strip().splitlines()[-1]
    settings = stack_settings(dev_env.client, data_dir, "edit-standing", TOKEN).model_copy(
        update={"auth_mode": "local"})
    async with up_like_stack(dev_env.client, settings, free_port()) as stack:
        yield Stack(stack=stack, keys=keys)


# -- helpers ------------------------------------------------------------------------------


def delete(name: str) -> dict:
    return {"tool": "delete_note", "arguments": {"name": name}}


def write(name: str, content: str) -> dict:
    return {"tool": "write_note", "arguments": {"name": name, "content": content}}


def says(*calls: dict) -> dict:
    """One scripted model answer: these tool calls."""
    return {"tool_calls": list(calls)}


def notes_dir(tmp_path: Path, *names: str) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    for name in names:
        (notes / f"{name}.note").write_text("x")
    return notes


def calls(notes: Path) -> list[tuple[str, dict]]:
    """What the notes server carried out, in order (its own record)."""
    log = notes / ".calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(c["tool"], c["arguments"]) for c in map(json.loads, lines)]


async def start(up: Stack, notes: Path, responses: list[dict], rules: list[dict]) -> str:
    """A session Ann starts (she owns it), Vic may watch."""
    r = await up.http.post("/api/sessions", headers=up.as_("ann"), json={
        "initial_message": "tidy my notes", "people": {"viewers": ["vic"]}, "rules": rules,
        "agent": {"llm": {"provider": "scripted", "responses": responses},
                  "tools": [notes_server(notes)]}})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


async def session(up: Stack, sid: str, who: str = "ann", **params: str) -> dict:
    r = await up.http.get(f"/api/sessions/{sid}", headers=up.as_(who), params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def asked(up: Stack, sid: str, call: str) -> dict:
    """The pending approval, once it asks about ``call`` (as its prompt words it)."""
    s = await eventually(lambda: session(up, sid), lambda s: s["status"] == "waiting_user"
                         and call in ((s["pending"] or {}).get("prompt") or ""),
                         what=f"asked about {call}")
    return s["pending"]


async def ended(up: Stack, sid: str) -> dict:
    return await eventually(lambda: session(up, sid), lambda s: s["status"] == "succeeded",
                            what="the session's end")


async def log_of(up: Stack, sid: str) -> list[dict]:
    r = await up.http.get(f"/api/sessions/{sid}/log", headers=up.as_("ann"))
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines()]


def of(lines: list[dict], kind: str) -> list[dict]:
    return [e["payload"] for e in lines if e["type"] == kind]


async def reply(up: Stack, sid: str, pending: dict, who: str = "ann",
                **answer: object) -> httpx.Response:
    return await up.http.post(f"/api/sessions/{sid}/reply", headers=up.as_(who), json={
        "request_id": pending["request_id"], "digest": pending["digest"], **answer})


def error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


async def unchanged(up: Stack, sid: str, pending: dict, notes: Path,
                    ran: list[tuple[str, dict]]) -> None:
    """Still waiting for the same request, and nothing more ran."""
    now = await session(up, sid)
    assert now["status"] == "waiting_user" and now["pending"] == pending
    assert calls(notes) == ran


def ref(who: str) -> dict:
    return {"issuer": "local", "subject": who, "name": who}


def prompt_of(tool: str, **arguments: str) -> str:
    """How a request's prompt words a call (its arguments by name)."""
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(arguments.items()))
    return f"Call tool {tool}({args}) on notes"


# -- edit before approve --------------------------------------------------------------------


async def test_the_edited_call_runs_once_and_the_log_has_both_digests(up: Stack,
                                                                       tmp_path: Path):
    notes = notes_dir(tmp_path, "keep", "draft-asked", "draft-edited")
    sid = await start(up, notes, [says(delete("keep")), says(delete("draft-asked")), DONE],
                      EDIT_RULES)

    # A request its rule does not make editable: arguments are a 403 naming `editable`.
    plain = await asked(up, sid, prompt_of("delete_note", name="keep"))
    assert plain["rule"] == "note-deletes" and plain["editable"] is False
    refused = error(await reply(up, sid, plain, approve=True,
                                arguments={"name": "draft-asked"}), 403)
    assert (refused["code"], refused["rule"]) == ("forbidden", "editable")
    await unchanged(up, sid, plain, notes, [])
    r = await reply(up, sid, plain, approve=False)
    assert r.status_code == 202, r.text

    # An editable one: what it asks, and the tool's schema that edits must meet.
    pending = await asked(up, sid, prompt_of("delete_note", name="draft-asked"))
    assert (pending["rule"], pending["editable"]) == ("draft-deletes", True)
    as_asked = asked_tool_call("notes", "delete_note", {"name": "draft-asked"})
    assert pending["digest"] == digest_of(as_asked)

    # Broken edits: each refused with what is wrong, and nothing changes.
    bad = error(await reply(up, sid, pending, approve=True, arguments={"name": 7}), 422)
    assert (bad["code"], bad["errors"]) == ("invalid_arguments",
                                            ["name: 7 is not of type 'string'"])
    assert "input schema" in bad["message"]
    missing = error(await reply(up, sid, pending, approve=True, arguments={}), 422)
    assert missing["errors"] == ["'name' is a required property"]
    rejecting = error(await reply(up, sid, pending, approve=False,
                                  arguments={"name": "draft-edited"}), 422)
    assert rejecting["code"] == "invalid_arguments"
    not_object = error(await reply(up, sid, pending, approve=True,
                                   arguments=["draft-edited"]), 422)
    assert not_object["code"] == "validation_error"
    # Vic may not answer at all, edited or not.
    vic = error(await reply(up, sid, pending, "vic", approve=True,
                            arguments={"name": "draft-edited"}), 403)
    assert vic["rule"] == "role.approver"
    await unchanged(up, sid, pending, notes, [])

    # Ann edits and approves: the edited call is the one that runs, once.
    r = await reply(up, sid, pending, approve=True, arguments={"name": "draft-edited"},
                    by="mallory")
    assert r.status_code == 202, r.text
    await ended(up, sid)
    assert calls(notes) == [("delete_note", {"name": "draft-edited"})]
    assert (notes / "draft-asked.note").exists() and (notes / "keep.note").exists()
    assert not (notes / "draft-edited.note").exists()

    lines = await log_of(up, sid)
    rejected, approved = of(lines, "ISSUE_RESOLVED")
    assert "edited_digest" not in rejected
    edited = asked_tool_call("notes", "delete_note", {"name": "draft-edited"})
    assert (approved["issue_id"], approved["digest"], approved["edited_digest"]) == (
        pending["request_id"], pending["digest"], digest_of(edited))
    assert approved["edited_by"] == approved["principal"] == ref("ann")
    assert "mallory" not in json.dumps(approved)
    started = [e for e in of(lines, "TOOL_CALL_STARTED") if e.get("tool") == "delete_note"]
    assert [e["arguments"] for e in started] == [{"name": "draft-edited"}]
    # The refused attempts are in the log, with who and the rule (not the 422s: they
    # are the input's fault, not an act someone may not do).
    assert [(x["principal"]["subject"], x["rule"]) for x in
            of(lines, "interaction.reply.refused")] == [("ann", "editable"),
                                                        ("vic", "role.approver")]


# -- standing decisions ------------------------------------------------------------------


async def test_a_standing_decision_decides_until_an_operator_revokes_it(up: Stack,
                                                                         tmp_path: Path):
    """Ann approves a delete with `remember: "tool"` and a write with `remember:
    "arguments"`. (An irreversible call that completed never runs again with the same
    arguments in a session, standing decision or not: `arguments` is shown with a
    reversible write the agent may repeat.)"""
    notes = notes_dir(tmp_path, "b", "c", "d")
    w1, w2 = write("w", "1"), write("w", "2")
    sid = await start(up, notes, [
        says(delete("b")), says(delete("c")), says(w1), says(w1), says(w2), says(w1),
        says(delete("d")), DONE], [ASK_WRITES])

    first = await asked(up, sid, prompt_of("delete_note", name="b"))
    # Broken or not allowed: a `remember` the API does not know, Vic's; nothing changes.
    unknown = error(await reply(up, sid, first, approve=True, remember="always"), 422)
    assert unknown["code"] == "validation_error" and "remember" in unknown["message"]
    vic = error(await reply(up, sid, first, "vic", approve=True, remember="tool"), 403)
    assert vic["rule"] == "role.approver"
    await unchanged(up, sid, first, notes, [])
    r = await reply(up, sid, first, approve=True, remember="tool")
    assert r.status_code == 202, r.text

    # delete c runs without a request; the write asks (a rule says so).
    second = await asked(up, sid, prompt_of("write_note", name="w", content="1"))
    assert calls(notes) == [("delete_note", {"name": "b"}), ("delete_note", {"name": "c"})]
    r = await reply(up, sid, second, approve=True, remember="arguments")
    assert r.status_code == 202, r.text

    # The same write again runs unasked; one with other arguments asks.
    third = await asked(up, sid, prompt_of("write_note", name="w", content="2"))
    # The second write ran without a request (started and succeeded, never suspended).
    # The server carried it out once: the repeated call has the same idempotency key,
    # and the notes server answers a key it knows with its first result.
    writes = [(c["action_summary"], c["current_status"], c["transition_count"])
              for c in (await session(up, sid))["contracts"]
              if c["action_summary"].startswith("Call tool write_note")]
    assert writes == [(prompt_of("write_note", name="w", content="1"), "completed", 4),
                      (prompt_of("write_note", name="w", content="1"), "completed", 2),
                      (prompt_of("write_note", name="w", content="2"), "waiting", 2)]
    assert calls(notes)[2:] == [("write_note", w1["arguments"])]
    r = await up.http.get(f"/api/sessions/{sid}/standing", headers=up.as_("vic"))
    assert r.status_code == 200, r.text
    held = r.json()["standing"]
    assert [(s["standing_id"], s["tool"], s["arguments"], s["set_by"]["subject"],
             s["request_id"]) for s in held] == [
        (f"sd-{first['request_id']}", "delete_note", None, "ann", first["request_id"]),
        (f"sd-{second['request_id']}", "write_note", w1["arguments"], "ann",
         second["request_id"])]
    by_arguments = held[1]["standing_id"]

    # Revoking is an operator's: Ann's is a 403 (recorded), an unknown id a 404.
    path = f"/api/sessions/{sid}/standing/{by_arguments}"
    mine = error(await up.http.delete(path, headers={**up.as_("ann"),
                                                     "content-type": "application/json"}),
                 403)
    assert mine["rule"] == "role.operator"
    nope = error(await up.http.delete(f"/api/sessions/{sid}/standing/sd-nope", headers={
        **up.as_("ops"), "content-type": "application/json"}), 404)
    assert nope["code"] == "standing_not_found"
    await unchanged(up, sid, third, notes, calls(notes))
    r = await up.http.delete(path, headers={**up.as_("ops"),
                                            "content-type": "application/json"})
    assert r.status_code == 202, r.text
    r = await up.http.get(f"/api/sessions/{sid}/standing", headers=up.as_("ann"))
    assert [s["standing_id"] for s in r.json()["standing"]] == [held[0]["standing_id"]]
    r = await reply(up, sid, third, approve=True)
    assert r.status_code == 202, r.text

    # Revoked: the same write asks again. The delete's standing decision still holds.
    again = await asked(up, sid, prompt_of("write_note", name="w", content="1"))
    assert again["request_id"] != second["request_id"]
    assert again["digest"] == second["digest"]  # the same call, asked again
    r = await reply(up, sid, again, approve=True)
    assert r.status_code == 202, r.text
    await ended(up, sid)
    assert calls(notes) == [
        ("delete_note", {"name": "b"}), ("delete_note", {"name": "c"}),
        ("write_note", w1["arguments"]), ("write_note", w2["arguments"]),
        ("delete_note", {"name": "d"})]
    assert not any((notes / f"{n}.note").exists() for n in "bcd")

    lines = await log_of(up, sid)
    resolved = of(lines, "ISSUE_RESOLVED")
    unasked = [r for r in resolved if r["resolution"] == "decided_by_standing"]
    ann = ref("ann")
    assert [(r["standing_id"], r["standing_set_by"], r["by"]) for r in unasked] == [
        (held[0]["standing_id"], ann, f"standing decision {held[0]['standing_id']} of ann"),
        (by_arguments, ann, f"standing decision {by_arguments} of ann"),
        (held[0]["standing_id"], ann, f"standing decision {held[0]['standing_id']} of ann")]
    assert [r["digest"] for r in unasked] == [digest_of(asked_tool_call("notes", c["tool"],
                                                                        c["arguments"]))
                                              for c in (delete("c"), w1, delete("d"))]
    assert [r["standing_decision"]["standing_id"] for r in resolved
            if "standing_decision" in r] == [held[0]["standing_id"], by_arguments]
    (revoked,) = of(lines, "STANDING_DECISION_REVOKED")
    assert (revoked["standing_id"], revoked["revoked_by"]["subject"],
            revoked["set_by"]) == (by_arguments, "ops", ann)
    assert [(x["principal"]["subject"], x["action"], x["rule"]) for x in
            of(lines, "interaction.reply.refused")] == [
        ("vic", "reply", "role.approver"), ("ann", "revoke_standing", "role.operator")]


# -- the same from the command line -----------------------------------------------------------


async def hitlflow(up: Stack, who: str, *args: str) -> Result:
    """The CLI, signed in as ``who`` (their key), told where the API is."""
    env = {"HITLFLOW_API_URL": up.stack.url, "HITLFLOW_API_TOKEN": up.keys[who],
           "COLUMNS": "200", "NO_COLOR": "1", "HITLFLOW_API_PORT": None,
           "HITLFLOW_DATA_DIR": None}
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)


async def test_the_cli_replies_remember_tool(up: Stack, tmp_path: Path):
    notes = notes_dir(tmp_path, "b", "c")
    sid = await start(up, notes, [says(delete("b")), says(delete("c")), DONE], [])
    pending = await asked(up, sid, prompt_of("delete_note", name="b"))
    out = await hitlflow(up, "ann", "session", "reply", sid, "--approve", "--remember", "tool")
    assert out.exit_code == 0, out.output
    assert f"reply to {pending['request_id']} accepted" in out.output
    await ended(up, sid)  # delete c was not asked
    assert calls(notes) == [("delete_note", {"name": "b"}), ("delete_note", {"name": "c"})]
    standing = await hitlflow(up, "vic", "session", "standing", sid)
    assert standing.exit_code == 0, standing.output
    assert standing.output.startswith(
        f"sd-{pending['request_id']}  delete_note  any arguments  set by ann on "
        f"{pending['request_id']} at ")
    [unasked] = [r for r in of(await log_of(up, sid), "ISSUE_RESOLVED")
                 if r["resolution"] == "decided_by_standing"]
    assert unasked["standing_set_by"] == ref("ann")


async def test_the_cli_replies_with_edited_arguments(up: Stack, tmp_path: Path):
    notes = notes_dir(tmp_path, "draft-a", "draft-b")
    sid = await start(up, notes, [says(delete("draft-a")), DONE], EDIT_RULES)
    pending = await asked(up, sid, prompt_of("delete_note", name="draft-a"))
    bad = await hitlflow(up, "ann", "session", "reply", sid, "--approve",
                         "--arguments", '{"name": 7}')
    assert bad.exit_code == 1, bad.output
    assert "error: invalid_arguments: " in bad.output
    assert "name: 7 is not of type 'string'" in bad.output
    await unchanged(up, sid, pending, notes, [])
    out = await hitlflow(up, "ann", "session", "reply", sid, "--approve",
                         "--arguments", '{"name": "draft-b"}')
    assert out.exit_code == 0, out.output
    await ended(up, sid)
    assert calls(notes) == [("delete_note", {"name": "draft-b"})]
    (resolved,) = of(await log_of(up, sid), "ISSUE_RESOLVED")
    assert (resolved["digest"], resolved["edited_digest"]) == (
        pending["digest"],
        digest_of(asked_tool_call("notes", "delete_note", {"name": "draft-b"})))


# -- in the inbox ---------------------------------------------------------------------------


#: The inbox pages of these tests are taller (the edit form).
INBOX_VIEWPORT_HEIGHT = 900


async def signed_in(up: Stack, pages: Pages, who: str, sid: str):
    """Ann's page of the session (signed in with the link ``up`` prints), and the
    bodies of the replies it sends."""
    from playwright.async_api import expect

    page = await pages.new(f"{who}-{sid}")
    sent: list[dict] = []
    page.on("request", lambda q: sent.append(json.loads(q.post_data or "{}"))
            if q.url.endswith("/reply") else None)
    await page.goto(f"{up.stack.url}/#key={up.keys[who]}")
    await expect(page.locator("#who")).to_contain_text("signed in as")
    await page.goto(f"{up.stack.url}/#/s/{sid}")
    await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
    return page, sent


@pytest.mark.browser
async def test_the_inbox_edits_before_approving(up: Stack, pages: Pages, tmp_path: Path):
    """The approver sees the arguments asked, prefilled; what is not JSON is said in
    place and not sent; the API's 422 lists the schema's errors under them; the edited
    call is approved, runs, and the log names both digests."""
    from playwright.async_api import expect

    notes = notes_dir(tmp_path, "draft-asked", "draft-edited")
    sid = await start(up, notes, [says(delete("draft-asked")), DONE], EDIT_RULES)
    pending = await asked(up, sid, prompt_of("delete_note", name="draft-asked"))
    page, sent = await signed_in(up, pages, "ann", sid)
    editor = page.get_by_label("Arguments (JSON)")
    await expect(editor).to_have_value('{\n  "name": "draft-asked"\n}')
    errors = page.locator("#arguments-errors li")

    await editor.fill('{"name": ')  # not JSON: said here, nothing sent
    await page.get_by_role("button", name="Approve").click()
    await expect(errors).to_have_count(1)
    await expect(errors).to_contain_text("the arguments are not JSON")
    await expect(editor).to_have_attribute("aria-invalid", "true")
    await editor.fill('["draft-edited"]')
    await page.get_by_role("button", name="Approve").click()
    await expect(errors).to_have_text(["the arguments must be a JSON object ({...})"])
    assert sent == []

    await editor.fill('{"name": 7}')  # JSON, but not what the tool takes: the API's 422
    async with page.expect_response(lambda r: r.url.endswith("/reply")) as answer:
        await page.get_by_role("button", name="Approve").click()
    assert (await answer.value).status == 422
    await expect(errors).to_have_text(["name: 7 is not of type 'string'"])
    await expect(page.get_by_role("alert")).to_contain_text(
        "Not sent: the edited arguments do not meet the tool's input schema")
    await expect(editor).to_have_value('{"name": 7}')  # kept, to be corrected
    await page.evaluate("window.scrollTo(0, 0)")
    await pages.picture(page, "inbox-edit")  # docs/inbox-edit.png
    await unchanged(up, sid, pending, notes, [])

    await editor.fill('{"name": "draft-edited"}')
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("heading", name="Nothing waits for you")).to_be_visible()
    assert sent[-1] == {"request_id": pending["request_id"], "digest": pending["digest"],
                        "approve": True, "arguments": {"name": "draft-edited"}}
    assert [s.get("arguments") for s in sent] == [{"name": 7}, {"name": "draft-edited"}]
    edit_line = page.locator("#conversation li", has_text="Edited by ann")
    await expect(edit_line).to_contain_text(
        'approved with other arguments: {"name":"draft-edited"}')
    await ended(up, sid)
    assert calls(notes) == [("delete_note", {"name": "draft-edited"})]
    (resolved,) = of(await log_of(up, sid), "ISSUE_RESOLVED")
    edited = asked_tool_call("notes", "delete_note", {"name": "draft-edited"})
    assert (resolved["digest"], resolved["edited_digest"], resolved["edited_by"]) == (
        pending["digest"], digest_of(edited), ref("ann"))


@pytest.mark.browser
async def test_the_inbox_approves_and_does_not_ask_again(up: Stack, pages: Pages,
                                                         tmp_path: Path):
    """"Do not ask again for this tool": the next delete runs without a request. An
    editable request approved as asked sends no arguments; one that needs two approvers
    offers no "do not ask again"."""
    from playwright.async_api import expect

    notes = notes_dir(tmp_path, "b", "c")
    sid = await start(up, notes, [says(delete("b")), says(delete("c")), {
        "ecs_request": {"kind": "confirm", "prompt": "Anything else?"}}, DONE], [])
    pending = await asked(up, sid, prompt_of("delete_note", name="b"))
    page, sent = await signed_in(up, pages, "ann", sid)
    await expect(page.get_by_label("Arguments (JSON)")).to_have_count(0)  # not editable
    only_these = page.get_by_label("only when it is called with these arguments")
    await expect(only_these).to_be_disabled()
    await page.get_by_label(
        "Approve, and do not ask again for delete_note in this session").check()
    await expect(only_these).to_be_enabled()
    await page.get_by_role("button", name="Approve").click()
    # (not "Nothing waits for you": the agent may reach its next request before the
    # page reads the state in between)
    conversation = page.locator("#conversation")
    await expect(conversation.locator("li", has_text="Do not ask again")).to_have_text(
        f"Do not ask again delete_note with any arguments in this session "
        f"(sd-{pending['request_id']}, set by ann)")
    assert sent == [{"request_id": pending["request_id"], "digest": pending["digest"],
                     "approve": True, "remember": "tool"}]
    await expect(conversation.locator("li", has_text="Not asked")).to_have_text(
        f"Not asked allowed by standing decision sd-{pending['request_id']} of ann")
    await expect(page.locator("#prompt")).to_have_text("Anything else?")
    assert calls(notes) == [("delete_note", {"name": "b"}), ("delete_note", {"name": "c"})]
    r = await up.http.get(f"/api/sessions/{sid}/standing", headers=up.as_("ann"))
    assert [(s["tool"], s["arguments"]) for s in r.json()["standing"]] == [
        ("delete_note", None)]
    # An operator revokes it: the page says so, live.
    r = await up.http.delete(f"/api/sessions/{sid}/standing/sd-{pending['request_id']}",
                             headers={**up.as_("ops"), "content-type": "application/json"})
    assert r.status_code == 202, r.text
    await expect(conversation.locator("li", has_text="Revoked")).to_have_text(
        f"Revoked standing decision sd-{pending['request_id']} (delete_note, set by ann) "
        "by ops")
    await page.get_by_role("button", name="No").click()
    await ended(up, sid)

    two = {"name": "two", "tool": "delete_note", "approvers": ["ann", "ops"],
           "approvals_required": 2, "editable": True}
    notes2 = tmp_path / "two"
    notes2.mkdir()
    (notes2 / "e.note").write_text("x")
    sid = await start(up, notes2, [says(delete("e")), DONE], [two])
    pending = await asked(up, sid, prompt_of("delete_note", name="e"))
    page, sent = await signed_in(up, pages, "ann", sid)
    await expect(page.get_by_label("Arguments (JSON)")).to_have_value(
        '{\n  "name": "e"\n}')
    await expect(page.locator("#do-not-ask")).to_have_count(0)
    await page.get_by_label("Arguments (JSON)").fill('{ "name" : "e" }')  # the same
    await page.get_by_role("button", name="Approve").click()
    await expect(page.locator("#approvals")).to_contain_text("(1 of 2)")
    assert sent == [{"request_id": pending["request_id"], "digest": pending["digest"],
                     "approve": True}]
    r = await reply(up, sid, pending, "ops", approve=True)
    assert r.status_code == 202, r.text
    await ended(up, sid)
    assert calls(notes2) == [("delete_note", {"name": "e"})]
