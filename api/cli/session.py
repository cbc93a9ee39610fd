"""``hitlflow session ...``: drive sessions through the HTTP API.

Every command talks HTTP to the API of the stack named by the options ``up`` takes
(``--data-dir``, ``--api-port``, or ``--api-url``; ``api.cli.options``) with
``--token`` (env ``HITLFLOW_API_TOKEN``). An API error prints ``error: <code>:
<message>`` and exits 1; bad arguments exit 2. Contracts are named by any unique
prefix of their id (or of the part after ``<session id>.``, which ``tail`` and ``show``
print). The commands printed as hints work when pasted, and stand on their own line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from api.cli.options import Stack, stack_options
from api.cli.session_reply import (
    api_of,
    error,
    print_json,
    readable,
    send_reply,
)
from api.cli.session_view import (
    console,
    follow_events,
    render_event,
    render_pending,
    short_id,
)
from workflows.limits import MAX_DEPTH_CEILING, scan_json_text

if TYPE_CHECKING:  # loaded when a command runs (`hitlflow --help` starts at once)
    from api.cli.sse_client import SseMessage

session_app = typer.Typer(name="session", no_args_is_help=True,
                          help="Start, list, show, answer, cancel and watch sessions (HTTP).")

AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
SessionArg = Annotated[str, typer.Argument(help="The session id.")]
WAIT_POLL_S = 0.2


# -- commands ---------------------------------------------------------------------------


@session_app.command("start")
@stack_options
def start(
    config: Annotated[str | None, typer.Argument(
        help="The session config: a JSON file, or - for standard input.")] = None,
    plan: Annotated[Path | None, typer.Option(
        "--plan", help="A plan file (YAML or JSON): start a plan session driven by it.")] = None,
    session_id: Annotated[str | None, typer.Option("--id", help="The session id "
                                                   "(default: generated).")] = None,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """Start a session from a config file (JSON; docs/session-config.md), or from a plan file."""
    if (config is None) == (plan is None):
        error("give a config file (or -) or --plan FILE, not both", 2)
    body = _plan_body(plan) if plan is not None else _config_body(config)
    with api_of(stack) as api:
        created = api.post("/api/sessions", body,
                           params={"session_id": session_id} if session_id else None)
    if as_json:
        print_json(created)
    else:
        typer.echo(created["session_id"])


def _config_body(config: str | None) -> Any:
    try:
        text = sys.stdin.read() if config == "-" else Path(str(config)).read_text()
        beyond = scan_json_text(text, MAX_DEPTH_CEILING)  # before json.loads recurses
        if beyond is not None:
            error(f"{config}: {beyond.message}", 2)
        return json.loads(text)
    except OSError as err:
        error(f"cannot read {config}: {err.strerror or err}", 2)
    except json.JSONDecodeError as err:
        error(f"{config} is not JSON: {err}", 2)


def _plan_body(plan: Path) -> dict[str, Any]:
    """A plan file becomes ``{"plan": ...}``; the API validates it (422 says why)."""
    import yaml

    try:
        data = yaml.safe_load(plan.read_text())
    except OSError as err:
        error(f"cannot read {plan}: {err.strerror or err}", 2)
    except yaml.YAMLError as err:
        error(f"{plan} is not YAML or JSON: {err}", 2)
    if not isinstance(data, dict):
        error(f"{plan}: a plan is a mapping with `steps` (and a `name`)", 2)
    return {"plan": data}


@session_app.command("list")
@stack_options
def list_sessions(
    status: Annotated[str | None, typer.Option("--status", help="queued, running, "
                      "waiting_user, succeeded, failed or canceled")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    waiting_for_me: Annotated[bool, typer.Option(
        "--waiting-for-me", help="Only sessions whose pending request you may answer.")
    ] = False,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """List the sessions you may see, newest first."""
    params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {}),
                              **({"waiting_for": "me"} if waiting_for_me else {})}
    with api_of(stack) as api:
        page = api.get("/api/sessions", params=params)
    if as_json:
        print_json(page)
        return
    from rich.table import Table

    table = Table(box=None)
    for col in ("session", "status", "started", "waiting since"):
        table.add_column(col)
    for s in page["sessions"]:
        table.add_row(s["session_id"], s["status"] or s["execution_status"] or "?",
                      (s["started_at"] or "")[:19], (s["waiting_since"] or "")[:19])
    console.print(table)


@session_app.command("show")
@stack_options
def show(session_id: SessionArg, as_json: AsJson = False, *, stack: Stack) -> None:
    """Show a session: status, pending request, contracts."""
    with api_of(stack) as api:
        s = api.get(f"/api/sessions/{session_id}")
    if as_json:
        print_json(s)
        return
    # Reads come from the read model (`live` is false there by design): say only when
    # the answer is behind the session.
    note = " [dim](not exported yet: Temporal's record of it)[/]" if not s.get("seq") else \
        " [dim](the read model had not caught up: an older view)[/]" if s.get("stale") else ""
    console.print(f"[bold]{s['session_id']}[/]: {s['status']}{note}")
    if s.get("failure_reason"):
        console.print(f"  [red]failed:[/] {escape(s['failure_reason'])}")
    for c in s["contracts"]:
        console.print(f"  contract {short_id(c['execution_id'])}  "
                      f"{c['current_status']:<9}  {escape(c['action_summary'])}")
    more = s.get("contracts_total", 0) - len(s["contracts"])
    if more > 0:  # GET session gives the first page; the timeline pages through all
        console.print(f"  [dim]… and {more} more contracts "
                      f"(/api/execution/{session_id}/timeline)[/]")
    if s.get("last_text"):
        console.print(f"  agent: {escape(s['last_text'])}")
    if s.get("pending"):
        render_pending(session_id, s["pending"], stack)


class Remember(StrEnum):
    tool = "tool"
    arguments = "arguments"


def json_object(option: str, field: str, text: str) -> dict[str, Any]:
    """An option's JSON object, held to what any server takes before Python's parser
    (which recurses) reads it; exit 2 otherwise."""
    beyond = scan_json_text('{"' + field + '":' + text + "}", MAX_DEPTH_CEILING)
    if beyond is not None:
        error(f"{option}: {beyond.message}", 2)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        error(f"{option} is not JSON: {err}", 2)
    if not isinstance(value, dict):
        error(f"{option} must be a JSON object", 2)
    return value


@session_app.command("reply")
@stack_options
def reply(
    session_id: SessionArg,
    request_id: Annotated[str | None, typer.Option(
        "--request-id", help="The request to answer (default: the pending one).")] = None,
    approve: Annotated[bool | None, typer.Option(
        "--approve/--reject", help="For approval and confirm requests.")] = None,
    choice: Annotated[str | None, typer.Option("--choice", help="For choose requests.")
                      ] = None,
    values: Annotated[str | None, typer.Option(
        "--values", help="For form requests: a JSON object.")] = None,
    comment: Annotated[str | None, typer.Option("--comment")] = None,
    arguments: Annotated[str | None, typer.Option("--arguments", help=(
        "Approve with these arguments instead (a JSON object; tools a rule marks "
        "editable)."))] = None,
    remember: Annotated[Remember | None, typer.Option("--remember", help=(
        "Approve, and do not ask again in this session for this tool (any arguments) or "
        "for these arguments."))] = None,
    by: Annotated[str, typer.Option("--by", help=(
        "Kept for old scripts; the log names who you are signed in as."))] = "user",
    *, stack: Stack,
) -> None:
    """Answer the session's pending request (named by --request-id or any unique
    prefix of it; default: the pending one)."""
    body: dict[str, Any] = {"request_id": request_id, "by": by}
    if approve is not None:
        body["approve"] = approve
    if choice is not None:
        body["choice"] = choice
    if values is not None:
        body["values"] = json_object("--values", "values", values)
    if arguments is not None:
        body["arguments"] = json_object("--arguments", "arguments", arguments)
    if remember is not None:
        body["remember"] = remember.value
    if comment is not None:
        body["comment"] = comment
    send_reply(stack, session_id, body)



def _decide(approved: bool) -> Callable[..., None]:
    @stack_options
    def command(
        session_id: SessionArg,
        execution_id: Annotated[str | None, typer.Argument(
            help="The contract that waits (any unique prefix of its id; default: the "
            "pending request).")] = None,
        comment: Annotated[str | None, typer.Option("--comment")] = None,
        by: Annotated[str, typer.Option("--by")] = "user",
        *, stack: Stack,
    ) -> None:
        body = {"request_id": execution_id, "by": by,
                **({"comment": comment} if comment is not None else {})}
        send_reply(stack, session_id, body, decide=approved)
    command.__doc__ = (
        "Approve an action (or a plan step: a gate, a verify) that waits for you."
        if approved else "Reject an action that waits for you.")
    return command


session_app.command("approve")(_decide(True))
session_app.command("reject")(_decide(False))


class IfBusy(StrEnum):
    enqueue = "enqueue"
    interrupt = "interrupt"
    reject = "reject"


def say(session_id: SessionArg, text: Annotated[str, typer.Argument()],
        if_busy: Annotated[IfBusy, typer.Option("--if-busy", help=(
            "While the agent works: enqueue (wait for its next LLM call), interrupt (cut "
            "the turn; a new one starts with the message; a plan stops at the step "
            "boundary and waits for you) or reject (refused, nothing changes)."
            ))] = IfBusy.enqueue,
        *, stack: Stack) -> None:
    """Send the session a message (it starts a turn; while the agent works, --if-busy
    says what it does)."""
    body: dict[str, Any] = {"text": text}
    if if_busy is not IfBusy.enqueue:
        body["if_busy"] = if_busy.value
    with api_of(stack) as api:
        ack = api.post(f"/api/sessions/{session_id}/messages", body)
        if (ack or {}).get("status") == "running":
            # The agent works: the message is taken at its next step (or once the call
            # an interrupt waits for is done), not now: nothing to wait for here.
            typer.echo("message accepted" + (
                ": interrupting the turn or plan step in progress"
                if if_busy is IfBusy.interrupt
                else ": the agent takes it at its next step"))
            return
        readable(api, session_id, ack)
    typer.echo("message accepted")


session_app.command("say")(stack_options(say))
session_app.command("message", help="The same as `say`.")(stack_options(say))


@session_app.command("end")
@stack_options
def end(session_id: SessionArg, reason: Annotated[str, typer.Option("--reason")] = "",
        *, stack: Stack) -> None:
    """End the conversation while the session waits for you."""
    with api_of(stack) as api:
        readable(api, session_id, api.post(f"/api/sessions/{session_id}/end",
                                            {"reason": reason}))
    typer.echo("ending the conversation")


@session_app.command("standing")
@stack_options
def standing(
    session_id: SessionArg,
    revoke: Annotated[str | None, typer.Option(
        "--revoke", help="Revoke this standing decision (operators only).")] = None,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """List the session's standing decisions ("approve, and do not ask again"), or
    revoke one (--revoke SD): the next matching call asks again."""
    with api_of(stack) as api:
        if revoke is not None:
            readable(api, session_id, api.request(
                "DELETE", f"/api/sessions/{session_id}/standing/{revoke}", json={}))
            typer.echo(f"standing decision {revoke} revoked")
            return
        found = api.get(f"/api/sessions/{session_id}/standing")["standing"]
    if as_json:
        print_json(found)
        return
    if not found:
        typer.echo(f"session {session_id} has no standing decisions")
    for sd in found:
        args = "any arguments" if sd.get("arguments") is None else json.dumps(
            sd["arguments"], sort_keys=True)
        who = sd["set_by"].get("name") or sd["set_by"]["subject"]
        typer.echo(f"{sd['standing_id']}  {sd['tool']}  {args}  set by {who} on "
                   f"{sd['request_id']} at {sd['at']}")


@session_app.command("cancel")
@stack_options
def cancel(session_id: SessionArg, *, stack: Stack) -> None:
    """Cancel a session."""
    with api_of(stack) as api:
        answer = api.post(f"/api/sessions/{session_id}/cancel")
    already = (answer or {}).get("cancellation") == "already_requested"
    typer.echo("cancel already requested: the session is cancelling" if already
               else "cancel requested")


@session_app.command("fork")
@stack_options
def fork(
    session_id: SessionArg,
    at: Annotated[int, typer.Option("--at", min=1, help=(
        "The line (seq) of the session's log to fork at: where it waits for the "
        "person's next message (`session tail` and `log show` print the seqs)."))],
    message: Annotated[str | None, typer.Option("--message", help=(
        "The person's message there, in place of the one the session got."))] = None,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """Start a new session from a point of this one's past: its state there, rebuilt
    from the log and history, nothing run again; the session itself is not touched.
    Prints the new session's id."""
    body: dict[str, Any] = {"at_seq": at}
    if message is not None:
        body["message"] = message
    with api_of(stack) as api:
        created = api.post(f"/api/sessions/{session_id}/fork", body)
    if as_json:
        print_json(created)
    else:
        typer.echo(created["session_id"])


