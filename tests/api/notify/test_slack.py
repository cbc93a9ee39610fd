"""The Slack channel against a real incoming-webhook receiver on 127.0.0.1 that checks
the Block Kit shape (``slack_receiver.block_kit_problems``): what the message holds
(header, prompt and what is asked, session/request/digest, buttons to the action
links and the page), Slack's limits for long text, escaping, what each answer means
(delivered, retryable, permanent), and the webhook URL (a secret) never in an error
or a log line."""

from __future__ import annotations

import logging
import socket

import pytest

from api.notify.channels import build_channel
from api.notify.channels.slack import SlackSender, blocks_of
from api.notify.model import DeliveryFailed, Links, Message, Notice, summary
from api.notify.settings import NotifyConfigError, SlackChannel
from tests.api.notify.slack_receiver import block_kit_problems, slack_receiver
from workflows.config import NOTICE_KINDS

DIGEST = "sha256:" + "ab" * 32
PAGE = "https://hitlflow.example.com/#/s/s-1"


def notice(**extra: object) -> Notice:
    fields: dict = {"notice_id": "s-1:7", "kind": "opened", "session_id": "s-1", "seq": 7,
                    "at": "2026-11-26T10:00:00+00:00", "title": "Tidy the notes",
                    "request_id": "s-1.r3", "request_kind": "approval",
                    "prompt": "Delete notes/old.md?", "digest": DIGEST,
                    "asked": {"tool": "delete_note", "arguments": {"path": "notes/old.md"}}}
    return Notice.model_validate({**fields, **extra})


def message(links: Links | None = None, **extra: object) -> Message:
    return Message(message_id="msg_0123456789abcdef0123456789abcdef", channel="chat",
                   notice=notice(**extra), links=links or Links(
                       page=PAGE, approve="https://hitlflow.example.com/act/a1",
                       reject="https://hitlflow.example.com/act/r1"))


def sender(url: str, **extra: object) -> SlackSender:
    return SlackSender("chat", SlackChannel.model_validate({"type": "slack", "url": url,
                                                            **extra}))


def buttons(payload: dict) -> list[tuple[str, str]]:
    actions = [b for b in payload["blocks"] if b["type"] == "actions"]
    assert len(actions) == 1
    return [(e["text"]["text"], e["url"]) for e in actions[0]["elements"]]


async def test_an_approval_request_arrives_as_block_kit_with_its_buttons():
    with slack_receiver() as rx:
        said = await sender(rx.url).send(message())
        assert said == "200 ok"
        [got] = rx.received
    assert got.headers["Content-Type"] == "application/json"
    payload = got.payload
    assert block_kit_problems(payload) == []
    header, section, context, _ = payload["blocks"]
    assert header["text"]["text"] == summary(notice()) == (
        "approval s-1.r3 in session Tidy the notes waits for you")
    assert payload["text"] == header["text"]["text"]
    assert section["text"]["text"].startswith("Delete notes/old.md?\n\n*What is asked:*\n```")
    assert '"path": "notes/old.md"' in section["text"]["text"]
    assert context["elements"][0]["text"] == (
        f"session `s-1` · request `s-1.r3` · digest `{DIGEST}` · "
        "message `msg_0123456789abcdef0123456789abcdef`")
    assert buttons(payload) == [("Approve", "https://hitlflow.example.com/act/a1"),
                                ("Reject", "https://hitlflow.example.com/act/r1"),
                                ("Open", PAGE)]


async def test_without_action_links_only_the_page_is_offered():
    with slack_receiver() as rx:
        await sender(rx.url).send(message(Links(page=PAGE)))
        assert buttons(rx.received[0].payload) == [("Open", PAGE)]


