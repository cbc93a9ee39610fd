"""``hitlflow session ...``: drive sessions through the HTTP API, and ``hitlflow api``.

Every command talks HTTP to ``--api-url`` (env ``HITLFLOW_API_URL``; default the
address ``hitlflow up`` serves on) with ``--token`` (env ``HITLFLOW_API_TOKEN``).
An API error prints ``error: <code>: <message>`` and exits 1; bad arguments exit 2.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from api.http_client import ApiClient, ApiClientError, default_api_url
from api.sse import STREAM_COMPLETE, SseMessage

console = Console(highlight=False)
session_app = typer.Typer(name="session", no_args_is_help=True,
                          help="Start, list, show, answer, cancel and watch sessions (HTTP).")

ApiUrl = Annotated[str | None, typer.Option(
    "--api-url", envvar="HITLFLOW_API_URL", show_envvar=False,
    help="The API's base URL (env HITLFLOW_API_URL; default http://127.0.0.1:8000).")]
Token = Annotated[str | None, typer.Option(
    "--token", envvar="HITLFLOW_API_TOKEN", show_envvar=False,
    help="Bearer token (env HITLFLOW_API_TOKEN).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
SessionArg = Annotated[str, typer.Argument(help="The session id.")]
TAIL_RETRIES = 5


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def _api(api_url: str | None, token: str | None) -> Iterator[ApiClient]:
    client = ApiClient(api_url or default_api_url(), token)
    try:
        yield client
    except ApiClientError as err:
        raise _fail(f"{err.code}: {err.message}") from None
    finally:
        client.close()


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


def tool_label(summary: str) -> str:
    """``Call tool delete_note(name='x') on notes`` → ``delete_note``."""
    if summary.startswith("Call tool "):
        return summary.removeprefix("Call tool ").split("(", 1)[0]
    return summary


def reply_hint(session_id: str, pending: dict) -> str:
    rid, kind = pending["request_id"], pending["kind"]
    base = f"hitlflow session reply {session_id} --request-id {rid}"
    return {"approval": f"{base} --approve (or --reject)", "confirm": f"{base} --approve "
            "(or --reject)", "choose": f"{base} --choice <one of {pending.get('options')}>",
            "form": f"{base} --values '{{...}}'",
            "message": f'hitlflow session message {session_id} "<text>"'}.get(kind, base)


def render_pending(session_id: str, pending: dict) -> None:
    console.print(f"  [yellow]waiting for you[/] ({pending['kind']}): "
                  f"{escape(pending.get('prompt', ''))}")
    if pending.get("options"):
        console.print(f"    options: {', '.join(pending['options'])}")
    if pending.get("fields"):
        console.print("    fields: " + ", ".join(f["name"] for f in pending["fields"]))
    console.print(f"    [dim]{escape(reply_hint(session_id, pending))}[/]")


# -- commands ---------------------------------------------------------------------------


@session_app.command("start")
def start(
    config: Annotated[str | None, typer.Argument(
        help="The session config: a JSON file, or - for standard input.")] = None,
    plan: Annotated[Path | None, typer.Option(
        "--plan", help="A plan file (YAML or JSON): start a plan session driven by it.")] = None,
    session_id: Annotated[str | None, typer.Option("--id", help="The session id "
                                                   "(default: generated).")] = None,
    api_url: ApiUrl = None, token: Token = None, as_json: AsJson = False,
) -> None:
    """Start a session from a config file (JSON; see the README), or from a plan file."""
    if (config is None) == (plan is None):
        raise _fail("give a config file (or -) or --plan FILE, not both", 2)
    body = _plan_body(plan) if plan is not None else _config_body(config)
    with _api(api_url, token) as api:
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
def list_sessions(
    status: Annotated[str | None, typer.Option("--status", help="queued, running, "
                      "waiting_user, succeeded, failed or canceled")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    api_url: ApiUrl = None, token: Token = None, as_json: AsJson = False,
) -> None:
    """List sessions, newest first (Temporal visibility)."""
    params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
    with _api(api_url, token) as api:
        page = api.get("/api/sessions", params=params)
    if as_json:
        _print_json(page)
        return
    table = Table(box=None)
    for col in ("session", "status", "started", "waiting since"):
        table.add_column(col)
    for s in page["sessions"]:
        table.add_row(s["session_id"], s["status"] or s["execution_status"] or "?",
                      (s["started_at"] or "")[:19], (s["waiting_since"] or "")[:19])
    console.print(table)


@session_app.command("show")
def show(session_id: SessionArg, api_url: ApiUrl = None, token: Token = None,
         as_json: AsJson = False) -> None:
    """Show a session: status, pending request, contracts."""
    with _api(api_url, token) as api:
        s = api.get(f"/api/sessions/{session_id}")
    if as_json:
        _print_json(s)
        return
    live = "" if s["live"] else \
        " [dim](no worker answered: status from Temporal, the rest from its log)[/]"
    console.print(f"[bold]{s['session_id']}[/]: {s['status']}{live}")
    if s.get("failure_reason"):
        console.print(f"  [red]failed:[/] {escape(s['failure_reason'])}")
    for c in s["contracts"]:
        console.print(f"  contract {c['execution_id']}  {c['current_status']:<9}  "
                      f"{escape(c['action_summary'])}")
    more = s.get("contracts_total", 0) - len(s["contracts"])
    if more > 0:  # GET session gives the first page; the timeline pages through all
        console.print(f"  [dim]… and {more} more contracts "
                      f"(/api/execution/{session_id}/timeline)[/]")
    if s.get("last_text"):
        console.print(f"  agent: {escape(s['last_text'])}")
    if s.get("pending"):
        render_pending(session_id, s["pending"])


def _send_reply(api_url: str | None, token: str | None, session_id: str,
                body: dict[str, Any]) -> None:
    with _api(api_url, token) as api:
        if not body.get("request_id"):
            pending = api.get(f"/api/sessions/{session_id}").get("pending")
            if not pending:
                raise _fail(f"nothing is pending in session {session_id}")
            body["request_id"] = pending["request_id"]
        ack = api.post(f"/api/sessions/{session_id}/reply", body)
    typer.echo(f"reply to {ack['request_id']} accepted")


@session_app.command("reply")
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
    api_url: ApiUrl = None, token: Token = None,
) -> None:
    """Answer the session's pending request."""
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
    _send_reply(api_url, token, session_id, body)


