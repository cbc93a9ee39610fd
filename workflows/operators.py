"""What an operator reads in the Temporal UI, and what they may send from it. Pure.

* ``static_summary`` / ``static_details``: the workflow's user metadata, set once when
  the session starts (``start_workflow(static_summary=..., static_details=...)``), from
  its config: the UI's list and detail pages say what the session is.
* ``waiting_details``: the workflow's current details (``set_current_details``), kept
  up to date by the workflow: what it waits for, and the exact signal JSON that
  answers it from the UI (``submit_reply``, ``submit_message``, ``end_conversation``).
* ``signal_input``: a signal's payload as the UI (or anyone) sent it, validated here
  rather than by the SDK, so a malformed one is refused with a reason and recorded
  (``interaction.reply.refused``) instead of dropped with a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from workflows.config import SessionConfig
from workflows.session_state import PendingRequest, SessionState

M = TypeVar("M", bound=BaseModel)

#: The signals an operator may send from the Temporal UI, with their JSON
#: (docs/operations.md, "Operators in the Temporal UI").
SIGNALS: dict[str, str] = {
    "submit_reply": 'answer the pending request: {"request_id": "<from the current '
                    'details>", "approve": true} (approval, confirm), "choice": "..." '
                    '(choose, plan steps), or "values": {...} (form); optional "comment", '
                    '"digest" (recorded as from whoever holds Temporal access)',
    "submit_message": 'a new message while the session waits for one: {"text": "..."}',
    "end_conversation": 'end the conversation while the session waits: {"reason": "..."}',
}
SUMMARY_LIMIT = 200  # the UI shows a one-line summary
INPUT_KEPT = 500  # characters of a refused signal's input kept in its event


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def static_summary(config: SessionConfig) -> str:
    """One line: the session's title (or its first message) and its driver."""
    if config.plan is not None:
        driver = f"plan {config.plan.name} ({len(config.plan.steps)} steps)"
    else:
        assert config.agent is not None
        driver = f"agent on {config.agent.llm.provider}/{config.agent.llm.model}"
    title = config.title or config.initial_message or "hitlflow session"
    return _one_line(f"{title} · {driver} · {config.mode}", SUMMARY_LIMIT)


def static_details(config: SessionConfig) -> str:
    """Markdown: the session's driver, tools or steps, its reply policy, and the
    signals an operator may send."""
    lines = [f"**{config.title or 'hitlflow session'}** ({config.mode} mode)", ""]
    if config.initial_message:
        lines.append(f"First message: {_one_line(config.initial_message, 300)}")
    if config.agent is not None:
        llm = config.agent.llm
        lines.append(f"Agent: {llm.provider} model `{llm.model}`, at most "
                     f"{config.agent.max_turns} LLM calls per turn")
        tools = ", ".join(t.name for t in config.agent.tools) or "none"
        lines.append(f"Tool servers: {tools}")
    if config.plan is not None:
        lines.append(f"Plan `{config.plan.name}`:")
        for i, step in enumerate(config.plan.steps):
            run = step.run if isinstance(step.run, str) or step.run is None else \
                f"tool {step.run.tool} on {step.run.server}"
            what = "gate (a person decides)" if step.gate else _one_line(str(run), 80)
            verify = " · verify: human" if step.verify == "human" else ""
            lines.append(f"{i}. {step.name or what}{'' if not step.name else f' — {what}'}"
                         f"{verify}")
    timeout = (f"{config.reply_timeout_s:g} s, then {config.on_reply_timeout}"
               if config.interactive_require_user_reply else
               f"{config.reply_timeout_s:g} s, then the default decision "
               f"({config.auto_decision})") if config.reply_timeout_s else "none"
    lines.append(f"Reply timeout: {timeout}")
    if config.remind_after_s is not None:
        lines.append(f"Reminder: after {config.remind_after_s:g} s")
    if config.escalate_after_s is not None:
        lines.append(f"Escalation: after {config.escalate_after_s:g} s, to "
                     f"{', '.join(config.escalate_to)}")
    lines += ["",
              "Signals an operator may send (the current details give the request id):"]
    lines += [f"- `{name}`: {what}" for name, what in SIGNALS.items()]
    return "\n".join(lines)


def reply_example(pending: PendingRequest) -> dict[str, Any]:
    """The ``submit_reply`` JSON that answers ``pending`` (its first choice)."""
    rid = pending.request_id
    if pending.kind in ("approval", "confirm"):
        return {"request_id": rid, "approve": True}
    if pending.kind in ("choose", "step", "window"):
        return {"request_id": rid, "choice": pending.options[0] if pending.options else ""}
    if pending.kind == "form":
        values = {f.name: {"string": "...", "number": 0, "boolean": True}[f.type]
                  for f in pending.fields}
        return {"request_id": rid, "values": values}
    return {"request_id": rid}


