"""The notifications routes over real HTTP (uvicorn on 127.0.0.1; no Temporal: the
outbox is the read model's database): who may use them (people's keys of each role
and the API token), the dead letters a page at a time, sending them again (one, all,
unknown ids), bad bodies, the counts and channels without their secrets, and test
messages through a Slack channel to a real receiver (what it answered, or why not)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from api.http.app import create_app
from api.notify.outbox import Outbox
from api.settings import HitlflowSettings
from tests.api.notify.notify_support import NO_TEMPORAL, TOKEN, api, dead, error
from tests.api.notify.slack_receiver import SlackReceiver, block_kit_problems, slack_receiver

# -- who may -----------------------------------------------------------------------------


async def test_only_operators_and_admins_may(tmp_path: Path, free_port: Callable[[], int]):
    async with api(tmp_path, free_port()) as a:
        calls = [("GET", "/api/notifications", None),
                 ("GET", "/api/notifications/dead-letters", None),
                 ("POST", "/api/notifications/dead-letters/resend", {}),
                 ("POST", "/api/notifications/dead-letters/msg_x/resend", {}),
                 ("POST", "/api/notifications/test", {"channel": "ops"})]
        ids = dead(a.store, 1)
        for role in ("viewer", "approver"):
            for method, path, body in calls:
                r = await a.http.request(method, path, json=body, headers=a.keys[role])
                said = error(r, 403, "forbidden")
                assert said == f"{role} is a {role}: notifications need the operator role"
                assert r.json()["error"]["rule"] == "role.operator"
        for method, path, body in calls:
            r = await a.http.request(method, path, json=body)
            error(r, 401, "unauthorized")
        # nothing changed by the refused calls
        assert [d["message_id"] for d in Outbox(a.store).dead_letters()] == ids
        for role in ("operator", "admin", "token"):
            r = await a.http.get("/api/notifications", headers=a.keys[role])
            assert r.status_code == 200, r.text


# -- dead letters ------------------------------------------------------------------------


async def test_dead_letters_a_page_at_a_time_and_sent_again(
        tmp_path: Path, free_port: Callable[[], int]):
    async with api(tmp_path, free_port()) as a:
        op = a.keys["operator"]
        r = await a.http.get("/api/notifications/dead-letters", headers=op)
        assert r.json() == {"dead_letters": [], "offset": 0, "next_offset": None}

        ids = dead(a.store, 5)
        newest_first = ids[::-1]
        seen, offset = [], 0
        while offset is not None:
            r = await a.http.get("/api/notifications/dead-letters",
                                 params={"limit": 2, "offset": offset}, headers=op)
            assert r.status_code == 200, r.text
            page = r.json()
            assert page["offset"] == offset and len(page["dead_letters"]) <= 2
            seen += page["dead_letters"]
            offset = page["next_offset"]
        assert [d["message_id"] for d in seen] == newest_first
        first = seen[-1]
        assert first == {"message_id": ids[0], "channel": "ops", "recipient": None,
                         "kind": "opened", "session_id": "s-0", "request_id": "s-0.r1",
                         "attempts": 1, "created_at": "2026-11-26T10:01:00.000Z",
                         "dead_at": "2026-11-26T10:01:00.000Z",
                         "last_error": "ops: the receiver answered 410: channel_is_archived"}
        counts = (await a.http.get("/api/notifications", headers=op)).json()["counts"]
        assert counts == {"pending": 0, "delivered": 0, "dead": 5}

        # one sent again: pending, the same id; a second time it is no dead letter
        r = await a.http.post(f"/api/notifications/dead-letters/{ids[2]}/resend", json={},
                              headers=op)
        assert r.status_code == 200 and r.json() == {"message_id": ids[2], "resent": True}
        assert {m["message_id"]: m["state"] for m in Outbox(a.store).messages()}[ids[2]] == \
            "pending"
        r = await a.http.post(f"/api/notifications/dead-letters/{ids[2]}/resend", json={},
                              headers=op)
        assert error(r, 404, "dead_letter_not_found").startswith(f"no dead letter '{ids[2]}'")
        r = await a.http.post("/api/notifications/dead-letters/msg_nope/resend", json={},
                              headers=op)
        error(r, 404, "dead_letter_not_found")

        # all of them
        r = await a.http.post("/api/notifications/dead-letters/resend", json={},
                              headers=a.keys["admin"])
        assert r.status_code == 200 and r.json() == {"resent": 4}
        assert (await a.http.get("/api/notifications", headers=op)).json()["counts"] == {
            "pending": 5, "delivered": 0, "dead": 0}
        r = await a.http.post("/api/notifications/dead-letters/resend", json={}, headers=op)
        assert r.json() == {"resent": 0}


async def test_broken_input_is_refused_and_changes_nothing(
        tmp_path: Path, free_port: Callable[[], int]):
    async with api(tmp_path, free_port()) as a:
        op = a.keys["operator"]
        ids = dead(a.store, 3)
        for params in ({"limit": 0}, {"limit": 501}, {"limit": "x"}, {"offset": -1},
                       {"offset": 2**31}):
            r = await a.http.get("/api/notifications/dead-letters", params=params, headers=op)
            error(r, 422, "validation_error")
        for bad in ("a b", "x" * 201, "..%2Fetc", "%00"):
            r = await a.http.post(f"/api/notifications/dead-letters/{bad}/resend", json={},
                                  headers=op)
            assert r.status_code in (404, 422), (bad, r.text)
        for path in ("/api/notifications/dead-letters/resend",
                     f"/api/notifications/dead-letters/{ids[0]}/resend"):
            r = await a.http.post(path, json={"all": True}, headers=op)
            error(r, 422, "validation_error")
            r = await a.http.post(path, json=[], headers=op)
            error(r, 422, "validation_error")
            r = await a.http.post(path, content=b"{", headers={
                **op, "content-type": "application/json"})
            assert r.status_code in (400, 422), r.text
            r = await a.http.post(path, content=b"all", headers={
                **op, "content-type": "text/plain"})
            error(r, 415, "unsupported_media_type")
        assert Outbox(a.store).counts() == {"pending": 0, "delivered": 0, "dead": 3}
        # past the end: an empty last page
        r = await a.http.get("/api/notifications/dead-letters", params={"offset": 10},
                             headers=op)
        assert r.json() == {"dead_letters": [], "offset": 10, "next_offset": None}


# -- channels and test messages ------------------------------------------------------------


def slack_config(rx: SlackReceiver) -> dict:
    return {"public_url": "https://hitlflow.example.com", "channels": {
        "ops-chat": {"type": "slack", "url_env": "NOTIFY_HTTP_SLACK_URL"},
        "hook": {"type": "webhook", "url": "https://hooks.example.com/h/very-secret",
                 "secret_env": "NOTIFY_HTTP_HOOK_SECRET"},
        "broken": {"type": "slack", "url_env": "NOTIFY_HTTP_UNSET"}}}


async def test_channels_are_listed_without_their_secrets_and_a_test_message_sent(
        tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NOTIFY_HTTP_UNSET", raising=False)
    with slack_receiver() as rx:
        monkeypatch.setenv("NOTIFY_HTTP_SLACK_URL", rx.url)
        async with api(tmp_path, free_port(), slack_config(rx)) as a:
            op = a.keys["operator"]
            r = await a.http.get("/api/notifications", headers=op)
            assert r.json() == {"configured": True, "config_error": None,
                                "counts": {"pending": 0, "delivered": 0, "dead": 0},
                                "channels": [{"name": "broken", "type": "slack"},
                                             {"name": "hook", "type": "webhook"},
                                             {"name": "ops-chat", "type": "slack"}]}
            assert "very-secret" not in r.text and "NOTIFY_HTTP" not in r.text

            r = await a.http.post("/api/notifications/test", json={"channel": "ops-chat"},
                                  headers=op)
            assert r.status_code == 200, r.text
            sent = r.json()
            assert sent["answer"] == "200 ok" and sent["type"] == "slack"
            assert sent["message_id"].startswith("msg_test_") and sent["recipient"] is None
            [got] = rx.received
            assert block_kit_problems(got.payload) == []
            blocks = got.payload["blocks"]
            assert "A test message from hitlflow, sent by operator to check the channel " \
                "ops-chat" in blocks[1]["text"]["text"]
            assert [(b["text"]["text"], b["url"]) for b in blocks[3]["elements"]] == [
                ("Open", "https://hitlflow.example.com/#/notifications")]
            assert rx.url not in r.text
            # not through the outbox
            assert Outbox(a.store).counts() == {"pending": 0, "delivered": 0, "dead": 0}

            # the receiver says no: 502 with what it said
            rx.answers.append((404, "no_service"))
            r = await a.http.post("/api/notifications/test", json={"channel": "ops-chat"},
                                  headers=op)
            said = error(r, 502, "delivery_failed")
            assert said == "ops-chat: the receiver answered 404: no_service"
            rx.answers.append((500, "boom"))
            r = await a.http.post("/api/notifications/test", json={"channel": "ops-chat"},
                                  headers=op)
            assert error(r, 502, "delivery_failed").endswith("answered 500: boom")

            r = await a.http.post("/api/notifications/test", json={"channel": "nope"},
                                  headers=op)
            assert error(r, 404, "channel_not_found") == (
                "no channel 'nope' in the notify config (its channels: broken, hook, ops-chat)")
            r = await a.http.post("/api/notifications/test", json={"channel": "broken"},
                                  headers=op)
            assert error(r, 409, "channel_unusable") == (
                "channel broken: url_env: the environment variable NOTIFY_HTTP_UNSET is "
                "not set")
            for bad in ({}, {"channel": ""}, {"channel": "a/b"}, {"channel": 3},
                        {"channel": "ops-chat", "extra": 1},
                        {"channel": "ops-chat", "to": "not an address"}):
                r = await a.http.post("/api/notifications/test", json=bad, headers=op)
                error(r, 422, "validation_error")
            assert len(rx.received) == 3  # the two refused sends and the first


async def test_a_receiver_that_cannot_be_reached(tmp_path: Path, free_port: Callable[[], int],
                                                 monkeypatch: pytest.MonkeyPatch):
    gone = f"http://127.0.0.1:{free_port()}/services/T/B/secret-part"
    monkeypatch.setenv("NOTIFY_HTTP_SLACK_URL", gone)
    config = {"channels": {"ops-chat": {"type": "slack", "url_env": "NOTIFY_HTTP_SLACK_URL",
                                        "timeout_s": 5}}}
    async with api(tmp_path, free_port(), config) as a:
        r = await a.http.post("/api/notifications/test", json={"channel": "ops-chat"},
                              headers=a.keys["admin"])
        said = error(r, 502, "delivery_failed")
        assert said.startswith("ops-chat: the receiver could not be reached: ConnectError")
        assert "secret-part" not in said


async def test_without_a_notify_config(tmp_path: Path, free_port: Callable[[], int]):
    async with api(tmp_path, free_port()) as a:
        op = a.keys["operator"]
        r = await a.http.get("/api/notifications", headers=op)
        assert r.json() == {"configured": False, "config_error": None,
                            "counts": {"pending": 0, "delivered": 0, "dead": 0},
                            "channels": []}
        r = await a.http.post("/api/notifications/test", json={"channel": "ops"}, headers=op)
        assert error(r, 409, "notify_not_configured").startswith("the API has no notify config")
        # dead letters work without one (the notifier may run elsewhere)
        dead(a.store, 1)
        r = await a.http.get("/api/notifications/dead-letters", headers=op)
        assert len(r.json()["dead_letters"]) == 1


async def test_a_broken_notify_config_is_said_not_fatal(tmp_path: Path,
                                                       free_port: Callable[[], int]):
    async with api(tmp_path, free_port(), config_text='{"channels": {"x": {"type": "fax"}}}'
                   ) as a:
        op = a.keys["operator"]
        r = await a.http.get("/api/notifications", headers=op)
        view = r.json()
        assert view["configured"] is False and view["channels"] == []
        assert view["config_error"].startswith(f"notify config {tmp_path / 'notify.json'}: ")
        r = await a.http.post("/api/notifications/test", json={"channel": "x"}, headers=op)
        assert error(r, 409, "notify_config_invalid") == view["config_error"]
        assert (await a.http.get("/api/whoami", headers=op)).status_code == 200


async def test_an_email_channel_needs_an_address(tmp_path: Path, free_port: Callable[[], int]):
    config = {"channels": {"mail": {"type": "email", "host": "127.0.0.1", "port": 1,
                                    "sender": "hitlflow@example.com"}}}
    async with api(tmp_path, free_port(), config) as a:
        # the API token's service principal has no e-mail address
        r = await a.http.post("/api/notifications/test", json={"channel": "mail"},
                              headers=a.keys["token"])
        assert error(r, 422, "recipient_required") == (
            "service:api-token has no e-mail address: name one (`to`)")


def test_the_routes_are_in_the_openapi_document(tmp_path: Path):
    app = create_app(HitlflowSettings(data_dir=tmp_path, temporal_address=NO_TEMPORAL,
                                      api_token=TOKEN))
    paths = app.openapi()["paths"]
    assert set(paths["/api/notifications"]) == {"get"}
    assert set(paths["/api/notifications/dead-letters"]) == {"get"}
    for path in ("/api/notifications/dead-letters/resend",
                 "/api/notifications/dead-letters/{message_id}/resend",
                 "/api/notifications/test"):
        assert set(paths[path]) == {"post"}
    test = paths["/api/notifications/test"]["post"]
    assert {"200", "403", "404", "409", "422", "502"} <= set(test["responses"])
    params = {p["name"] for p in paths["/api/notifications/dead-letters"]["get"]["parameters"]}
    assert params == {"limit", "offset"}


async def test_a_test_message_through_a_webhook_channel_verifies(
        tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch):
    from tests.api.notify.webhook_receiver import Receiver

    rx = Receiver().start()
    try:
        monkeypatch.setenv("NOTIFY_HTTP_HOOK_SECRET", rx.secret)
        config = {"channels": {"hook": {"type": "webhook", "url": rx.url,
                                        "secret_env": "NOTIFY_HTTP_HOOK_SECRET"}}}
        async with api(tmp_path, free_port(), config) as a:
            r = await a.http.post("/api/notifications/test", json={"channel": "hook"},
                                  headers=a.keys["operator"])
            assert r.status_code == 200, r.text
            sent = r.json()
            assert sent["type"] == "webhook" and "200" in sent["answer"]
            [got] = rx.received
            # signed per Standard Webhooks: the receiver's verifier took it
            assert got.error is None and got.webhook_id == sent["message_id"]
            assert rx.secret not in r.text and "url-secret-token" not in r.text
            rx.mode = "400"
            r = await a.http.post("/api/notifications/test", json={"channel": "hook"},
                                  headers=a.keys["operator"])
            assert "400" in error(r, 502, "delivery_failed")
    finally:
        rx.stop()
