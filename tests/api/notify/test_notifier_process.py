"""``hitlflow notifier`` as a real process: sessions on the real dev server, their logs
and read model kept by the real exporter, webhooks to a real receiver that verifies
them with the ``standardwebhooks`` package; killed with -9 at random points while
sessions open requests, nothing is lost and a duplicate carries the same id. And a
notify config it cannot use: a clear message and exit code 2."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from api.notify.outbox import Outbox
from observation.read_model.sqlite import SqliteStore
from tests.api.notify.conftest import SECRET_ENV, URL_ENV
from tests.api.notify.webhook_receiver import Receiver
from tests.support.sessions import running_exporter, running_worker, start_session, until
from workflows.config import SessionConfig
from workflows.messages import ReplyInput

TWO_QUESTIONS = {"initial_message": "go", "agent": {"llm": {"provider": "scripted", "responses": [
    {"ecs_request": {"kind": "confirm", "prompt": "First step?"}},
    {"ecs_request": {"kind": "confirm", "prompt": "Second step?"}},
    {"text": "done", "end": True}]}}}
CONFIG = {"channels": {"hook": {"type": "webhook", "url_env": URL_ENV, "secret_env": SECRET_ENV,
                                "timeout_s": 5}},
          "routes": [{"to": "*", "channel": "hook", "on": ["opened", "ended"]}]}


def notifier_env(tmp_path: Path, receiver: Receiver, **extra: str) -> dict[str, str]:
    cfg = tmp_path / "notify.yaml"
    cfg.write_text(json.dumps(CONFIG))  # JSON is YAML
    return {**os.environ, "HITLFLOW_NOTIFY_CONFIG": str(cfg), SECRET_ENV: receiver.secret,
            URL_ENV: receiver.url, "HITLFLOW_NOTIFY_POLL_S": "0.05",
            "HITLFLOW_NOTIFY_BACKOFF_S": "0.1", "HITLFLOW_NOTIFY_LEASE_S": "1", **extra}


def start_notifier(data_dir: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "api.cli", "notifier", "--data-dir",
                             str(data_dir)], env=env, stdout=subprocess.DEVNULL,
                            stderr=log.open("ab"))


async def wait_received(receiver: Receiver, check, limit_s: float = 60) -> None:
    assert await asyncio.to_thread(receiver.wait_for, check, limit_s), \
        f"not received in time: {len(receiver.received)} so far"


async def answer_all(client, handles) -> None:
    """Answer each session's two questions (each opens after the last is answered)."""
    for h in handles:
        for _ in range(2):
            snap = await until(h, lambda s: s.pending is not None and s.pending.kind == "confirm")
            await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                       approve=True))
        await h.result()


def _by_id(receiver: Receiver) -> dict[str, set[bytes]]:
    out: dict[str, set[bytes]] = {}
    for r in receiver.received:
        assert r.error is None, r.error  # every request verified
        out.setdefault(r.webhook_id, set()).add(r.body)
    return out


@pytest.mark.slow
async def test_a_waiting_session_sends_one_webhook_per_opened_request(dev_env, tmp_path):
    receiver = Receiver().start()
    data = tmp_path / "data"
    data.mkdir()
    tq = "tq-notify-one"
    proc = start_notifier(data, notifier_env(tmp_path, receiver), tmp_path / "notifier.log")
    try:
        async with running_worker(dev_env.client, tq), \
                running_exporter(dev_env.client, data, tq):
            h = await start_session(dev_env.client, SessionConfig.model_validate(
                {**TWO_QUESTIONS, "title": "one hook"}), tq)
            await wait_received(receiver, lambda r: len(r) >= 1)
            first = receiver.received[0]
            assert first.error is None
            assert first.payload["type"] == "hitlflow.request.opened"
            assert first.payload["data"]["session_id"] == h.id
            assert first.payload["data"]["prompt"] == "First step?"
            assert first.payload["data"]["title"] == "one hook"
            assert first.payload["data"]["links"]["page"].endswith(f"/#/s/{h.id}")
            await answer_all(dev_env.client, [h])
            await wait_received(receiver, lambda r: any(
                x.payload and x.payload["type"] == "hitlflow.session.ended" for x in r))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        receiver.stop()
    kinds = [r.payload["type"] for r in receiver.received]
    assert kinds == ["hitlflow.request.opened"] * 2 + ["hitlflow.session.ended"]
    assert len(set(receiver.ids())) == 3  # one each, no duplicate without a crash
    store = SqliteStore.in_dir(data)
    try:
        assert Outbox(store).counts() == {"pending": 0, "delivered": 3, "dead": 0}
    finally:
        store.close()
    assert receiver.secret.removeprefix("whsec_") not in (tmp_path / "notifier.log").read_text()


