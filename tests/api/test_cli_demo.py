"""``hitlflow demo --auto-approve`` end to end against ``hitlflow up``, as a user runs them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from api.cli_stack import READY_LINE
from tests.api.test_cli_stack import cli, wait_for_pollers

DEMO_TIMEOUT_S = 120


async def test_demo_runs_end_to_end_against_up(tmp_path: Path, free_port: Callable[[], int]):
    temporal, ui, api = free_port(), free_port(), free_port()
    data_dir = tmp_path / "stack"
    stack = ["--data-dir", str(data_dir), "--temporal-port", str(temporal)]
    async with cli(tmp_path, "up", *stack, "--ui-port", str(ui), "--api-port", str(api)) as up:
        await up.wait_for_line(READY_LINE)
        await wait_for_pollers(await Client.connect(f"127.0.0.1:{temporal}"),
                               "hitlflow-sessions")
        # Its own folder: a cli() cleanup kills the dev servers whose pid files are
        # below its folder, and up's must outlive the demo.
        (tmp_path / "demo-cli").mkdir()
        async with cli(tmp_path / "demo-cli", "demo", "--auto-approve", *stack,
                       "--api-port", str(api)) as demo:
            code = await asyncio.wait_for(demo.proc.wait(), DEMO_TIMEOUT_S)
            assert demo.proc.stdout is not None
            out = (await demo.proc.stdout.read()).decode()
        assert code == 0, f"demo exited {code}: {out}\n{demo.stderr}"
        assert await up.interrupt() == 0, up.stderr
    # It printed each status change and contract transition as it happened.
    assert "waiting_user" in out and "succeeded" in out
    assert "delete_note: waiting → running (resume by user)" in out
    notes = next((data_dir / "demo-notes").iterdir())
    assert (notes / "groceries").read_text() == "milk, eggs"
    assert not (notes / "old-draft").exists()
    calls = [json.loads(line)["tool"] for line in (notes / ".calls.log").read_text().splitlines()]
    assert calls == ["write_note", "write_note", "delete_note"]
