"""The shell blocks of README.md and docs/*.md, verbatim, against `hitlflow up` (a real
stack): each block works when pasted as a whole, in the order the documents give them
(README first, then ``DOCS``: a later block may use what an earlier one set, ``$SID``)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from api.cli.options import API_URL_FILE
from api.cli.up import READY_LINE
from tests.api.cli.test_cli_stack import cli, cli_env, wait_for_pollers

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: The documents after the README, in the order their blocks run (every docs/*.md with
#: a shell block must be listed: ``test_every_document_with_blocks_is_run``).
DOCS = ("http-api.md", "audit-log.md", "concepts.md", "performance.md", "testing.md")
BLOCKS_TIMEOUT_S = 240

#: Blocks the test does not run, by a line they hold, and why. Every other `sh` block
#: runs; a new block runs unless it is listed here with its reason.
NOT_RUN = {
    "pip install": "installs, then starts the stack or the whole suite (this test runs "
                   "`up` itself and is part of that suite)",
    "hitlflow demo ": "the interactive demo asks at a terminal (tests/api/cli/test_cli_demo.py "
                      "runs `demo --auto-approve` against `up`)",
    "HITLFLOW_SCREENSHOTS=": "runs the inbox's browser test (part of the suite) to take "
                             "the README's screenshots",
    "bench/": "benchmarks, run by hand for minutes each (tests/bench/ checks their "
              "arguments parse)",
}


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)


def documents() -> list[Path]:
    return [README, *(REPO / "docs" / name for name in DOCS)]


def all_blocks() -> list[str]:
    """Every shell block of the documents, in the order they run."""
    return [b for doc in documents() for b in sh_blocks(doc.read_text())]


def runnable(blocks: list[str]) -> list[str]:
    return [b for b in blocks if not any(mark in b for mark in NOT_RUN)]


def test_every_document_with_blocks_is_run():
    with_blocks = {p.name for p in (REPO / "docs").glob("*.md") if sh_blocks(p.read_text())}
    assert with_blocks <= set(DOCS), f"add {sorted(with_blocks - set(DOCS))} to DOCS"


def test_every_block_is_run_or_says_why_not():
    blocks = all_blocks()
    assert len(blocks) >= 6
    skipped = [b for b in blocks if b not in runnable(blocks)]
    assert all(any(mark in b for b in skipped) for mark in NOT_RUN)  # no stale marks
    assert all("<" not in b or "<<" in b for b in runnable(blocks)), \
        "a block to paste has a <placeholder>"


async def test_readme_blocks_work_pasted_as_a_whole(tmp_path: Path,
                                                   free_port: Callable[[], int]):
    for tool in ("bash", "curl", "jq"):
        assert shutil.which(tool), f"the README's walkthrough needs {tool} (apt-get install {tool})"
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the README calls .venv/bin/...
    temporal, ui, api = free_port(), free_port(), free_port()
    ports = {"HITLFLOW_TEMPORAL_PORT": str(temporal), "HITLFLOW_UI_PORT": str(ui),
             "HITLFLOW_API_PORT": str(api)}
    env = cli_env(**ports)
    async with cli(tmp_path, "up", env=env) as up:
        await up.wait_for_line(READY_LINE)
        await wait_for_pollers(await Client.connect(f"127.0.0.1:{temporal}"),
                               "hitlflow-sessions")
        assert (tmp_path / ".hitlflow" / API_URL_FILE).read_text().strip() == \
            f"http://127.0.0.1:{api}"
        # set -x: on a failure, stderr shows each line run, with its time
        blocks = runnable(all_blocks())
        script = "set -e\nPS4='+ $(date +%T.%N) '\nset -x\n" + "\n".join(blocks)
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", script, cwd=tmp_path, env=env, start_new_session=True,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), BLOCKS_TIMEOUT_S)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        output = out.decode()
        assert proc.returncode == 0, f"exit {proc.returncode}\n{output}\n{err.decode()}"
        assert await up.interrupt() == 0, up.stderr
    assert not (tmp_path / ".hitlflow" / API_URL_FILE).exists()  # up is gone: so is it

    # The curl walkthrough (docs/http-api.md): what it waited for, the end, the timeline.
    assert '"kind": "approval"' in output
    assert '{"status":"succeeded","replies":2}' in output
    assert "\n5\n" in output  # total_contracts: write, write, delete, confirm, read
    events = (tmp_path / "events.txt").read_text()
    assert "event: interaction.requested" in events and "event: execution_state" in events
    # The command line: the hints it printed, the replies, the end, the audit log.
    assert "hitlflow session approve " in output and "hitlflow session reject " in output
    assert output.count(" accepted\n") == 2
    assert "ended: succeeded" in output
    verified = [line for line in output.splitlines()
                if line.startswith("OK: ") and " events" in line]
    assert sum("OK: the checkpoint signed by" in line for line in output.splitlines()) == 2
    # Every `log verify` the blocks run says OK (plain, --live, with the key, --since).
    verifies = sum(b.count("hitlflow log verify ") for b in runnable(all_blocks()))
    assert verifies >= 4 and len(verified) == verifies, output
    assert re.search(r": \d+ events \(0 new\), complete -> ", output)  # log export
    sessions = [json.loads(line) for line in output.splitlines()
                if line.startswith('{"status"')]
    assert sessions == [{"status": "succeeded", "replies": 2}]