TERMINAL = ("succeeded", "failed", "canceled")


@session_app.command("wait")
@stack_options
def wait(
    session_id: SessionArg,
    timeout: Annotated[float, typer.Option("--timeout", min=0, help="Give up after this "
                                           "many seconds (exit 1).")] = 600.0,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """Wait until the session waits for you (then print what for, and how to answer)
    or has ended."""
    deadline = time.monotonic() + timeout
    with api_of(stack) as api:
        while True:
            s = api.get(f"/api/sessions/{session_id}", params={"limit": 1})
            if s["status"] in TERMINAL or (s["status"] == "waiting_user" and s["pending"]):
                break
            if time.monotonic() >= deadline:
                error(f"session {session_id} is still {s['status']} after "
                            f"{timeout:g} s")
            time.sleep(WAIT_POLL_S)
    if as_json:
        print_json(s)
    elif s["status"] in TERMINAL:
        console.print(f"session {session_id} ended: [bold]{s['status']}[/]")
    else:
        render_pending(session_id, s["pending"], stack)


@session_app.command("tail")
@stack_options
def tail(session_id: SessionArg, as_json: AsJson = False, *, stack: Stack) -> None:
    """Watch a session live until it ends (its SSE stream).

    Status changes, contract transitions and what the session waits for, as they
    happen; --json prints one event per line."""
    from api.cli.text import AgentText

    last = {"seq": 0}
    text = AgentText(console, "  [green]agent:[/] ")

    def on_event(msg: SseMessage) -> None:
        if msg.id and str(msg.id).isdigit():
            last["seq"] = int(msg.id)
        if as_json:
            typer.echo(json.dumps({"id": msg.id, "event": msg.event, "data": msg.json()}))
        else:
            render_event(session_id, msg, text, stack)

    with api_of(stack) as api:
        try:
            follow_events(api, session_id, on_event)
        except KeyboardInterrupt:
            return
        if not as_json:  # as fresh as the last event shown
            s = api.get(f"/api/sessions/{session_id}", params={"min_seq": last["seq"]})
            console.print(f"session {session_id} ended: [bold]{s['status']}[/]")


def register(app: typer.Typer) -> None:
    app.add_typer(session_app, name="session")
