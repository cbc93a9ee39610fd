"""``hitlflow up`` with ``HITLFLOW_NOTIFY_CONFIG``: its notifier runs as a child
process; a session's request reaches a real receiver; the notifier killed with -9 is
started again and nothing is lost; a config it cannot use stops ``up`` before it
starts anything (exit 2)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from api.cli.up import READY_LINE
from api.settings import TASK_QUEUE
from tests.api.cli.test_cli_stack import cli, cli_env, pid_alive, run_cli
from tests.api.notify.conftest import SECRET_ENV, URL_ENV
from tests.api.notify.test_notifier_process import CONFIG, TWO_QUESTIONS, wait_received
from tests.api.notify.webhook_receiver import Receiver
from tests.support.sessions import start_session
from workflows.config import SessionConfig


def notifier_children(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(pid) for pid in children
            if b"api.cli\x00notifier\x00" in Path(f"/proc/{pid}/cmdline").read_bytes()]


async def until_one_notifier(parent: int, not_pid: int | None = None) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        found = [p for p in notifier_children(parent) if p != not_pid and pid_alive(p)]
        if len(found) == 1:
            return found[0]
        assert loop.time() < deadline, f"notifier children: {found}"
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_up_runs_the_notifier_and_starts_it_again_after_a_kill(
        tmp_path: Path, free_port: Callable[[], int]) -> None:
    receiver = Receiver().start()
    cfg = tmp_path / "notify.json"
    cfg.write_text(json.dumps(CONFIG))
    env = cli_env(HITLFLOW_NOTIFY_CONFIG=str(cfg), HITLFLOW_NOTIFY_POLL_S="0.1",
                  HITLFLOW_NOTIFY_LEASE_S="2", **{SECRET_ENV: receiver.secret,
                                                  URL_ENV: receiver.url})
    temporal, ui, api = free_port(), free_port(), free_port()
    try:
        async with cli(tmp_path, "up", "--data-dir", str(tmp_path / "stack"),
                       "--temporal-port", str(temporal), "--ui-port", str(ui),
                       "--api-port", str(api), env=env) as up:
            await up.wait_for_line(READY_LINE)
            assert any(line.startswith("Notifier:") for line in up.stdout)
            first = await until_one_notifier(up.proc.pid)
            client = await Client.connect(f"127.0.0.1:{temporal}",
                                          data_converter=pydantic_data_converter)
            h1 = await start_session(client, SessionConfig.model_validate(TWO_QUESTIONS),
                                     TASK_QUEUE)
            await wait_received(receiver, lambda r: len(r) >= 1, limit_s=90)
            os.kill(first, signal.SIGKILL)
            second = await until_one_notifier(up.proc.pid, not_pid=first)
            h2 = await start_session(client, SessionConfig.model_validate(TWO_QUESTIONS),
                                     TASK_QUEUE)
            await wait_received(receiver, lambda r: {x.payload["data"]["session_id"]
                                                     for x in r if x.payload} >= {h1.id, h2.id},
                                limit_s=90)
            rc = await up.interrupt()
            assert rc == 0, up.stderr
            assert not pid_alive(second)
            assert "starting it again" in up.stderr
            assert receiver.secret.removeprefix("whsec_") not in up.stderr
            assert "url-secret-token" not in up.stderr
    finally:
        receiver.stop()
    assert all(r.error is None for r in receiver.received)


def test_up_with_a_notify_config_it_cannot_use_starts_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "notify.json"
    cfg.write_text(json.dumps(CONFIG))
    data_dir = tmp_path / "stack"
    r = run_cli(tmp_path, "up", "--data-dir", str(data_dir), HITLFLOW_NOTIFY_CONFIG=str(cfg),
                **{URL_ENV: "http://127.0.0.1:9/"})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{SECRET_ENV} is not set" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (data_dir / "temporal.sqlite").exists()
