"""``hitlflow notify test`` and ``notify dead-letters`` against a real API (uvicorn on
127.0.0.1, no Temporal: the outbox is the read model's database), a real Slack-style
receiver, and dead letters made as the notifier makes them. The CLI runs in a thread
(CliRunner), so the server in this event loop keeps serving."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from api.cli.main import app
from api.notify.outbox import Outbox
from tests.api.notify.notify_support import TOKEN, Api, api, dead
from tests.api.notify.slack_receiver import block_kit_problems, slack_receiver

runner = CliRunner()


async def hitlflow(a: Api, *args: str, credential: str = TOKEN) -> Result:
    env = {"HITLFLOW_API_URL": str(a.http.base_url), "COLUMNS": "200", "NO_COLOR": "1",
           "HITLFLOW_API_PORT": None, "HITLFLOW_DATA_DIR": None,
           "HITLFLOW_API_TOKEN": credential}
    return await asyncio.to_thread(runner.invoke, app, list(args), env=env)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.output


def key_of(a: Api, role: str) -> str:
    return a.keys[role]["authorization"].removeprefix("Bearer ")


async def test_notify_test_says_what_the_receiver_answered(
        tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch):
    with slack_receiver() as rx:
        monkeypatch.setenv("NOTIFY_CLI_SLACK_URL", rx.url)
        config = {"channels": {"ops-chat": {"type": "slack", "url_env": "NOTIFY_CLI_SLACK_URL"}}}
        async with api(tmp_path, free_port(), config) as a:
            out = ok(await hitlflow(a, "notify", "test", "ops-chat"))
            lines = out.splitlines()
            assert lines[0] == "ops-chat (slack) answered: 200 ok"
            assert lines[1].startswith("message id: msg_test_")
            assert block_kit_problems(rx.received[0].payload) == []
            assert rx.url not in out

            sent = json.loads(ok(await hitlflow(a, "notify", "test", "ops-chat", "--json")))
            assert sent["answer"] == "200 ok" and sent["channel"] == "ops-chat"

            rx.answers.append((403, "action_prohibited"))
            r = await hitlflow(a, "notify", "test", "ops-chat")
            assert r.exit_code == 1
            assert r.output.strip() == ("error: delivery_failed: ops-chat: the receiver "
                                        "answered 403: action_prohibited")
            r = await hitlflow(a, "notify", "test", "nope")
            assert r.exit_code == 1
            assert r.output.startswith("error: channel_not_found: no channel 'nope'")
            r = await hitlflow(a, "notify", "test", "ops-chat",
                               credential=key_of(a, "approver"))
            assert r.exit_code == 1 and "error: forbidden: approver is a approver" in r.output
            r = await hitlflow(a, "notify", "test")
            assert r.exit_code == 2
            assert len(rx.received) == 3  # the 403 was the third; nothing else was sent


async def test_notify_test_without_a_config(tmp_path: Path, free_port: Callable[[], int]):
    async with api(tmp_path, free_port()) as a:
        r = await hitlflow(a, "notify", "test", "ops-chat")
        assert r.exit_code == 1
        assert r.output.startswith("error: notify_not_configured: the API has no notify config")


async def test_dead_letters_listed_and_sent_again(tmp_path: Path,
                                                  free_port: Callable[[], int]):
    async with api(tmp_path, free_port()) as a:
        assert ok(await hitlflow(a, "notify", "dead-letters")) == "no dead letters\n"
        ids = dead(a.store, 3)
        out = ok(await hitlflow(a, "notify", "dead-letters"))
        lines = out.splitlines()
        assert lines[0] == (f"{ids[2]}  ops  opened s-2.r1 in s-2  dead since "
                            "2026-11-26T10:01:02.000Z after 1 attempt")
        assert lines[1] == "    ops: the receiver answered 410: channel_is_archived"
        assert [line.split()[0] for line in lines[0:6:2]] == ids[::-1]
        assert lines[-1] == "3 dead letters; send again with --resend ID or --resend-all"

        # paged through the API two at a time, and cut at --limit
        listed = json.loads(ok(await hitlflow(a, "notify", "dead-letters", "--json",
                                              "--limit", "2")))
        assert [d["message_id"] for d in listed["dead_letters"]] == ids[:0:-1]
        assert listed["more"] is True
        out = ok(await hitlflow(a, "notify", "dead-letters", "--limit", "2"))
        assert out.splitlines()[-1].startswith("2+ dead letters;")

        assert ok(await hitlflow(a, "notify", "dead-letters", "--resend", ids[1])) == \
            f"{ids[1]} goes out again\n"
        states = {m["message_id"]: m["state"] for m in Outbox(a.store).messages()}
        assert states == {ids[0]: "dead", ids[1]: "pending", ids[2]: "dead"}
        r = await hitlflow(a, "notify", "dead-letters", "--resend", ids[1])
        assert r.exit_code == 1
        assert r.output.startswith(f"error: dead_letter_not_found: no dead letter '{ids[1]}'")

        assert ok(await hitlflow(a, "notify", "dead-letters", "--resend-all")) == \
            "2 dead letters go out again\n"
        assert Outbox(a.store).counts() == {"pending": 3, "delivered": 0, "dead": 0}


async def test_dead_letters_broken_input(tmp_path: Path, free_port: Callable[[], int]):
    async with api(tmp_path, free_port()) as a:
        ids = dead(a.store, 2)
        r = await hitlflow(a, "notify", "dead-letters", "--resend", ids[0], "--resend-all")
        assert r.exit_code == 2 and "not both" in r.output
        for bad in ("../x", "a?b", "a#b", "", "x" * 201):
            r = await hitlflow(a, "notify", "dead-letters", "--resend", bad)
            assert r.exit_code == 2, (bad, r.output)
            assert "is not a message id" in r.output
        r = await hitlflow(a, "notify", "dead-letters", "--limit", "0")
        assert r.exit_code == 2
        r = await hitlflow(a, "notify", "dead-letters", credential=key_of(a, "viewer"))
        assert r.exit_code == 1 and "error: forbidden:" in r.output
        r = await hitlflow(a, "notify", "dead-letters", "--resend-all",
                           credential=key_of(a, "viewer"))
        assert r.exit_code == 1
        assert Outbox(a.store).counts() == {"pending": 0, "delivered": 0, "dead": 2}
