"""``hitlflow session ...`` against the API over real HTTP (the CLI runs in a thread,
so the server in this event loop keeps serving)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from pathlib import Path

from typer.testing import CliRunner, Result

from api.cli.main import app
from tests.api.http_support import (
    TOKEN,
    HttpStack,
    chat_body,
    confirm_body,
    demo_body,
    session_until,
    waiting,
)

runner = CliRunner()


async def hitlflow(stack: HttpStack | None, *args: str, input: str | None = None,
                   columns: int = 200) -> Result:
    """The CLI, told where the API is by HITLFLOW_API_URL (None: not told), and its
    token by HITLFLOW_API_TOKEN."""
    env = {"HITLFLOW_API_URL": stack.url if stack else None, "COLUMNS": str(columns),
           "NO_COLOR": "1", "HITLFLOW_API_PORT": None, "HITLFLOW_DATA_DIR": None,
           "HITLFLOW_API_TOKEN": TOKEN}
    return await asyncio.to_thread(runner.invoke, app, list(args), input=input, env=env)


async def tail_process(stack: HttpStack, sid: str) -> asyncio.subprocess.Process:
    """`hitlflow session tail` as its own process (CliRunner swaps sys.stdout: one at
    a time only)."""
    env = {**os.environ, "HITLFLOW_API_URL": stack.url, "COLUMNS": "200", "NO_COLOR": "1",
           "TERM": "dumb", "HITLFLOW_API_TOKEN": TOKEN}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "api.cli", "session", "tail", sid, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.output


async def test_the_demo_driven_from_the_command_line(http_stack: HttpStack, tmp_path: Path):
    config = tmp_path / "demo.json"
    notes = tmp_path / "notes"
    notes.mkdir()
    config.write_text(json.dumps(demo_body(notes)))
    sid = ok(await hitlflow(http_stack, "session", "start", str(config))).strip()
    tail = await tail_process(http_stack, sid)

    s = await session_until(http_stack.http, sid, waiting("approval"))
    shown = ok(await hitlflow(http_stack, "session", "show", sid))
    assert f"{sid}: waiting_user" in shown and "waiting for you (approval)" in shown
    short = s["pending"]["execution_id"].partition(".")[2][:8]
    assert f"\n    hitlflow session approve {sid} {short}\n" in shown
    out = ok(await hitlflow(http_stack, "session", "approve", sid, s["pending"]["execution_id"]))
    # stderr says what is answered (the request and the digest it was shown with)
    rid, digest = s["pending"]["request_id"], s["pending"]["digest"]
    assert out.strip().splitlines() == [f"answering {rid} ({digest})",
                                        f"reply to {rid} accepted"]

    s = await session_until(http_stack.http, sid, waiting("confirm"))
    stale = await hitlflow(http_stack, "session", "reply", sid, "--request-id", "old", "--approve")
    assert stale.exit_code == 1
    assert "error: reply_refused: reply names request 'old'" in stale.output
    ok(await hitlflow(http_stack, "session", "reply", sid, "--approve", "--comment", "sure"))

    out, _ = await asyncio.wait_for(tail.communicate(), 60)
    live = out.decode()
    assert tail.returncode == 0, live
    assert "session queued → running" in live
    # Actors by the seeds' names, as `hitlflow demo` and the timeline name them.
    assert "delete_note: running → waiting (suspend by tool_node)" in live
    assert "delete_note: waiting → running (resume by user)" in live
    assert "waiting for you (confirm): Shall I read the groceries list back to you?" in live
    tail_hints = commands_in(live)  # what tail prints to answer: pasteable commands
    assert ["session", "approve", sid, short] in tail_hints
    assert all(c[:2] in (["session", "approve"], ["session", "reject"]) for c in tail_hints)
    assert "agent: Done: groceries saved, the old draft deleted." in live
    assert live.rstrip().endswith(f"session {sid} ended: succeeded")

    # Afterwards, the whole stream again, as JSON lines, with strictly growing ids.
    events = [json.loads(line) for line in
              ok(await hitlflow(http_stack, "session", "tail", sid, "--json")).splitlines()]
    ids = [int(e["id"]) for e in events]
    assert ids == sorted(ids)
    # Ids grow strictly but for seed 000's `ecs`, which repeats its interaction.requested.
    repeated = [e for e in events if ids.count(int(e["id"])) > 1]
    assert {e["event"] for e in repeated} <= {"interaction.requested", "ecs"}
    assert len(set(ids)) == len(ids) - sum(e["event"] == "ecs" for e in events)
    assert {"execution_state", "conversation.state.changed", "interaction.requested",
            "text", "tool_result"} <= {e["event"] for e in events}
    listed = json.loads(ok(await hitlflow(http_stack, "session", "list", "--status",
                                          "succeeded", "--json", "--limit", "1000")))
    assert sid in [x["session_id"] for x in listed["sessions"]]


async def test_start_from_stdin_list_message_reject_cancel(http_stack: HttpStack):
    sid = "cli-" + asyncio.get_running_loop().time().hex()[4:14].replace(".", "")
    body = json.dumps(chat_body())
    created = json.loads(ok(await hitlflow(http_stack, "session", "start", "-", "--id", sid,
                                           "--json", input=body)))
    assert created == {"session_id": sid, "status": "queued"}
    await session_until(http_stack.http, sid, waiting("message"))
    assert sid in ok(await hitlflow(http_stack, "session", "list", "--status", "waiting_user",
                                    "--limit", "1000"))
    ok(await hitlflow(http_stack, "session", "message", sid, "one more thing"))
    await session_until(http_stack.http, sid, lambda s: s["status"] == "succeeded")

    sid = ok(await hitlflow(http_stack, "session", "start", "-",
                            input=json.dumps(confirm_body()))).strip()
    s = await session_until(http_stack.http, sid, waiting("confirm"))
    ok(await hitlflow(http_stack, "session", "reject", sid, s["pending"]["execution_id"]))
    await session_until(http_stack.http, sid, lambda s: s["status"] == "succeeded")
    assert json.loads(ok(await hitlflow(http_stack, "session", "show", sid, "--json"))
                      )["replies"] == 1

    sid = ok(await hitlflow(http_stack, "session", "start", "-",
                            input=json.dumps(confirm_body()))).strip()
    await session_until(http_stack.http, sid, waiting("confirm"))
    assert ok(await hitlflow(http_stack, "session", "cancel", sid)).strip() == "cancel requested"
    await session_until(http_stack.http, sid, lambda s: s["status"] == "canceled")
    again = await hitlflow(http_stack, "session", "cancel", sid)
    assert again.exit_code == 1 and "error: session_closed:" in again.output


async def test_clear_errors_and_exit_codes(http_stack: HttpStack, tmp_path: Path, free_port):
    r = await hitlflow(http_stack, "session", "show", "no-such-session")
    assert r.exit_code == 1 and "error: session_not_found: no session 'no-such-session'" \
        in r.output
    r = await hitlflow(http_stack, "session", "show", "../etc")
    assert r.exit_code == 1 and "error:" in r.output
    r = await hitlflow(http_stack, "session", "list", "--status", "sleepy")
    assert r.exit_code == 1 and "error: validation_error:" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    r = await hitlflow(http_stack, "session", "start", str(bad))
    assert r.exit_code == 2 and "is not JSON" in r.output
    r = await hitlflow(http_stack, "session", "start", str(tmp_path / "missing.json"))
    assert r.exit_code == 2 and "cannot read" in r.output
    bad.write_text(json.dumps({"mode": "sometimes"}))
    r = await hitlflow(http_stack, "session", "start", str(bad))
    assert r.exit_code == 1 and "error: validation_error:" in r.output
    r = await hitlflow(http_stack, "session", "reply", "abc", "--values", "[1, 2]")
    assert r.exit_code == 2 and "--values must be a JSON object" in r.output
    r = await hitlflow(http_stack, "session", "reply", "abc", "--arguments", "{nope")
    assert r.exit_code == 2 and "--arguments is not JSON" in r.output
    r = await hitlflow(http_stack, "session", "reply", "abc", "--arguments",
                       "[" * 300 + "]" * 300)
    assert r.exit_code == 2 and "--arguments:" in r.output
    r = await hitlflow(http_stack, "session", "reply", "abc", "--remember", "forever")
    assert r.exit_code == 2 and "--remember" in r.output
    r = await hitlflow(http_stack, "session", "list", "--api-url",
                       f"http://127.0.0.1:{free_port()}")
    assert r.exit_code == 1 and "error: unreachable: cannot reach the API" in r.output
    r = await hitlflow(http_stack, "session", "tail", "no-such-session")
    assert r.exit_code == 1 and "error: session_not_found" in r.output


async def test_a_plan_session_started_from_a_plan_file(http_stack: HttpStack, tmp_path: Path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: tiny\nsteps:\n  - {run: 'echo hi'}\n"
                    "  - {name: 'ship it?', gate: true}\n")
    sid = ok(await hitlflow(http_stack, "session", "start", "--plan", str(plan))).strip()
    s = await session_until(http_stack.http, sid, waiting("step"))
    assert s["pending"]["prompt"] == "gate: ship it?"
    out = ok(await hitlflow(http_stack, "session", "reply", sid, "--request-id",
                            s["pending"]["request_id"], "--choice", "approve"))
    assert "accepted" in out
    await session_until(http_stack.http, sid, lambda s: s["status"] == "succeeded")
    # Broken plan files: a clear error, exit 2, nothing started.
    plan.write_text("steps: [{gate: true, run: 'x'}]\n")
    bad = await hitlflow(http_stack, "session", "start", "--plan", str(plan))
    assert bad.exit_code == 1 and "gate step has no run" in bad.output
    plan.write_text("{{{")
    bad = await hitlflow(http_stack, "session", "start", "--plan", str(plan))
    assert bad.exit_code == 2 and "is not YAML or JSON" in bad.output


def commands_in(output: str) -> list[list[str]]:
    """The commands a hint printed (each on its own line), as argv without `hitlflow`."""
    return [shlex.split(line)[1:] for line in output.splitlines()
            if line.startswith("    hitlflow ")]


async def test_hints_work_when_pasted_and_contracts_go_by_prefix(http_stack: HttpStack,
                                                                 http_notes_dir: Path):
    r = await http_stack.http.post("/api/sessions", json=demo_body(http_notes_dir))
    sid = r.json()["session_id"]
    s = await session_until(http_stack.http, sid, waiting("approval"))
    eid = s["pending"]["execution_id"]
    url = ["--api-url", http_stack.url]  # no HITLFLOW_API_URL: hints carry the flag

    shown = ok(await hitlflow(None, "session", "show", sid, *url, columns=80))
    assert shown.splitlines()[0] == f"{sid}: waiting_user"  # read model, nothing behind
    approve, reject = commands_in(shown)
    assert approve == ["session", "approve", sid, eid.partition(".")[2][:8], *url]
    assert reject[:2] == ["session", "reject"]
    for line in shown.splitlines():  # at 80 columns, only a command may run longer
        assert len(line) <= 80 or line.startswith("    hitlflow "), line

    # A prefix that names several contracts, or none: a clear error, nothing sent.
    several = await hitlflow(http_stack, "session", "approve", sid, f"{sid}.")
    assert several.exit_code == 1
    assert f"error: '{sid}.' is ambiguous: 3 contracts start with it" in several.output
    none = await hitlflow(http_stack, "session", "approve", sid, "zzzz")
    assert none.exit_code == 1
    assert "error: no contract of this session starts with 'zzzz'" in none.output
    assert (await http_stack.http.get(f"/api/sessions/{sid}")).json()["replies"] == 0

    assert ok(await hitlflow(None, *approve)).strip().splitlines()[-1] == \
        f"reply to {eid} accepted"
    waited = ok(await hitlflow(http_stack, "session", "wait", sid))
    assert "waiting for you (confirm): Shall I read the groceries list back to you?" \
        in waited
    (confirm, _) = commands_in(waited)
    rid = (await http_stack.http.get(f"/api/sessions/{sid}")).json()["pending"]["request_id"]
    assert confirm == ["session", "approve", sid, rid.partition(".")[2][:8]]
    ok(await hitlflow(http_stack, "session", "approve", sid, rid.partition(".")[2][:5]))
    ended = ok(await hitlflow(http_stack, "session", "wait", sid))
    assert ended.strip() == f"session {sid} ended: succeeded"


async def test_plan_steps_approved_and_their_output_shown(http_stack: HttpStack,
                                                          tmp_path: Path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: ship\nsteps:\n"
                    "  - {name: build, run: 'echo built 42', verify: human}\n"
                    "  - {name: 'ship it?', gate: true}\n")
    sid = ok(await hitlflow(http_stack, "session", "start", "--plan", str(plan))).strip()
    waited = ok(await hitlflow(http_stack, "session", "wait", sid))
    assert "waiting for you (step): verify_human: verify step 0 and approve it" in waited
    assert "    the step's output:\n    | built 42\n" in waited
    s = (await http_stack.http.get(f"/api/sessions/{sid}")).json()
    assert s["pending"]["output"] == "built 42"
    live = (await http_stack.http.get(f"/api/sessions/{sid}",
                                      params={"consistency": "live"})).json()
    assert live["contracts"][0]["result"]["stdout"] == "built 42\n"

    rejected = await hitlflow(http_stack, "session", "reject", sid)
    assert rejected.exit_code == 2
    assert "a plan step is approved, skipped or reset, not rejected: hitlflow session " \
        f"reply {sid} --choice skip" in rejected.output
    approve, skip = commands_in(waited)
    assert skip == ["session", "reply", sid, "--choice", "skip"]
    ok(await hitlflow(http_stack, *approve))  # the verify, as the hint says
    waited = ok(await hitlflow(http_stack, "session", "wait", sid))
    assert "waiting for you (step): gate: ship it?" in waited
    ok(await hitlflow(http_stack, "session", "approve", sid))  # the gate: the pending one
    assert ok(await hitlflow(http_stack, "session", "wait", sid)).strip() == \
        f"session {sid} ended: succeeded"
    s = (await http_stack.http.get(f"/api/sessions/{sid}")).json()
    assert [c["current_status"] for c in s["contracts"]] == ["completed", "completed"]


async def test_client_commands_take_the_stack_options_of_up(http_stack: HttpStack,
                                                            tmp_path: Path):
    port = http_stack.url.rsplit(":", 1)[1]
    up_flags = ["--api-port", port, "--temporal-port", "7999", "--ui-port", "8999"]
    listed = ok(await hitlflow(None, "session", "list", "--json", "--limit", "1", *up_flags))
    assert "sessions" in json.loads(listed)
    # `up` records its API in the data directory: --data-dir alone finds it.
    (tmp_path / "api-url").write_text(http_stack.url + "\n")
    ok(await hitlflow(None, "session", "list", "--limit", "1", "--data-dir", str(tmp_path)))
    data = str(http_stack.settings.data_dir)
    sid = json.loads(listed)["sessions"][0]["session_id"]
    await session_until(http_stack.http, sid, lambda s: s["seq"] > 0)
    verified = ok(await hitlflow(None, "log", "verify", sid, "--data-dir", data, *up_flags))
    assert verified.startswith("OK: ")
    gone = await hitlflow(None, "session", "list", "--api-port", "1")
    assert gone.exit_code == 1 and "cannot reach the API at http://127.0.0.1:1" in gone.output
