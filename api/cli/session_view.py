"""What the ``session`` commands (and ``demo``) print: a session's pending request with
the commands that answer it, one line per event of its stream, and following that
stream (``session tail``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from api.cli.options import Stack, command_line
from api.sse_names import STREAM_COMPLETE

if TYPE_CHECKING:
    from api.cli.client import ApiClient
    from api.cli.sse_client import SseMessage
    from api.cli.text import AgentText

console = Console(highlight=False)
TAIL_RETRIES = 5


def tool_label(summary: str) -> str:
    """``Call tool delete_note(name='x') on notes`` → ``delete_note``."""
    if summary.startswith("Call tool "):
        return summary.removeprefix("Call tool ").split("(", 1)[0]
    return summary


def short_id(execution_id: str) -> str:
    """What ``tail`` and ``show`` print for a contract: the first 8 characters after
    ``<session id>.``, a prefix any command takes back."""
    unique = execution_id.partition(".")[2]
    return (unique or execution_id)[:8]


def reply_hints(session_id: str, pending: dict, stack: Stack | None = None
                ) -> tuple[list[str], str | None]:
    """The commands that answer ``pending`` (each works when pasted), and a note on
    the other answers it takes."""
    kind = pending["kind"]
    # Contract ids go by prefix; a step's request without a contract (`<sid>.step2-7`)
    # is found by its part after the dot as well.
    target = short_id(pending["execution_id"] or pending["request_id"])

    def cmd(*words: str) -> str:
        return command_line("session", *words, stack=stack)

    options = pending.get("options") or []
    if kind in ("approval", "confirm"):
        return [cmd("approve", session_id, target), cmd("reject", session_id, target)], None
    if kind == "choose":
        return [cmd("reply", session_id, "--choice", options[0])], \
            f"--choice takes one of: {', '.join(options)}"
    if kind == "form":
        blank = {"string": "", "number": 0, "boolean": False}
        values = {f["name"]: blank.get(f.get("type", "string"), "")
                  for f in pending.get("fields") or []}
        return [cmd("reply", session_id, "--values", json.dumps(values))], \
            "fill in the values (a JSON object)"
    if kind in ("step", "window"):
        rest = [o for o in options if o != "approve"]
        return [cmd("approve", session_id, target),
                cmd("reply", session_id, "--choice", rest[0] if rest else "skip")], \
            f"--choice takes one of: {', '.join(options)}" + (
                "; reset takes --values '{\"to_step\": N}'" if "reset" in options else "")
    if kind == "message":
        return [cmd("message", session_id, "your message"), cmd("end", session_id)], None
    return [cmd("reply", session_id, "--request-id", pending["request_id"])], None


def print_command(line: str) -> None:
    """A command on its own line, never wrapped (the terminal may fold it on screen;
    a copy still pastes as one line)."""
    console.print(f"    {line}", soft_wrap=True, markup=False, highlight=False)


def render_pending(session_id: str, pending: dict, stack: Stack | None = None) -> None:
    console.print(f"  [yellow]waiting for you[/] ({pending['kind']}): "
                  f"{escape(pending.get('prompt', ''))}")
    if pending.get("output"):
        console.print("    the step's output:")
        for line in str(pending["output"]).splitlines() or [""]:
            console.print(f"    | {line}", soft_wrap=True, markup=False, highlight=False)
    if pending.get("options"):
        console.print(f"    options: {', '.join(pending['options'])}")
    if pending.get("fields"):
        console.print("    fields: " + ", ".join(f["name"] for f in pending["fields"]))
    if pending.get("digest"):
        # On a line of its own: within 80 columns, whole (the log's digest, to compare).
        console.print(f"    digest:\n      {pending['digest']}", soft_wrap=True,
                      markup=False, highlight=False)
    if pending.get("approvers"):
        rule = f" (rule {pending['rule']})" if pending.get("rule") else ""
        console.print(f"    for: {', '.join(pending['approvers'])}{rule}", markup=False,
                      highlight=False)
    if (pending.get("approvals_required") or 1) > 1:
        who = ", ".join(a.get("name") or a.get("subject", "?")
                        for a in pending.get("approvals") or []) or "nobody yet"
        console.print(f"    approvals: {len(pending.get('approvals') or [])} of "
                      f"{pending['approvals_required']} ({who})", markup=False,
                      highlight=False)
    for step, at in (("reminded", pending.get("reminded_at")),
                     ("escalated", pending.get("escalated_at"))):
        if at:  # the wait's steps (docs/session-config.md), as the inbox shows them
            added = (pending.get("escalated_to") or []) if step == "escalated" else []
            to = f" to {', '.join(added)}" if added else ""
            console.print(f"    {step}{to} at {at}", markup=False, highlight=False)
    commands, note = reply_hints(session_id, pending, stack)
    console.print("    [dim]answer with:[/]")
    for line in commands:
        print_command(line)
    if note:
        console.print(f"    [dim]({escape(note)})[/]")


def render_event(session_id: str, msg: SseMessage, text: AgentText,
                 stack: Stack | None = None) -> None:
    """One line per event (what the agent says as it is written); event types this
    version does not know are skipped."""
    from api.sse_names import TEXT_DELTA
    from observation import event_types as ev
    from workflows.contract import actor_of

    try:
        d = msg.json() or {}
    except ValueError:
        return
    if msg.event == TEXT_DELTA:
        return text.delta(d)
    if msg.event == ev.TEXT:
        return text.final(d)
    if msg.event == ev.TURN_INTERRUPTED:  # the cut call's text: marked, never completed
        cut = d.get("cut") or {}
        if text.open is not None and text.open == cut.get("id"):
            text.console.print(escape(" [cut]"), end="")
        text.said.add(str(cut.get("id")))
    text.close()
    if msg.event == ev.CONVERSATION_STATE_CHANGED:
        console.print(f"[bold]session[/] {d.get('from')} → {d.get('to')} "
                      f"[dim]({d.get('trigger')})[/]")
    elif msg.event == ev.EXECUTION_STATE:
        actor = actor_of(str(d.get("actor_category")), str(d.get("trigger")))
        console.print(f"  [cyan]contract[/] {short_id(str(d.get('execution_id', '')))} "
                      f"{escape(tool_label(d.get('action_summary', '')))}: "
                      f"{d.get('from_status')} → {d.get('to_status')} "
                      f"[dim]({d.get('trigger')} by {actor})[/]")
    elif msg.event == ev.INTERACTION_REQUESTED and d.get("request_id"):
        render_pending(session_id, d, stack)
    elif msg.event == ev.REPLY_REFUSED:
        console.print(f"  [red]refused[/] {d.get('signal')}: {escape(str(d.get('reason')))}")
    elif msg.event == ev.TOOL_RESULT:
        what = d.get("error_message") if d.get("is_error") else d.get("text")
        console.print(f"  [magenta]tool {d.get('tool')}[/]: {escape(str(what or ''))[:200]}")
    elif msg.event == ev.TURN_INTERRUPTED:
        console.print(f"  [yellow]interrupted[/] by {escape(str(d.get('by', 'someone')))}: "
                      f"{escape(interrupt_summary(d))}")
    elif msg.event == ev.PROVIDER_WAITING:
        console.print(f"  [yellow]{escape(str(d.get('message', 'waiting for the model')))}[/]")


def interrupt_summary(d: dict[str, Any]) -> str:
    """What a ``TURN_INTERRUPTED`` line says was cut (issue 27), in words."""
    def call(c: dict[str, Any]) -> str:
        if c.get("kind") == "llm_call":
            return f"the model's answer ({c.get('id')})"
        server = f"{c['server']}." if c.get("server") else ""
        return f"the tool call {server}{c.get('tool') or c.get('id')}"
    cut, waited = d.get("cut"), d.get("waited_for")
    parts = [f"cut {call(cut)}" if cut else "ended the turn between two steps"]
    if waited:
        parts.append(f"after {call(waited)} finished (never cut)")
    dropped = len(d.get("cancelled") or []) + len(d.get("dropped") or [])
    if dropped:
        parts.append(f"{dropped} action{'' if dropped == 1 else 's'} of the old turn not run")
    return "; ".join(parts)


def follow_events(api: ApiClient, session_id: str, on_event: Callable[[SseMessage], None],
                  retries: int = TAIL_RETRIES) -> None:
    """Follow the stream until it ends (its ``stream.complete`` event, not passed on);
    reconnect (Last-Event-ID) when it drops."""
    from api.cli.client import ApiClientError

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
