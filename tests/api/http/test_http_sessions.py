"""Sessions over real HTTP against the real dev server and a real worker."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from api.http.app import create_app
from api.http.deps import ApiTuning
from tests.api.http_support import (
    AUTH,
    HttpStack,
    chat_body,
    confirm_body,
    demo_body,
    error_of,
    listed,
    serve,
    session_until,
    waiting,
)
from tests.support.sessions import running_exporter
from workflows.config import SessionConfig
from workflows.messages import SessionInput


async def history_length(stack: HttpStack, sid: str) -> int:
    desc = await stack.client.get_workflow_handle(sid).describe()
    return desc.raw_description.workflow_execution_info.history_length


async def test_demo_session_driven_through_http(http_stack: HttpStack, http_notes_dir: Path):
    http = http_stack.http
    r = await http.post("/api/sessions", json=demo_body(http_notes_dir))
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    assert r.json() == {"session_id": sid, "status": "queued"}
    assert r.headers["location"] == f"/api/sessions/{sid}"

    s = await session_until(http, sid, waiting("approval"))
    assert s["live"] is False and s["mode"] == "interactive"  # from the read model
    assert s["seq"] > 0 and s["journal_seq"] > 0
    assert s["pending"]["prompt"].startswith("Approve irreversible action: Call tool delete_note")
    assert [c["current_status"] for c in s["contracts"]] == ["completed", "completed", "waiting"]
    assert await listed(http, sid, "waiting_user")

    # A stale reply (it names another request) is refused and changes nothing.
    before, events = s, await history_length(http_stack, sid)
    changes = (await http.get(f"/api/sessions/{sid}/history")).json()
    r = await http.post(f"/api/sessions/{sid}/reply",
                        json={"request_id": "an-old-request", "approve": True})
    assert r.status_code == 409
    assert error_of(r) == {"code": "reply_refused", "message": "reply names request "
                           f"'an-old-request', but the pending request is "
                           f"'{before['pending']['request_id']}'"}
    after = (await http.get(f"/api/sessions/{sid}")).json()
    assert {k: after[k] for k in ("status", "pending", "replies")} == \
        {k: before[k] for k in ("status", "pending", "replies")}
    assert (await http.get(f"/api/sessions/{sid}/history")).json() == changes
    assert await history_length(http_stack, sid) == events  # it never reached history

    r = await http.post(f"/api/sessions/{sid}/reply",
                        json={"request_id": before["pending"]["request_id"], "approve": True})
    assert r.status_code == 202, r.text
    written = r.json()["journal_seq"]
    assert written > before["journal_seq"]
    assert r.json() == {"session_id": sid, "accepted": True, "journal_seq": written,
                        "request_id": before["pending"]["request_id"], "status": "waiting_user"}
    # Read your write: the read model waits (briefly) until it reflects the reply.
    r = await http.get(f"/api/sessions/{sid}", params={"min_journal_seq": written})
    assert r.status_code == 200 and "x-hitlflow-stale" not in r.headers
    assert r.json()["replies"] == 1 and r.json()["journal_seq"] >= written
    assert int(r.headers["x-hitlflow-seq"]) == r.json()["seq"]

    s = await session_until(http, sid, waiting("confirm"))
    r = await http.post(f"/api/sessions/{sid}/reply",
                        json={"request_id": s["pending"]["request_id"], "approve": True,
                              "comment": "yes please", "by": "alice"})
    assert r.status_code == 202, r.text
    s = await session_until(http, sid, lambda s: s["status"] == "succeeded")
    assert s["pending"] is None and s["replies"] == 2
    assert s["last_text"] == "Done: groceries saved, the old draft deleted."
    assert [c["current_status"] for c in s["contracts"]] == ["completed"] * 5
    assert (http_notes_dir / "groceries.note").read_text() == "milk, eggs"
    assert await listed(http, sid, "succeeded")

    # Nothing is pending any more: 409, with the validator's words.
    r = await http.post(f"/api/sessions/{sid}/reply", json={"request_id": "x", "approve": True})
    assert r.status_code == 409
    assert error_of(r)["message"] == "nothing is pending: the session is succeeded"
    r = await http.post(f"/api/sessions/{sid}/cancel", json={})
    assert r.status_code == 409 and error_of(r)["code"] == "session_closed"

    # The observation endpoints agree with the session.
    t = (await http.get(f"/api/execution/{sid}/timeline")).json()
    assert (t["total_contracts"], t["terminal_contracts"], t["active_contracts"]) == (5, 5, 0)
    assert t["has_suspended"] is True  # seed 000: a contract was suspended (it ended since)
    assert [c["execution_id"] for c in t["contracts"]] == \
        [c["execution_id"] for c in s["contracts"]]
    stamps = [tr["timestamp"] for tr in t["transitions"]]
    assert stamps == sorted(stamps) and len(stamps) >= 10
    for c in s["contracts"]:
        r = await http.get(f"/api/execution/{c['execution_id']}/snapshot")
        assert r.status_code == 200 and r.json()["execution_id"] == c["execution_id"]
        assert r.json()["is_terminal"] is True
    deleted = next(c for c in s["contracts"] if "delete_note" in c["action_summary"])
    snap = (await http.get(f"/api/execution/{deleted['execution_id']}/snapshot")).json()
    assert snap["irreversible"] and snap["has_side_effects"]
    assert snap["current_status"] == "completed" and snap["last_trigger"] == "succeed"


async def test_a_new_session_is_queued_and_listed_before_any_worker_runs(
    http_stack: HttpStack, free_port
):
    settings = http_stack.settings.model_copy(
        update={"task_queue": f"tq-nobody-{uuid.uuid4().hex[:6]}"})
    app = create_app(settings, http_stack.client, tuning=ApiTuning(query_timeout_s=0.5,
                                                                   update_timeout_s=0.5))
    sid = f"queued-{uuid.uuid4().hex[:8]}"
    async with serve(app, free_port()) as server, \
            running_exporter(http_stack.client, settings.data_dir, settings.task_queue), \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
        r = await http.post("/api/sessions", params={"session_id": sid}, json=confirm_body())
        assert r.status_code == 201 and r.json() == {"session_id": sid, "status": "queued"}
        assert await listed(http, sid, "queued")
        # No worker answers: the session is shown from Temporal's record alone.
        r = await http.get(f"/api/sessions/{sid}")
        assert r.status_code == 200
        assert r.json()["live"] is False and r.json()["status"] == "queued"
        assert r.json()["execution_status"] == "running"
        r = await http.post(f"/api/sessions/{sid}/reply", json={"request_id": "x"})
        assert r.status_code == 503 and error_of(r)["code"] == "worker_unavailable"
        # The same id again: 409, ids are never reused.
        r = await http.post("/api/sessions", params={"session_id": sid}, json=confirm_body())
        assert r.status_code == 409 and error_of(r)["code"] == "session_exists"
        r = await http.post(f"/api/sessions/{sid}/cancel", json={})
        assert r.status_code == 202 and r.json()["status"] == "queued"
    await http_stack.client.get_workflow_handle(sid).terminate("test cleanup")


async def test_messages_start_a_turn_and_end_finishes(http_stack: HttpStack):
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=chat_body())).json()["session_id"]
    s = await session_until(http, sid, waiting("message"))
    assert s["last_text"] == "hello, what next?"
    r = await http.post(f"/api/sessions/{sid}/end", json={})
    assert r.status_code == 202 and r.json()["status"] == "waiting_user"
    s = await session_until(http, sid, lambda s: s["status"] == "succeeded")
    r = await http.post(f"/api/sessions/{sid}/messages", json={"text": "too late"})
    assert r.status_code == 409 and error_of(r)["code"] == "message_refused"
    r = await http.post(f"/api/sessions/{sid}/end", json={"reason": "again"})
    assert r.status_code == 409 and error_of(r)["code"] == "end_refused"

    sid = (await http.post("/api/sessions", json=chat_body())).json()["session_id"]
    await session_until(http, sid, waiting("message"))
    r = await http.post(f"/api/sessions/{sid}/messages", json={"text": "tell me more"})
    assert r.status_code == 202, r.text
    s = await session_until(http, sid, lambda s: s["status"] == "succeeded")
    assert s["last_text"] == "bye" and s["turns"] == 2


async def test_cancel_a_waiting_session(http_stack: HttpStack):
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    await session_until(http, sid, waiting("confirm"))
    r = await http.post(f"/api/sessions/{sid}/cancel", json={})
    assert r.status_code == 202 and r.json() == {
        "session_id": sid, "accepted": True, "request_id": None, "status": "waiting_user",
        "journal_seq": None, "cancellation": "requested"}
    s = await session_until(http, sid, lambda s: s["status"] == "canceled")
    assert [c["current_status"] for c in s["contracts"]] == ["cancelled"]
    assert await listed(http, sid, "canceled")
    r = await http.post(f"/api/sessions/{sid}/cancel", json={})
    assert r.status_code == 409
    assert error_of(r)["message"] == "the session already ended: it is canceled"


async def test_malformed_replies_are_refused_and_change_nothing(http_stack: HttpStack):
    http = http_stack.http
    body = {**confirm_body(), "title": "malformed"}
    body["agent"]["llm"]["responses"][0] = {"ecs_request": {
        "kind": "choose", "prompt": "which?", "options": ["a", "b"]}}
    sid = (await http.post("/api/sessions", json=body)).json()["session_id"]
    s = await session_until(http, sid, waiting("choose"))
    rid = s["pending"]["request_id"]
    for reply in ({"request_id": rid, "choice": "c"}, {"request_id": rid, "approve": True}):
        r = await http.post(f"/api/sessions/{sid}/reply", json=reply)
        assert r.status_code == 409, r.text
        assert error_of(r)["code"] == "reply_refused"
    assert (await http.get(f"/api/sessions/{sid}")).json()["replies"] == 0
    r = await http.post(f"/api/sessions/{sid}/reply", json={"request_id": rid, "choice": "b"})
    assert r.status_code == 202
    await session_until(http, sid, lambda s: s["status"] == "succeeded")


async def test_plan_step_actions_on_an_agent_session(http_stack: HttpStack):
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    await session_until(http, sid, waiting("confirm"))
    for action in ("approve", "skip", "reset"):
        r = await http.post(f"/api/sessions/{sid}/steps/0/{action}", json={"by": "bob"})
        assert r.status_code == 409
        assert error_of(r) == {"code": "not_a_plan_session", "message": "not a plan session: "
                               f"{sid} is driven by an agent, it has no steps"}
    r = await http.post(f"/api/sessions/{sid}/steps/0/explode", json={})
    assert r.status_code == 422
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_list_pages_and_filters(http_stack: HttpStack):
    http = http_stack.http
    ids = {(await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
           for _ in range(3)}
    for sid in ids:
        await listed(http, sid, "waiting_user")
    seen: list[str] = []
    token = None
    while True:
        params = {"limit": 2, "status": "waiting_user", **({"cursor": token} if token else {})}
        r = await http.get("/api/sessions", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["sessions"]) <= 2
        assert all(s["status"] == "waiting_user" and s["execution_status"] == "running"
                   for s in page["sessions"])
        seen += [s["session_id"] for s in page["sessions"]]
        token = page["next_cursor"]
        if not token:
            break
    assert ids <= set(seen) and len(seen) == len(set(seen))
    for sid in ids:
        await http.post(f"/api/sessions/{sid}/cancel", json={})
    r = await http.get("/api/sessions", params={"cursor": "not-a-token!"})
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_cursor"
    r = await http.get("/api/sessions", params={"page_token": "not-a-token!"})  # the old name
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_page_token"
    r = await http.get("/api/sessions", params={"status": "sleeping"})
    assert r.status_code == 422 and "status" in error_of(r)["message"]



async def test_a_second_cancel_while_cancelling_is_accepted_and_says_so(http_stack: HttpStack):
    """No worker takes the session (another task queue), so it stays cancelling."""
    sid = f"cancelling-{uuid.uuid4().hex[:8]}"
    await http_stack.client.start_workflow(
        "SessionWorkflow", SessionInput(session_id=sid, config=SessionConfig.model_validate(
            confirm_body())), id=sid, task_queue=f"tq-nobody-{uuid.uuid4().hex[:6]}")
    try:
        answers = [await http_stack.http.post(f"/api/sessions/{sid}/cancel", json={}) for _ in "12"]
        assert [(r.status_code, r.json()["cancellation"]) for r in answers] == [
            (202, "requested"), (202, "already_requested")]
        desc = await http_stack.client.get_workflow_handle(sid).describe()
        assert desc.raw_description.workflow_extended_info.cancel_requested
    finally:
        await http_stack.client.get_workflow_handle(sid).terminate("test cleanup")


def _timing_out(**policy) -> dict:
    """A confirm nobody answers within 1 s; then the agent waits for a message."""
    body = confirm_body()
    body["agent"]["llm"]["responses"] = [
        {"ecs_request": {"kind": "confirm", "prompt": "go on?"}}, {"text": "went on"}]
    return {**body, "reply_timeout_s": 1, **policy}


async def test_a_reply_to_an_expired_request_says_it_expired(http_stack: HttpStack):
    http = http_stack.http
    r = await http.post("/api/sessions", json=_timing_out(on_reply_timeout="cancel"))
    sid = r.json()["session_id"]
    asked = await session_until(http, sid, waiting("confirm"))
    await session_until(http, sid, waiting("message"))  # it expired, the agent went on
    r = await http.post(f"/api/sessions/{sid}/reply", json={
        "request_id": asked["pending"]["request_id"], "approve": True})
    assert r.status_code == 409 and error_of(r)["code"] == "reply_refused"
    assert f"request {asked['pending']['request_id']!r} expired at " in error_of(r)["message"]
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_a_reply_to_an_auto_decided_request_says_what_was_decided(
        http_stack: HttpStack):
    http = http_stack.http
    r = await http.post("/api/sessions",
                        json=_timing_out(interactive_require_user_reply=False))
    sid = r.json()["session_id"]
    asked = await session_until(http, sid, waiting("confirm"))
    await session_until(http, sid, waiting("message"))  # auto-decided, the agent went on
    r = await http.post(f"/api/sessions/{sid}/reply", json={
        "request_id": asked["pending"]["request_id"], "approve": True})
    assert r.status_code == 409 and error_of(r)["code"] == "reply_refused"
    assert "was auto-decided: rejected" in error_of(r)["message"]
    await http.post(f"/api/sessions/{sid}/cancel", json={})


async def test_a_message_resent_with_its_key_has_one_effect(http_stack: HttpStack):
    """The same message sent twice with one Idempotency-Key: the same 202 twice, one
    message in the session's history; another key is another message."""
    http = http_stack.http
    body = {"initial_message": "hi", "agent": {"llm": {"provider": "scripted", "responses": [
        {"text": "hello, what next?"}, {"text": "and then?"}, {"text": "bye", "end": True}]}}}
    sid = (await http.post("/api/sessions", json=body)).json()["session_id"]
    await session_until(http, sid, waiting("message"))
    key = {"Idempotency-Key": f"msg-{uuid.uuid4().hex[:8]}"}
    first = await http.post(f"/api/sessions/{sid}/messages", json={"text": "more"},
                            headers=key)
    again = await http.post(f"/api/sessions/{sid}/messages", json={"text": "more"},
                            headers=key)
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert first.json() == again.json()
    assert first.headers["idempotency-key"] == key["Idempotency-Key"]
    s = await session_until(http, sid, lambda s: s["turns"] == 2 and
                            s["status"] == "waiting_user", consistency="live")
    assert s["last_text"] == "and then?"
    events = [e async for e in
              http_stack.client.get_workflow_handle(sid).fetch_history_events()]
    accepted = [e.workflow_execution_update_accepted_event_attributes.accepted_request
                for e in events if e.workflow_execution_update_accepted_event_attributes
                .HasField("accepted_request")]
    assert [a.input.name for a in accepted] == ["send_message"]
    # Without a key each request is its own (the API makes a key and says it).
    r = await http.post(f"/api/sessions/{sid}/messages", json={"text": "bye now"})
    assert r.status_code == 202 and r.headers["idempotency-key"] != key["Idempotency-Key"]
    await session_until(http, sid, lambda s: s["status"] == "succeeded")