def _decide(approved: bool) -> Callable[..., None]:
    def command(
        session_id: SessionArg,
        execution_id: Annotated[str, typer.Argument(help="The contract that waits.")],
        comment: Annotated[str | None, typer.Option("--comment")] = None,
        by: Annotated[str, typer.Option("--by")] = "user",
        api_url: ApiUrl = None, token: Token = None,
    ) -> None:
        body = {"request_id": execution_id, "approve": approved, "by": by,
                **({"comment": comment} if comment is not None else {})}
        _send_reply(api_url, token, session_id, body)
    command.__doc__ = f"{'Approve' if approved else 'Reject'} an action that waits for you."
    return command


session_app.command("approve")(_decide(True))
session_app.command("reject")(_decide(False))


@session_app.command("message")
def message(session_id: SessionArg, text: Annotated[str, typer.Argument()],
            api_url: ApiUrl = None, token: Token = None) -> None:
    """Send the session a new message (starts a turn)."""
    with _api(api_url, token) as api:
        api.post(f"/api/sessions/{session_id}/messages", {"text": text})
    typer.echo("message accepted")


@session_app.command("end")
def end(session_id: SessionArg, reason: Annotated[str, typer.Option("--reason")] = "",
        api_url: ApiUrl = None, token: Token = None) -> None:
    """End the conversation while the session waits for you."""
    with _api(api_url, token) as api:
        api.post(f"/api/sessions/{session_id}/end", {"reason": reason})
    typer.echo("ending the conversation")


@session_app.command("cancel")
def cancel(session_id: SessionArg, api_url: ApiUrl = None, token: Token = None) -> None:
    """Cancel a session."""
    with _api(api_url, token) as api:
        answer = api.post(f"/api/sessions/{session_id}/cancel")
    already = (answer or {}).get("cancellation") == "already_requested"
    typer.echo("cancel already requested: the session is cancelling" if already
               else "cancel requested")


# -- tail -------------------------------------------------------------------------------


