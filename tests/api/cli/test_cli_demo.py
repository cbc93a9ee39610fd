"""``hitlflow demo`` end to end against ``hitlflow up``, as a user runs them: it says
what the agent says, in the order of the session's log, and tells the truth about
what the person decided."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from api.cli.demo import console, show
from api.cli.text import AgentText
from api.cli.up import READY_LINE
from tests.api.cli.test_cli_stack import cli, wait_for_pollers

DEMO_TIMEOUT_S = 120
SHOWN = re.compile(r"(session \w+ → \w+|contract \S+ .+?: \w+ → \w+|agent: .*)")


async def run_demo(folder: Path, stack: list[str], api: int, *args: str,
                   stdin: bytes | None = None) -> str:
    # Its own folder: a cli() cleanup kills the dev servers whose pid files are
    # below its folder, and up's must outlive the demo.
    folder.mkdir()
    async with cli(folder, "demo", *args, *stack, "--api-port", str(api), stdin=stdin) as demo:
        code = await asyncio.wait_for(demo.proc.wait(), DEMO_TIMEOUT_S)
        assert demo.proc.stdout is not None
        out = (await demo.proc.stdout.read()).decode()
    assert code == 0, f"demo exited {code}: {out}\n{demo.stderr}"
    return out


def printed(out: str) -> list[str]:
    """The status changes, contract transitions and agent lines the demo printed
    (a prompt's answer is not echoed from a pipe: a line may follow a prompt)."""
    return [m.group(1) for line in out.splitlines() if (m := SHOWN.search(line))]


def from_log(data_dir: Path, out: str) -> list[str]:
    """The same lines made from the session's log file, in the log's order."""
    sid = re.search(r"started demo session (\S+)", out).group(1)  # type: ignore[union-attr]
    lines = (data_dir / "runs" / sid / "events.ndjson").read_text().splitlines()
    shown = []
    for event in map(json.loads, lines):
        p = event["payload"]
        if event["type"] == "conversation.state.changed":
            shown.append(f"session {p['from']} → {p['to']}")
        elif event["type"] == "execution_state":
            label = p["action_summary"].removeprefix("Call tool ").split("(", 1)[0]
            shown.append(f"contract {p['execution_id'][-8:]} {label}: "
                         f"{p['from_status']} → {p['to_status']}")
        elif event["type"] == "text" and p.get("text"):
            shown.append(f"agent: {p['text']}")
    return shown


async def test_demo_tells_what_the_person_decided(tmp_path: Path,
                                                  free_port: Callable[[], int]):
    temporal, ui, api = free_port(), free_port(), free_port()
    data_dir = tmp_path / "stack"
    stack = ["--data-dir", str(data_dir), "--temporal-port", str(temporal)]
    async with cli(tmp_path, "up", *stack, "--ui-port", str(ui), "--api-port", str(api)) as up:
        await up.wait_for_line(READY_LINE)
        await wait_for_pollers(await Client.connect(f"127.0.0.1:{temporal}"),
                               "hitlflow-sessions")
        yes = await run_demo(tmp_path / "yes", stack, api, "--auto-approve")
        # At the terminal: "no" to the delete, "yes" to reading the list back.
        no = await run_demo(tmp_path / "no", stack, api, stdin=b"n\ny\n")
        assert await up.interrupt() == 0, up.stderr
    yes_dir, no_dir = sorted((data_dir / "demo-notes").iterdir(), key=lambda p: p.stat().st_ctime)

    # Yes: the draft is deleted, and the agent says so last, after the last transition.
    assert "delete_note: waiting → running (resume by human)" in yes
    assert printed(yes)[-2:] == ["agent: Done: groceries saved, the old draft deleted.",
                                 "session running → succeeded"]
    assert not (yes_dir / "old-draft.note").exists() and (yes_dir / "groceries.note").exists()
    calls = [json.loads(x)["tool"] for x in (yes_dir / ".calls.log").read_text().splitlines()]
    assert calls == ["write_note", "write_note", "delete_note"]

    # No: the draft is kept, and the agent says that instead of "deleted".
    assert "delete_note: running → rejected (reject by human)" in no
    assert "agent: Understood: I keep the old draft." in printed(no)
    assert printed(no)[-2:] == [
        "agent: Done: groceries saved; the old draft is still there, as you asked.",
        "session running → succeeded"]
    assert "deleted" not in "\n".join(x for x in printed(no) if x.startswith("agent:"))
    assert (no_dir / "old-draft.note").read_text() == "obsolete"
    assert (no_dir / "groceries.note").read_text() == "milk, eggs"

    # Both print what the log has, in the log's order.
    assert printed(yes) == from_log(data_dir, yes)
    assert printed(no) == from_log(data_dir, no)


def test_show_prints_agent_text_verbatim(capsys):
    text = AgentText(console, "agent: ")
    show({"type": "text", "payload": {"text": "[SUCCESS] kept [bold]as is[/bold]"}}, text)
    show({"type": "text", "payload": {"text": ""}}, text)  # a turn with only tool calls
    show({"type": "WORK_ITEM_QUEUED", "payload": {}}, text)  # not shown
    assert capsys.readouterr().out == "agent: [SUCCESS] kept [bold]as is[/bold]\n"


def test_show_streams_the_agent_text_then_the_next_line(capsys):
    text = AgentText(console, "agent: ")
    for piece in ({"call_id": "c1", "delta": "Do", "text": "Do"},
                  {"call_id": "c1", "delta": "ne."}):
        show({"type": "text.delta", "payload": piece}, text)
    assert capsys.readouterr().out == "agent: Done."  # as it is written: no newline yet
    show({"type": "text", "payload": {"call_id": "c1", "text": "Done."}}, text)
    show({"type": "conversation.state.changed",
          "payload": {"from": "running", "to": "succeeded", "trigger": "t"}}, text)
    assert capsys.readouterr().out == "\nsession running → succeeded (t)\n"
