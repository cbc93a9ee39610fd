"""The webhook channel against a real receiver that verifies each request with the
``standardwebhooks`` package's own verifier; the payload against its JSON Schema;
what each answer of the receiver does; secrets never in logs or errors."""

from __future__ import annotations

import asyncio
import json
import logging
from importlib import resources

import jsonschema
import pytest

from api.notify.channels.webhook import EVENT_TYPES, WebhookSender, body_of
from api.notify.model import DeliveryFailed, Links, Message, Notice
from api.notify.service import Notifier
from api.notify.settings import NotifyConfigError, WebhookChannel
from tests.api.notify.conftest import (
    SECRET_ENV,
    URL_ENV,
    fast_settings,
    hook_config,
    session_notices,
    write_notices,
)


def schema() -> dict:
    return json.loads(resources.files("api.notify.schemas").joinpath(
        "webhook.schema.json").read_text())


def message(kind: str = "opened", **notice) -> Message:
    n = Notice.model_validate({"notice_id": "s-1:4", "kind": kind, "session_id": "s-1",
                               "seq": 4, "at": "2026-11-26T10:00:00.5Z", "request_id": "r1",
                               "request_kind": "approval", "prompt": "Delete?",
                               "digest": "sha256:" + "a" * 64, "asked": {"tool": "rm"},
                               "approvers": ["bob"], **notice})
    return Message(message_id="msg_" + "0" * 32, channel="hook", notice=n,
                   links=Links(page="http://127.0.0.1:8000/#/s/s-1"))


def sender(hook_env) -> WebhookSender:
    return WebhookSender("hook", WebhookChannel(type="webhook", url_env=URL_ENV,
                                                secret_env=SECRET_ENV, timeout_s=5))


@pytest.mark.parametrize("kind", list(EVENT_TYPES))
def test_every_kind_of_payload_is_valid_by_its_schema(kind):
    extra = {"status": "succeeded"} if kind == "ended" else {}
    if kind == "auto_decided":
        extra = {"answer": {"approved": False}, "by": "timeout"}
    body = json.loads(body_of(message(kind, **extra)))
    jsonschema.validate(body, schema())
    assert body["type"] == EVENT_TYPES[kind] and body["id"] == "msg_" + "0" * 32
    assert body["data"]["links"] == {"page": "http://127.0.0.1:8000/#/s/s-1"}
    # a field the schema does not know would break receivers that validate: refused
    body["data"]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, schema())


async def test_a_webhook_verifies_with_the_packages_own_verifier(hook_env):
    s = sender(hook_env)
    try:
        assert await s.send(message()) == "HTTP 200"
        assert await s.send(message()) == "HTTP 200"  # a retry: the same id, the same bytes
    finally:
        await s.aclose()
    first, second = hook_env.received
    assert first.error is None and first.payload["data"]["prompt"] == "Delete?"
    assert first.webhook_id == second.webhook_id == "msg_" + "0" * 32
    assert first.body == second.body
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= set(first.headers)
    assert first.headers["webhook-signature"].startswith("v1,")


async def test_a_receiver_with_another_secret_refuses_it(hook_env):
    hook_env.secret = "whsec_" + "b3RoZXIgc2VjcmV0IG9mIHRoZSByZWNlaXZlcg=="
    s = sender(hook_env)
    try:
        with pytest.raises(DeliveryFailed) as err:
            await s.send(message())
    finally:
        await s.aclose()
    assert err.value.detail == "HTTP 401" and err.value.permanent
    assert "No matching signature" in (hook_env.received[0].error or "")


@pytest.mark.parametrize(("mode", "detail", "permanent"), [
    ("500", "HTTP 500", False), ("429", "HTTP 429", False), ("400", "HTTP 400", True),
    ("garbage", "no answer: RemoteProtocolError", False)])
async def test_each_answer_is_retried_or_permanent(hook_env, mode, detail, permanent):
    hook_env.mode = mode
    s = sender(hook_env)
    try:
        with pytest.raises(DeliveryFailed) as err:
            await s.send(message())
    finally:
        await s.aclose()
    assert (err.value.detail, err.value.permanent) == (detail, permanent)


async def test_a_receiver_that_is_down_is_retried_and_names_no_url(hook_env):
    hook_env.stop()
    s = sender(hook_env)
    try:
        with pytest.raises(DeliveryFailed) as err:
            await s.send(message())
    finally:
        await s.aclose()
    assert err.value.detail == "no answer: ConnectError" and not err.value.permanent
    assert "url-secret-token" not in str(err.value)


def test_config_errors_are_clear_and_never_show_the_secret(monkeypatch):
    cfg = WebhookChannel(type="webhook", url="http://127.0.0.1:9/x", secret_env=SECRET_ENV)
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with pytest.raises(NotifyConfigError, match=f"{SECRET_ENV} is not set"):
        WebhookSender("hook", cfg)
    monkeypatch.setenv(SECRET_ENV, "whsec_!!!not-base64-secret-value!!!")
    with pytest.raises(NotifyConfigError) as err:
        WebhookSender("hook", cfg)
    assert "not a Standard Webhooks secret" in str(err.value)
    assert "not-base64-secret-value" not in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    monkeypatch.setenv(SECRET_ENV, "whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0")
    with pytest.raises(NotifyConfigError, match="http:// or https://"):
        WebhookSender("hook", WebhookChannel(type="webhook", url="file:///etc/passwd",
                                             secret_env=SECRET_ENV))


async def test_the_notifier_never_logs_the_secret_or_the_url(hook_env, store, tmp_path, caplog):
    write_notices(store, session_notices("s-log", 2))
    hook_env.mode = "500"
    notifier = Notifier(store, hook_config(), fast_settings(), data_dir=tmp_path,
                        base_url="http://127.0.0.1:8000")
    with caplog.at_level(logging.DEBUG):
        notifier.route_once()
        await notifier.deliver_once()
        hook_env.mode = "ok"
        notifier.outbox.resend_dead()
        for m in notifier.outbox.messages():
            assert m["state"] == "pending"
        stop = asyncio.Event()
        task = asyncio.create_task(notifier.run(stop, on_round=lambda: stop.set()
                                                if notifier.outbox.counts()["pending"] == 0
                                                else None))
        await asyncio.wait_for(task, 30)
    assert notifier.outbox.counts() == {"pending": 0, "delivered": 2, "dead": 0}
    secret = hook_env.secret.removeprefix("whsec_")
    assert "HTTP 500" in caplog.text
    assert secret not in caplog.text
    assert "url-secret-token" not in caplog.text
    for d in notifier.outbox.dead_letters():
        assert "url-secret-token" not in (d["last_error"] or "")
