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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from api.cli.options import Stack, command_line, stack_options
from api.cli.session_view import (
    console,
    follow_events,
    render_event,
    render_pending,
    reply_hints,
    short_id,
)

if TYPE_CHECKING:  # loaded when a command runs (`hitlflow --help` starts at once)
    from api.cli.client import ApiClient
    from api.cli.sse_client import SseMessage

session_app = typer.Typer(name="session", no_args_is_help=True,
                          help="Start, list, show, answer, cancel and watch sessions (HTTP).")

AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
SessionArg = Annotated[str, typer.Argument(help="The session id.")]
READABLE_WITHIN_S = 30.0
WAIT_POLL_S = 0.2


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def _api(stack: Stack) -> Iterator[ApiClient]:
    from api.cli.client import ApiClientError

    client = stack.client()
    try:
        yield client
    except ApiClientError as err:
        raise _fail(f"{err.code}: {err.message}") from None
    finally:
        client.close()


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


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
    """Start a session from a config file (JSON; see the README), or from a plan file."""
    if (config is None) == (plan is None):
        raise _fail("give a config file (or -) or --plan FILE, not both", 2)
    body = _plan_body(plan) if plan is not None else _config_body(config)
    with _api(stack) as api:
        created = api.post("/api/sessions", body,
                           params={"session_id": session_id} if session_id else None)
    if as_json:
        _print_json(created)
    else:
        typer.echo(created["session_id"])


def _config_body(config: str | None) -> Any:
    try:
        text = sys.stdin.read() if config == "-" else Path(str(config)).read_text()
        return json.loads(text)
    except OSError as err:
        raise _fail(f"cannot read {config}: {err.strerror or err}", 2) from None
    except json.JSONDecodeError as err:
        raise _fail(f"{config} is not JSON: {err}", 2) from None


def _plan_body(plan: Path) -> dict[str, Any]:
    """A plan file becomes ``{"plan": ...}``; the API validates it (422 says why)."""
    import yaml

    try:
        data = yaml.safe_load(plan.read_text())
    except OSError as err:
        raise _fail(f"cannot read {plan}: {err.strerror or err}", 2) from None
    except yaml.YAMLError as err:
        raise _fail(f"{plan} is not YAML or JSON: {err}", 2) from None
    if not isinstance(data, dict):
        raise _fail(f"{plan}: a plan is a mapping with `steps` (and a `name`)", 2)
    return {"plan": data}