@pytest.mark.parametrize("kind", NOTICE_KINDS)
def test_every_kind_of_notice_makes_a_valid_message(kind: str):
    extra = {"kind": kind, "escalated_to": ["group:leads"] if kind == "escalated" else [],
             "answer": {"approve": False} if kind == "auto_decided" else None,
             "status": "succeeded" if kind == "ended" else None}
    payload = blocks_of(message(**extra))
    assert block_kit_problems(payload) == []
    text = payload["blocks"][1]["text"]["text"]
    if kind == "escalated":
        assert "*Escalated to:* group:leads" in text
    if kind == "auto_decided":
        assert text.startswith('Decided by its timeout: `{"approve": false}`')
    if kind == "ended":
        assert payload["blocks"][0]["text"]["text"] == \
            "session Tidy the notes ended (succeeded)"
        assert text.startswith("The session ended: *succeeded*.")


def test_long_text_is_cut_to_slacks_limits():
    payload = blocks_of(message(title="T" * 500, prompt="p" * 5000,
                                asked={"arguments": {"text": "x" * 10_000}}))
    assert block_kit_problems(payload) == []
    header = payload["blocks"][0]["text"]["text"]
    assert len(header) == 150 and header.endswith("…")
    section = payload["blocks"][1]["text"]["text"]
    assert len(section) <= 3000 and section.startswith("p" * 100)
    # a big `asked` alone: cut inside its code block, which stays closed
    payload = blocks_of(message(asked={"arguments": {"text": "y" * 10_000}}))
    section = payload["blocks"][1]["text"]["text"]
    assert len(section) <= 3000 and section.endswith("…```")
    assert block_kit_problems(payload) == []


def test_the_checker_catches_what_slack_refuses():
    good = blocks_of(message())
    assert block_kit_problems(good) == []
    bad = blocks_of(message())
    bad["blocks"][0]["text"] = {"type": "mrkdwn", "text": "*header*"}
    bad["blocks"][1]["text"]["text"] = "s" * 3001
    bad["blocks"][3]["elements"][0]["text"]["text"] = "A" * 76
    bad["blocks"][3]["elements"][1]["url"] = "https://x/" + "u" * 3000
    bad["blocks"].append({"type": "banner"})
    problems = block_kit_problems(bad)
    assert problems == [
        "blocks[0].text.type: 'mrkdwn' is not plain_text",
        "blocks[1].text.text: 3001 characters, more than 3000",
        "blocks[3].elements[0].text.text: 76 characters, more than 75",
        "blocks[3].elements[1].url: must be a string of 1 to 3000 characters",
        "blocks[4].type: 'banner' is not a block type"]
    assert block_kit_problems({"blocks": [{"type": "divider"}] * 51}) == [
        "blocks: must be a list of 1 to 50 blocks"]


def test_an_agents_text_cannot_mention_or_link():
    payload = blocks_of(message(prompt="<!channel> see <https://evil.example|here> & go",
                                asked={"note": "<@U123>"}))
    text = payload["blocks"][1]["text"]["text"]
    assert text.startswith("&lt;!channel&gt; see &lt;https://evil.example|here&gt; &amp; go")
    assert "<@U123>" not in text and "&lt;@U123&gt;" in text


async def test_a_link_longer_than_slack_takes_is_refused_before_sending():
    with slack_receiver() as rx:
        too_long = Links(page=PAGE, approve="https://h/act/" + "a" * 3000)
        with pytest.raises(DeliveryFailed) as err:
            await sender(rx.url).send(message(too_long))
        assert err.value.permanent and "approve link is longer" in err.value.detail
        assert rx.received == []


@pytest.mark.parametrize(("status", "body", "permanent"), [
    (429, "rate_limited", False), (500, "", False), (503, "service unavailable", False),
    (408, "timeout", False), (400, "invalid_payload", True), (403, "action_prohibited", True),
    (404, "no_service", True), (410, "channel_is_archived", True)])
async def test_what_each_answer_means(status: int, body: str, permanent: bool):
    with slack_receiver() as rx:
        rx.answers.append((status, body))
        with pytest.raises(DeliveryFailed) as err:
            await sender(rx.url).send(message())
    assert err.value.permanent is permanent
    assert err.value.detail.startswith(f"chat: the receiver answered {status}")
    assert body in err.value.detail
    assert rx.url not in err.value.detail and "/services/" not in err.value.detail