def _answer_how(p: PendingRequest) -> str:
    if p.kind == "message":
        return ("Answer from the Temporal UI: signal `submit_message` with "
                '`{"text": "..."}`, or `end_conversation` with `{"reason": "done"}`.')
    example = json.dumps(reply_example(p))
    alternatives = {
        "approval": ' (`"approve": false` rejects it)',
        "confirm": ' (`"approve": false` says no)',
        "choose": f" (`choice`: one of {', '.join(p.options)})",
        "step": f" (`choice`: one of {', '.join(p.options)}; reset takes "
                '`"values": {"to_step": n}`)',
        "window": f" (`choice`: one of {', '.join(p.options)})",
        "form": "",
    }[p.kind]
    return (f"Answer from the Temporal UI: signal `submit_reply` with `{example}`"
            f"{alternatives}; or `end_conversation` with `{{\"reason\": \"...\"}}`.")


VERBS = {
    "approval": "approval of an irreversible action",
    "confirm": "a confirmation",
    "choose": "a choice",
    "form": "a form to be filled in",
    "message": "the next message",
    "step": "a decision on a plan step",
    "window": "an in-window step (or a decision on it)",
}


def waiting_details(state: SessionState) -> str:
    """``set_current_details`` text: what the session waits for, in words, and the
    signal that answers it (markdown; the first line says it all)."""
    p = state.pending
    if state.status.value == "waiting_user" and p is not None:
        text = f"Waiting for the person: {VERBS[p.kind]} — {p.prompt} (request {p.request_id})"
        if p.output:
            text += f"\n\nThe step's output:\n\n```\n{p.output}\n```"
        if p.approvers or p.approvals_required > 1:  # a rule says who (issue 24)
            who = ", ".join(p.approvers) or "the session's approvers"
            text += f"\n\nFor {who}" + (f" (rule {p.rule})" if p.rule else "")
            if p.approvals_required > 1:
                so_far = ", ".join(a.name or a.subject for a in p.approvals) or "nobody yet"
                text += (f": {p.approvals_required} different approvers; approved so far "
                         f"by {so_far}")
        steps = _wait_steps(state.config, p)
        if steps:
            text += f"\n\n{steps}"
        return f"{text}\n\n{_answer_how(p)}"
    if state.status.value == "running":
        return "Running: the agent is working"
    if state.status.value == "queued":
        return "Queued: a turn is about to start"
    return f"Session {state.status.value}" + (
        f": {state.failure_reason}" if state.failure_reason else ""
    )


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _wait_steps(config: SessionConfig, p: PendingRequest) -> str:
    """The wait's steps done so far (workflows.wait_policy): reminded, escalated."""
    done = []
    if p.reminded_at is not None:
        done.append(f"Reminded at {_when(p.reminded_at)}")
    if p.escalated_at is not None:
        done.append(f"Escalated to {', '.join(config.escalate_to)} at {_when(p.escalated_at)}")
    return "; ".join(done) + ("." if done else "")


def signal_input(model: type[M], args: Sequence[Any]) -> tuple[M | None, str | None]:
    """A signal's input as sent (decoded JSON values, however many): ``(input,
    None)``, or ``(None, why it is malformed)``. Never raises."""
    if len(args) != 1:
        return None, (f"malformed signal: expected one JSON object, got {len(args)} "
                      "inputs")
    if not isinstance(args[0], dict):
        return None, (f"malformed signal: expected a JSON object, got "
                      f"{type(args[0]).__name__} {_clip_input(args[0])}")
    try:
        return model.model_validate(args[0]), None
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']}"
            for e in err.errors())
        return None, f"malformed signal: {problems}"


def _clip_input(value: Any) -> str:
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= INPUT_KEPT else text[:INPUT_KEPT] + "…"


def refusal(signal: str, args: Sequence[Any], reason: str) -> dict[str, Any]:
    """The journal data of a refused signal (``interaction.reply.refused``)."""
    first = args[0] if len(args) == 1 and isinstance(args[0], dict) else {}
    return {"signal": signal, "reason": reason,
            "request_id": first.get("request_id") if isinstance(
                first.get("request_id"), str) else None,
            "by": first.get("by") if isinstance(first.get("by"), str) else None,
            "input": _clip_input(list(args) if len(args) != 1 else args[0])}
