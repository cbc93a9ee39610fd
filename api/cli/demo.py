"""``hitlflow demo``: run the scripted demo session through the HTTP API.

It starts the session with ``POST /api/sessions``, prints every status change,
contract transition and what the agent says (as it is written) in the order of the session's log
(its SSE stream, ``GET .../events``), and asks the person at the terminal whenever the
session waits (``--auto-approve`` answers yes for them), answering with ``POST
.../reply`` (or ``.../end`` when the agent waits for a new message). Exit code 0
when the session succeeded.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from api.cli.options import Stack, command_line, stack_options
from api.cli.session_view import follow_events, tool_label

if TYPE_CHECKING:  # loaded when the demo runs
    from api.cli.client import ApiClient
    from api.cli.sse_client import SseMessage
    from api.cli.text import AgentText

console = Console(highlight=False)


def ask(pending: dict[str, Any], auto_approve: bool) -> tuple[str, dict[str, Any]]:
    """What the person at the terminal answers (or the scripted 'yes'): the endpoint
    (``reply`` or ``end``) and its body."""
    kind, rid = pending["kind"], pending["request_id"]
    if kind == "message":
        return "end", {"by": "demo", "reason": "demo finished"}
    if kind in ("approval", "confirm"):
        yes = auto_approve or typer.confirm(f"  ? {pending['prompt']}", default=True)
        return "reply", {"request_id": rid, "approve": yes, "by": "demo"}
    options = pending.get("options") or []
    if kind == "choose":
        choice = options[0] if auto_approve else typer.prompt(
            f"  ? {pending['prompt']} {options}", default=options[0])
        return "reply", {"request_id": rid, "choice": choice, "by": "demo"}
    values = {f["name"]: (f["name"] if auto_approve else typer.prompt(
        f"  ? {f.get('label') or f['name']}")) for f in pending.get("fields") or []}
    return "reply", {"request_id": rid, "values": values, "by": "demo"}


def show(event: dict[str, Any], text: AgentText) -> None:
    """One event of the session's stream, as the demo prints it (or nothing): what
    the agent says as it is written (``text.delta``, then its ``text``), one line for
    a status change or a contract transition."""
    from api.sse_names import TEXT_DELTA
    from observation import event_types as ev

    kind, p = event["type"], event["payload"]
    if kind == TEXT_DELTA:
        text.delta(p)
        return
    if kind == ev.TEXT:
        text.final(p)
        return
    text.close()
    if kind == ev.CONVERSATION_STATE_CHANGED:
        console.print(f"[bold]session[/] {p['from']} → {p['to']} [dim]({p['trigger']})[/]")
    elif kind == ev.EXECUTION_STATE:
        console.print(f"  [cyan]contract[/] {p['execution_id'][-8:]} "
                      f"{escape(tool_label(p['action_summary']))}: {p['from_status']} → "
                      f"{p['to_status']} [dim]({p['trigger']} by {p['actor_category']})[/]")


def follow(api: ApiClient, session_id: str, auto_approve: bool) -> str:
    """Print the session's stream (its log's events: status changes, contract
    transitions and what the agent says, in the log's order) until the session ends;
    answer whenever it asks."""
    from api.cli.text import AgentText
    from observation import event_types as ev

    answered: set[str] = set()
    ended = {"status": "unknown"}
    asked: dict[str, Any] = {}
    text = AgentText(console, "[green]agent:[/] ")

    def on_event(msg: SseMessage) -> None:
        event = {"type": msg.event, "payload": msg.json() or {}}
        show(event, text)
        p = event["payload"]
        if msg.event == ev.INTERACTION_REQUESTED:  # the status change follows it
            asked.update(pending=p)
        if msg.event != ev.CONVERSATION_STATE_CHANGED:
            return
        ended["status"] = p["to"]
        pending = asked.pop("pending", None)
        if p["to"] == "waiting_user" and pending and pending["request_id"] not in answered:
            endpoint, body = ask(pending, auto_approve)
            answered.add(pending["request_id"])
            api.post(f"/api/sessions/{session_id}/{endpoint}", body)

    follow_events(api, session_id, on_event)
    return ended["status"]


def run_demo(api: ApiClient, data_dir: Path, auto_approve: bool, stack: Stack) -> str:
    from api.cli.demo_config import demo_config

    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    notes = (data_dir / "demo-notes" / session_id).resolve()
    notes.mkdir(parents=True, exist_ok=True)
    body = demo_config(notes).model_dump(mode="json", exclude_none=True)
    api.post("/api/sessions", body, params={"session_id": session_id})
    console.print(f"started demo session [bold]{session_id}[/] (notes in {notes})")
    # With the person's own stack options: the command finds the API and its token as
    # the demo did (an --api-url alone would not be sent the token up keeps).
    tail = command_line("session", "tail", session_id, stack=stack)
    console.print(f"  [dim]watch it: {escape(tail)}[/]")
    status = follow(api, session_id, auto_approve)
    console.print(f"demo session {session_id} ended [bold]{status}[/]")
    return status


def register(app: typer.Typer) -> None:
    @app.command("demo")
    @stack_options
    def demo(
        auto_approve: Annotated[bool, typer.Option(
            "--auto-approve", help="Answer yes for the person (scripts, CI).")] = False,
        *, stack: Stack,
    ) -> None:
        """Run the scripted demo session against `hitlflow up` (through its HTTP API);
        the demo's notes go under the data directory."""
        from api.cli.client import ApiClientError

        with stack.client() as api:
            try:
                status = run_demo(api, stack.resolved_data_dir, auto_approve, stack)
            except ApiClientError as err:
                console.print(f"[red]error:[/] {err.code}: {err.message}")
                raise typer.Exit(2) from None
        raise typer.Exit(0 if status == "succeeded" else 1)