@pytest.mark.slow
async def test_killing_the_notifier_at_random_points_loses_nothing(dev_env, tmp_path):
    receiver = Receiver(delay_s=0.2).start()  # slow: kills land mid-send too
    data = tmp_path / "data"
    data.mkdir()
    tq = "tq-notify-kill"
    env = notifier_env(tmp_path, receiver)
    log = tmp_path / "notifier.log"
    rng = random.Random(26)
    kills = 0
    sessions = 10
    try:
        async with running_worker(dev_env.client, tq), \
                running_exporter(dev_env.client, data, tq):
            handles = [await start_session(dev_env.client, SessionConfig.model_validate(
                TWO_QUESTIONS), tq) for _ in range(sessions)]
            answering = asyncio.create_task(answer_all(dev_env.client, handles))
            while not answering.done() or kills < 8:
                proc = start_notifier(data, env, log)
                # a random point of its life: starting, routing, sending, marking
                await asyncio.sleep(rng.uniform(0.5, 2.5))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
            await answering
            proc = start_notifier(data, env, log)  # the last one sees it through
            try:
                await wait_received(receiver, lambda r: len({x.webhook_id for x in r})
                                    >= sessions * 3, limit_s=90)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    finally:
        receiver.stop()
    store = SqliteStore.in_dir(data)
    try:
        notices = store.notices(0, 1000)
        messages = Outbox(store).messages()
    finally:
        store.close()
    assert len(notices) == sessions * 3 and len(messages) == sessions * 3
    by_id = _by_id(receiver)
    assert set(by_id) == {m["message_id"] for m in messages}  # lost: 0
    assert all(len(bodies) == 1 for bodies in by_id.values())  # a duplicate: the same bytes
    duplicates = len(receiver.received) - len(by_id)
    print(f"kills={kills} messages={len(by_id)} lost=0 duplicates={duplicates}")


@pytest.mark.parametrize(("setup", "expected"), [
    ({}, "no notify config: set HITLFLOW_NOTIFY_CONFIG"),
    ({"file": None}, "cannot be read"),
    ({"file": "channels: [unclosed"}, "not valid YAML"),
    ({"file": "- a list"}, "must be a mapping"),
    ({"file": '{"channels": {}, "routes": [{"to": "*", "channel": "nope"}]}', "name": "c.json"},
     "routes[0] names channel 'nope'"),
    ({"file": json.dumps(CONFIG), "unset": SECRET_ENV}, f"{SECRET_ENV} is not set"),
    ({"file": json.dumps(CONFIG), "secret": "whsec_%%%"}, "not a Standard Webhooks secret"),
    ({"file": json.dumps(CONFIG), "env": {"HITLFLOW_NOTIFY_POLL_S": "-1"}}, "poll_s"),
])
def test_a_config_it_cannot_use_is_a_clear_message_and_exit_2(tmp_path, setup, expected):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HITLFLOW_NOTIFY_")}
    env.update({SECRET_ENV: "whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0", URL_ENV: "http://127.0.0.1:9/"})
    if "file" in setup:
        path = tmp_path / setup.get("name", "notify.yaml")
        if setup["file"] is not None:
            path.write_text(setup["file"])
        env["HITLFLOW_NOTIFY_CONFIG"] = str(path)
    if "unset" in setup:
        env.pop(setup["unset"])
    if "secret" in setup:
        env[SECRET_ENV] = setup["secret"]
    env.update(setup.get("env", {}))
    done = subprocess.run([sys.executable, "-m", "api.cli", "notifier", "--data-dir",
                           str(tmp_path / "data")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr and "%%%" not in done.stderr
    assert not (tmp_path / "data" / "read_model.sqlite").exists()  # nothing started
