"""The wait steps end to end, through ``hitlflow up``: a request reminded at T1,
escalated at T2 and auto-decided at T3, each once — in the log and at a real webhook
receiver (duplicates, if any, carry the same webhook-id) — with the whole stack
(Temporal, worker, API with the exporter, notifier) stopped and started again between
T1 and T2."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from api.cli.up import READY_LINE
from api.settings import TASK_QUEUE
from tests.api.cli.test_cli_stack import cli, cli_env
from tests.api.notify.conftest import SECRET_ENV, URL_ENV
from tests.api.notify.test_notifier_process import wait_received
from tests.api.notify.webhook_receiver import Receiver
from tests.support.sessions import start_session
from workflows.config import SessionConfig

STEPS = ("opened", "reminded", "escalated", "auto_decided")
CONFIG = {"channels": {"hook": {"type": "webhook", "url_env": URL_ENV,
                                "secret_env": SECRET_ENV, "timeout_s": 5}},
          "routes": [{"to": "*", "channel": "hook", "on": list(STEPS)}]}
# T1 = 2 s, T2 = 8 s, T3 = 12 s after the request opens: the restart (stop and start
# again, ~4 s) falls between T1 and T2 (or runs past T2: the escalation then fires once
# the worker is back). The test waits out T3 in real time: no longer than it must.
SESSION = {"initial_message": "go", "interactive_require_user_reply": False,
           "remind_after_s": 2, "escalate_after_s": 8, "escalate_to": ["group:oncall"],
           "reply_timeout_s": 12,
           "agent": {"llm": {"provider": "scripted", "responses": [
               {"ecs_request": {"kind": "confirm", "prompt": "Ship it?"}},
               {"text": "done", "end": True}]}}}


def kinds(receiver: Receiver, sid: str) -> dict[str, set[str]]:
    """notice kind -> the webhook ids it came with, for one session."""
    out: dict[str, set[str]] = {}
    for r in receiver.received:
        assert r.error is None, r.error  # every request verified by standardwebhooks
        data = r.payload["data"]
        if data["session_id"] == sid:
            out.setdefault(r.payload["type"].rsplit(".", 1)[1], set()).add(r.webhook_id)
    return out


def log_types(data_dir: Path, sid: str) -> Counter[str]:
    lines = (data_dir / "runs" / sid / "events.ndjson").read_text().splitlines()
    out: Counter[str] = Counter()
    for line in lines:
        event = json.loads(line)
        t = event["type"]
        if t == "ISSUE_RESOLVED":
            t = f"ISSUE_RESOLVED:{event['payload']['resolution']}"
        out[t] += 1
    return out


@pytest.mark.slow
async def test_remind_escalate_and_auto_decide_once_each_across_a_whole_stack_restart(
        tmp_path: Path, free_port: Callable[[], int]) -> None:
    receiver = Receiver().start()
    cfg = tmp_path / "notify.json"
    cfg.write_text(json.dumps(CONFIG))
    env = cli_env(HITLFLOW_NOTIFY_CONFIG=str(cfg), HITLFLOW_NOTIFY_POLL_S="0.1",
                  HITLFLOW_NOTIFY_BACKOFF_S="0.2", HITLFLOW_NOTIFY_LEASE_S="2",
                  **{SECRET_ENV: receiver.secret, URL_ENV: receiver.url})
    data_dir = tmp_path / "stack"
    ports = [str(free_port()) for _ in range(3)]
    args = ("up", "--data-dir", str(data_dir), "--temporal-port", ports[0],
            "--ui-port", ports[1], "--api-port", ports[2])
    try:
        async with cli(tmp_path, *args, env=env) as up:
            await up.wait_for_line(READY_LINE)
            client = await Client.connect(f"127.0.0.1:{ports[0]}",
                                          data_converter=pydantic_data_converter)
            handle = await start_session(client, SessionConfig.model_validate(SESSION),
                                         TASK_QUEUE)
            sid = handle.id
            await wait_received(receiver, lambda _: "reminded" in kinds(receiver, sid),
                                limit_s=90)
            assert "escalated" not in kinds(receiver, sid)
            assert await up.interrupt() == 0, up.stderr  # the whole stack stops
        async with cli(tmp_path, *args, env=env) as up:
            await up.wait_for_line(READY_LINE)
            await wait_received(receiver, lambda _: "auto_decided" in kinds(receiver, sid),
                                limit_s=120)
            client = await Client.connect(f"127.0.0.1:{ports[0]}",
                                          data_converter=pydantic_data_converter)
            await asyncio.wait_for(client.get_workflow_handle(sid).result(), 60)
            assert await up.interrupt() == 0, up.stderr
    finally:
        receiver.stop()
    got = kinds(receiver, sid)
    assert {k: len(ids) for k, ids in got.items()} == dict.fromkeys(STEPS, 1), got
    seen = log_types(data_dir, sid)
    assert (seen["ISSUE_REMINDED"], seen["ISSUE_ESCALATED"],
            seen["ISSUE_RESOLVED:auto_decided"]) == (1, 1, 1), seen
    escalated = next(r.payload["data"] for r in receiver.received
                     if r.payload["type"].endswith(".escalated"))
    assert "group:oncall" in escalated["addressees"]