async def test_a_wrong_url_is_slacks_404_and_permanent():
    with slack_receiver() as rx, pytest.raises(DeliveryFailed) as err:
        await sender(rx.base + "/services/T0TEST/B0TEST/wrong").send(message())
    assert err.value.permanent and err.value.detail.endswith("404: no_service")


async def test_a_receiver_that_cannot_be_reached_is_tried_again_later():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/services/T/B/very-secret-path"
    with pytest.raises(DeliveryFailed) as err:
        await sender(url, timeout_s=5).send(message())
    assert not err.value.permanent
    assert "could not be reached: ConnectError" in err.value.detail
    assert "very-secret-path" not in err.value.detail


async def test_the_url_from_the_environment_and_never_in_a_log(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    with slack_receiver() as rx:
        monkeypatch.setenv("SLACK_TEST_URL", rx.url)
        config = SlackChannel.model_validate({"type": "slack", "url_env": "SLACK_TEST_URL"})
        channel = build_channel("chat", config)
        assert isinstance(channel, SlackSender) and rx.url not in repr(channel)
        assert await channel.send(message()) == "200 ok"
        rx.answers.append((500, "boom"))
        with pytest.raises(DeliveryFailed):
            await channel.send(message())
    assert len(rx.received) == 2
    secret = rx.url.rsplit("/", 1)[1]
    logged = [r.getMessage() for r in caplog.records]
    # httpx logs each URL at INFO: building a channel turned that off
    assert logging.getLogger("httpx").getEffectiveLevel() >= logging.WARNING
    assert not any(secret in line for line in logged), logged

    monkeypatch.delenv("SLACK_TEST_URL")
    with pytest.raises(NotifyConfigError) as err:
        build_channel("chat", config)
    assert str(err.value) == ("channel chat: url_env: the environment variable "
                              "SLACK_TEST_URL is not set")


def test_a_config_without_exactly_one_url_is_refused():
    for bad in ({"type": "slack"}, {"type": "slack", "url": "https://x", "url_env": "X"},
                {"type": "slack", "url_env": "not a name"}):
        with pytest.raises(ValueError):
            SlackChannel.model_validate(bad)


# -- through the notifier: routed, delivered, dead ------------------------------------------


async def test_the_notifier_delivers_through_slack_and_a_refusal_is_a_dead_letter(
        store, tmp_path, monkeypatch: pytest.MonkeyPatch):
    from api.notify.outbox import Outbox
    from api.notify.service import Notifier
    from api.notify.settings import NotifyConfig
    from tests.api.notify.conftest import fast_settings, session_notices, write_notices

    with slack_receiver() as rx:
        monkeypatch.setenv("SLACK_NOTIFIER_URL", rx.url)
        config = NotifyConfig.model_validate({
            "channels": {"chat": {"type": "slack", "url_env": "SLACK_NOTIFIER_URL"}},
            "routes": [{"to": "*", "channel": "chat"}]})
        notifier = Notifier(store, config, fast_settings(), data_dir=tmp_path,
                            base_url="http://127.0.0.1:8000")
        write_notices(store, session_notices("s-slack", 1))
        assert notifier.route_once() == 1
        assert await notifier.deliver_once() == 1
        [got] = rx.received
        payload = got.payload
        assert block_kit_problems(payload) == []
        [message] = Outbox(store).messages()
        assert message["state"] == "delivered"
        assert payload["blocks"][1]["text"]["text"] == "step 0?"
        assert f"message `{message['message_id']}`" in \
            payload["blocks"][2]["elements"][0]["text"]
        assert buttons(payload) == [("Open", "http://127.0.0.1:8000/#/s/s-slack")]

        # Slack refuses the next one for good: a dead letter at once, with its answer
        rx.answers.append((404, "no_service"))
        write_notices(store, session_notices("s-gone", 1))
        assert notifier.route_once() == 1
        assert await notifier.deliver_once() == 1
        [letter] = Outbox(store).dead_letters()
        assert letter["session_id"] == "s-gone" and letter["attempts"] == 1
        assert letter["last_error"] == "chat: the receiver answered 404: no_service"
        assert rx.url not in str(letter)
