"""``hitlflow demo``: run the scripted demo session through the HTTP API.

It starts the session with ``POST /api/sessions``, prints every status change and
contract transition as it happens (``GET`` the session and its timeline), and asks
the person at the terminal whenever the session waits (``--auto-approve`` answers
yes for them), answering with ``POST .../reply`` (or ``.../end`` when the agent
waits for a new message). Exit code 0 when the session succeeded.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from api.cli_options import Stack, stack_options
from api.cli_session import tool_label
from api.demo import demo_config
from api.http_client import ApiClient, ApiClientError

console = Console(highlight=False)
POLL_S = 0.2
TERMINAL = {"succeeded", "failed", "canceled"}


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


def follow(api: ApiClient, session_id: str, auto_approve: bool) -> str:
    """Print what happens until the session ends; answer whenever it waits."""
    shown_changes = shown_transitions = 0
    answered: set[str] = set()
    written = 0  # the journal position our last answer needs the reads to reflect
    while True:
        fresh = {"min_journal_seq": written} if written else {}
        s = api.get(f"/api/sessions/{session_id}", params=fresh)
        # Read at least as fresh as the session (and the same seq for all three).
        seen = {"min_seq": s.get("seq", 0)}
        # A demo session is short: one page of each holds all of it.
        # (No contracts yet: the timeline is a 404 by seed 000, so do not ask.)
        timeline = api.get(f"/api/execution/{session_id}/timeline",
                           params={"limit": 500, **seen}) if s.get("contracts_total") \
            else {"contracts": [], "transitions": []}
        history = api.get(f"/api/sessions/{session_id}/history",
                          params={"limit": 500, **seen})["status_history"]
        for change in history[shown_changes:]:
            console.print(f"[bold]session[/] {change['from_status']} → {change['to_status']} "
                          f"[dim]({change['event']})[/]")
        shown_changes = len(history)
        labels = {c["execution_id"]: tool_label(c["action_summary"])
                  for c in timeline["contracts"]}
        for t in timeline["transitions"][shown_transitions:]:
            console.print(f"  [cyan]contract[/] {t['execution_id'][-8:]} "
                          f"{labels.get(t['execution_id'], '?')}: {t['from_status']} → "
                          f"{t['to_status']} [dim]({t['trigger']} by {t['actor']})[/]")
        shown_transitions = len(timeline["transitions"])
        if s["status"] in TERMINAL:
            return s["status"]
        p = s["pending"]
        if s["status"] == "waiting_user" and p and p["request_id"] not in answered:
            endpoint, body = ask(p, auto_approve)
            answered.add(p["request_id"])
            ack = api.post(f"/api/sessions/{session_id}/{endpoint}", body)
            written = (ack or {}).get("journal_seq") or written
        time.sleep(POLL_S)


def run_demo(api: ApiClient, data_dir: Path, auto_approve: bool) -> str:
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    notes = (data_dir / "demo-notes" / session_id).resolve()
    notes.mkdir(parents=True, exist_ok=True)
    body = demo_config(notes).model_dump(mode="json", exclude_none=True)
    api.post("/api/sessions", body, params={"session_id": session_id})
    console.print(f"started demo session [bold]{session_id}[/] (notes in {notes})")
    console.print(f"  [dim]watch it: hitlflow session tail {session_id} --api-url "
                  f"{api.base_url}[/]")
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
        with stack.client() as api:
            try:
                status = run_demo(api, stack.resolved_data_dir, auto_approve)
            except ApiClientError as err:
                console.print(f"[red]error:[/] {err.code}: {err.message}")
                raise typer.Exit(2) from None
        raise typer.Exit(0 if status == "succeeded" else 1)
