"""``hitlflow demo``: run the scripted demo session against a running stack.

It prints every status change and contract transition as it happens and asks
the person at the terminal whenever the session waits (``--auto-approve``
answers yes for them). Exit code 0 when the session succeeded.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import typer
from rich.console import Console
from temporalio.client import Client, WorkflowHandle

from api.demo import demo_config
from api.settings import HitlflowSettings
from api.worker import connect
from workflows.messages import EndInput, ReplyInput, SessionInput, SessionResult
from workflows.session_state import PendingRequest, SessionState
from workflows.statechart import SessionStatus, is_terminal

console = Console()
POLL_S = 0.2


def ask(pending: PendingRequest, auto_approve: bool) -> ReplyInput | EndInput:
    """What the person at the terminal answers (or the scripted 'yes')."""
    if pending.kind == "message":
        return EndInput(by="demo", reason="demo finished")
    if pending.kind in ("approval", "confirm"):
        yes = auto_approve or typer.confirm(f"  ? {pending.prompt}", default=True)
        return ReplyInput(request_id=pending.request_id, approve=yes, by="demo")
    if pending.kind == "choose":
        choice = pending.options[0] if auto_approve else typer.prompt(
            f"  ? {pending.prompt} {pending.options}", default=pending.options[0])
        return ReplyInput(request_id=pending.request_id, choice=choice, by="demo")
    values = {f.name: (f.name if auto_approve else typer.prompt(f"  ? {f.label or f.name}"))
              for f in pending.fields}
    return ReplyInput(request_id=pending.request_id, values=values, by="demo")


async def follow(handle: WorkflowHandle, auto_approve: bool) -> SessionStatus:
    """Print what happens until the session ends; answer whenever it waits."""
    shown_changes = shown_steps = 0
    answered: set[str] = set()
    while True:
        state = await handle.query("state", result_type=SessionState)
        for change in state.status_history[shown_changes:]:
            console.print(f"[bold]session[/] {change.from_status} → {change.to_status} "
                          f"[dim]({change.event})[/]")
        shown_changes = len(state.status_history)
        for step in state.execution_trace[shown_steps:]:
            a = step.action
            c = state.contract(a["contract_id"])
            summary = c.action_detail.get("tool") or c.action_detail.get("prompt", "")
            console.print(f"  [cyan]contract[/] {a['contract_id'][:8]} {summary}: "
                          f"{a['from']} → {a['to']} [dim]({a['trigger']} by {step.node_id})[/]")
        shown_steps = len(state.execution_trace)
        if is_terminal(state.status):
            return state.status
        p = state.pending
        if state.status == SessionStatus.WAITING_USER and p and p.request_id not in answered:
            answer = ask(p, auto_approve)
            answered.add(p.request_id)
            if isinstance(answer, EndInput):
                await handle.execute_update("end", answer)
            else:
                await handle.execute_update("reply", answer)
        await asyncio.sleep(POLL_S)


async def run_demo(settings: HitlflowSettings, auto_approve: bool,
                   client: Client | None = None) -> SessionStatus:
    client = client or await connect(settings)
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    notes = (settings.data_dir / "demo-notes" / session_id).resolve()
    notes.mkdir(parents=True, exist_ok=True)
    handle = await client.start_workflow(
        "SessionWorkflow",
        SessionInput(session_id=session_id, config=demo_config(Path(notes))),
        id=session_id, task_queue=settings.task_queue, result_type=SessionResult,
    )
    console.print(f"started demo session [bold]{session_id}[/] (notes in {notes})")
    status = await follow(handle, auto_approve)
    console.print(f"demo session {session_id} ended [bold]{status}[/]")
    return status


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        auto_approve: bool = typer.Option(False, "--auto-approve",
                                          help="Answer yes for the person (scripts, CI)."),
        data_dir: Path | None = typer.Option(None, help="The stack's data directory."),
        temporal_port: int | None = typer.Option(None, min=1, max=65535),
        temporal_address: str | None = typer.Option(None, help="host:port of Temporal."),
    ) -> None:
        """Run the scripted demo session against `hitlflow up` (same options)."""
        overrides = {k: v for k, v in {"data_dir": data_dir, "temporal_port": temporal_port,
                     "temporal_address": temporal_address}.items() if v is not None}
        settings = HitlflowSettings(**overrides)
        try:
            status = asyncio.run(run_demo(settings, auto_approve))
        except RuntimeError as err:  # e.g. Temporal not reachable
            console.print(f"[red]error:[/] {err} — is `hitlflow up` running "
                          f"({settings.target})?")
            raise typer.Exit(2) from None
        raise typer.Exit(0 if status == SessionStatus.SUCCEEDED else 1)