@session_app.command("list")
@stack_options
def list_sessions(
    status: Annotated[str | None, typer.Option("--status", help="queued, running, "
                      "waiting_user, succeeded, failed or canceled")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    as_json: AsJson = False, *, stack: Stack,
) -> None:
    """List sessions, newest first (Temporal visibility)."""
    params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
    with _api(stack) as api:
        page = api.get("/api/sessions", params=params)
    if as_json:
        _print_json(page)
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
    with _api(stack) as api:
        s = api.get(f"/api/sessions/{session_id}")
    if as_json:
        _print_json(s)
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


def _contract_ids(api: ApiClient, session_id: str, first: dict[str, Any]) -> list[str]:
    """Every contract id of the session (the pages after ``first``, the session's
    answer), and the pending request's ids."""
    ids = [c["execution_id"] for c in first.get("contracts") or []]
    cursor = first.get("next_cursor")
    while cursor:
        page = api.get(f"/api/sessions/{session_id}",
                       params={"cursor": cursor, "limit": 500})
        ids += [c["execution_id"] for c in page.get("contracts") or []]
        cursor = page.get("next_cursor")
    pending = first.get("pending") or {}
    ids += [x for x in (pending.get("execution_id"), pending.get("request_id")) if x]
    return list(dict.fromkeys(ids))


def resolve_id(given: str, known: list[str], what: str = "contract",
               unknown_ok: bool = False) -> str:
    """The one id in ``known`` that ``given`` starts (whole, or its part after
    ``<session id>.``); a clear error when several do, or none (``unknown_ok``: then
    ``given`` itself, for the API to say what became of it)."""
    if given in known:
        return given
    found = [x for x in known if x.startswith(given) or x.partition(".")[2].startswith(given)]
    if len(found) == 1:
        return found[0]
    if not found:
        if unknown_ok:
            return given
        raise _fail(f"no {what} of this session starts with {given!r}")
    shown = ", ".join(short_id(x) if x.partition(".")[2] else x for x in found[:6])
    raise _fail(f"{given!r} is ambiguous: {len(found)} {what}s start with it ({shown}"
                f"{', …' if len(found) > 6 else ''}); give more characters")


def _send_reply(stack: Stack, session_id: str, body: dict[str, Any],
                decide: bool | None = None) -> None:
    """Answer the pending request. ``body["request_id"]`` may be a prefix, or absent
    (the pending one). ``decide``: approve (True) or reject (False) whatever the
    request's kind takes for it (``approve`` for approvals, ``choice`` for plan steps)."""
    with _api(stack) as api:
        s = api.get(f"/api/sessions/{session_id}")
        pending = s.get("pending")
        given = body.get("request_id")
        if not given:
            if not pending:
                raise _fail(f"nothing is pending in session {session_id}")
            body["request_id"] = pending["request_id"]
        else:
            rid = resolve_id(given, _contract_ids(api, session_id, s),
                             "request" if decide is None else "contract",
                             unknown_ok=decide is None)
            if pending and rid in (pending["request_id"], pending.get("execution_id")):
                rid = pending["request_id"]
            body["request_id"] = rid
        if decide is not None:
            body.update(_decision(session_id, pending, body["request_id"], decide))
        ack = api.post(f"/api/sessions/{session_id}/reply", body)
        _readable(api, session_id, ack)
    typer.echo(f"reply to {ack['request_id']} accepted")


def _readable(api: ApiClient, session_id: str, ack: dict[str, Any] | None) -> None:
    """Return once reads show the write (its ``journal_seq``), so the next command
    (``wait``, ``show``, another reply) sees the session after it."""
    seq = (ack or {}).get("journal_seq")
    deadline = time.monotonic() + READABLE_WITHIN_S
    while seq and time.monotonic() < deadline:  # the API waits up to 2 s per read
        if not api.get(f"/api/sessions/{session_id}",
                       params={"min_journal_seq": seq, "limit": 1}).get("stale"):
            return


def _decision(session_id: str, pending: dict | None, request_id: str,
              approve: bool) -> dict[str, Any]:
    """What approve / reject mean for the request that waits."""
    if pending is None or pending["request_id"] != request_id or \
            pending["kind"] in ("approval", "confirm"):
        return {"approve": approve}  # the API says why a stale one is refused
    if pending["kind"] in ("step", "window"):
        if approve:
            return {"choice": "approve"}
        raise _fail(f"a plan step is approved, skipped or reset, not rejected: "
                    f"{command_line('session', 'reply', session_id, '--choice', 'skip')} "
                    "(or --choice reset, reset_task)", 2)
    hints, _ = reply_hints(session_id, pending)
    raise _fail(f"the session waits for {pending['kind']}, not an approval: "
                f"{hints[0]}", 2)


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
    by: Annotated[str, typer.Option("--by", help="Who answers.")] = "user",
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
        try:
            body["values"] = json.loads(values)
        except json.JSONDecodeError as err:
            raise _fail(f"--values is not JSON: {err}", 2) from None
        if not isinstance(body["values"], dict):
            raise _fail("--values must be a JSON object", 2)
    if comment is not None:
        body["comment"] = comment
    _send_reply(stack, session_id, body)


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
        _send_reply(stack, session_id, body, decide=approved)
    command.__doc__ = (
        "Approve an action (or a plan step: a gate, a verify) that waits for you."
        if approved else "Reject an action that waits for you.")
    return command


session_app.command("approve")(_decide(True))
session_app.command("reject")(_decide(False))


@session_app.command("message")
@stack_options
def message(session_id: SessionArg, text: Annotated[str, typer.Argument()],
            *, stack: Stack) -> None:
    """Send the session a new message (starts a turn)."""
    with _api(stack) as api:
        _readable(api, session_id, api.post(f"/api/sessions/{session_id}/messages",
                                            {"text": text}))
    typer.echo("message accepted")


@session_app.command("end")
@stack_options
def end(session_id: SessionArg, reason: Annotated[str, typer.Option("--reason")] = "",
        *, stack: Stack) -> None:
    """End the conversation while the session waits for you."""
    with _api(stack) as api:
        _readable(api, session_id, api.post(f"/api/sessions/{session_id}/end",
                                            {"reason": reason}))
    typer.echo("ending the conversation")


@session_app.command("cancel")
@stack_options
def cancel(session_id: SessionArg, *, stack: Stack) -> None:
    """Cancel a session."""
    with _api(stack) as api:
        answer = api.post(f"/api/sessions/{session_id}/cancel")
    already = (answer or {}).get("cancellation") == "already_requested"
    typer.echo("cancel already requested: the session is cancelling" if already
               else "cancel requested")


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
    with _api(stack) as api:
        while True:
            s = api.get(f"/api/sessions/{session_id}", params={"limit": 1})
            if s["status"] in TERMINAL or (s["status"] == "waiting_user" and s["pending"]):
                break
            if time.monotonic() >= deadline:
                raise _fail(f"session {session_id} is still {s['status']} after "
                            f"{timeout:g} s")
            time.sleep(WAIT_POLL_S)
    if as_json:
        _print_json(s)
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

    with _api(stack) as api:
        try:
            follow_events(api, session_id, on_event)
        except KeyboardInterrupt:
            return
        if not as_json:  # as fresh as the last event shown
            s = api.get(f"/api/sessions/{session_id}", params={"min_seq": last["seq"]})
            console.print(f"session {session_id} ended: [bold]{s['status']}[/]")


def register(app: typer.Typer) -> None:
    app.add_typer(session_app, name="session")