def render_event(session_id: str, msg: SseMessage) -> None:
    """One line per event; event types this version does not know are skipped."""
    try:
        d = msg.json() or {}
    except ValueError:
        return
    if msg.event == "conversation.state.changed":
        console.print(f"[bold]session[/] {d.get('from')} → {d.get('to')} "
                      f"[dim]({d.get('trigger')})[/]")
    elif msg.event == "execution_state":
        console.print(f"  [cyan]contract[/] {str(d.get('execution_id', ''))[-8:]} "
                      f"{escape(tool_label(d.get('action_summary', '')))}: "
                      f"{d.get('from_status')} → {d.get('to_status')} "
                      f"[dim]({d.get('trigger')} by {d.get('actor_category')})[/]")
    elif msg.event == "interaction.requested" and d.get("request_id"):
        render_pending(session_id, d)
    elif msg.event == "text" and d.get("text"):
        console.print(f"  [green]agent:[/] {escape(d['text'])}")
    elif msg.event == "tool_result":
        what = d.get("error_message") if d.get("is_error") else d.get("text")
        console.print(f"  [magenta]tool {d.get('tool')}[/]: {escape(str(what or ''))[:200]}")
    elif msg.event == "provider.waiting":
        console.print(f"  [yellow]{escape(str(d.get('message', 'waiting for the model')))}[/]")


def follow_events(api: ApiClient, session_id: str, on_event: Callable[[SseMessage], None],
                  retries: int = TAIL_RETRIES) -> None:
    """Follow the stream until it ends (its ``stream.complete`` event, not passed on);
    reconnect (Last-Event-ID) when it drops."""
    last_id, failures = None, 0
    while True:
        try:
            for msg in api.events(session_id, last_id):
                if msg.event == STREAM_COMPLETE:
                    return
                failures = 0
                last_id = msg.id or last_id
                on_event(msg)
            return
        except ApiClientError as err:
            if err.code != "unreachable" or failures >= retries:
                raise
            failures += 1
            time.sleep(min(2.0, 0.25 * 2 ** failures))


@session_app.command("tail")
def tail(session_id: SessionArg, api_url: ApiUrl = None, token: Token = None,
         as_json: AsJson = False) -> None:
    """Watch a session live until it ends (its SSE stream).

    Status changes, contract transitions and what the session waits for, as they
    happen; --json prints one event per line."""
    last = {"seq": 0}

    def on_event(msg: SseMessage) -> None:
        if msg.id and str(msg.id).isdigit():
            last["seq"] = int(msg.id)
        if as_json:
            typer.echo(json.dumps({"id": msg.id, "event": msg.event, "data": msg.json()}))
        else:
            render_event(session_id, msg)

    with _api(api_url, token) as api:
        try:
            follow_events(api, session_id, on_event)
        except KeyboardInterrupt:
            return
        if not as_json:  # as fresh as the last event shown
            s = api.get(f"/api/sessions/{session_id}", params={"min_seq": last["seq"]})
            console.print(f"session {session_id} ended: [bold]{s['status']}[/]")


# -- hitlflow api -----------------------------------------------------------------------


def api_command(
    host: Annotated[str | None, typer.Option("--host", help="env HITLFLOW_API_HOST")] = None,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535,
                                             help="env HITLFLOW_API_PORT")] = None,
    temporal_address: Annotated[str | None, typer.Option(
        "--temporal-address", help="host:port of Temporal (env HITLFLOW_TEMPORAL_ADDRESS)")
    ] = None,
) -> None:
    """Serve the HTTP API alone against a Temporal frontend until Ctrl-C (more API
    processes may serve the same sessions)."""
    from api.app import ApiStartError, run_api
    from api.settings import HitlflowSettings

    given = {"api_host": host, "api_port": port, "temporal_address": temporal_address}
    settings = HitlflowSettings(**{k: v for k, v in given.items() if v is not None})

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            typer.echo(f"API: http://{settings.api_host}:{settings.api_port} "
                       f"(Temporal {settings.target}); press Ctrl-C to stop.")
            await run_api(settings, stop)
        except ApiStartError as err:
            typer.echo(f"Error: {err}", err=True)
            return 1
        return 0

    code = asyncio.run(main())
    sys.stdout.flush()
    os._exit(code)  # see api.cli_stack._exit: the Temporal runtime and interpreter teardown


def register(app: typer.Typer) -> None:
    app.add_typer(session_app, name="session")
    app.command("api")(api_command)
