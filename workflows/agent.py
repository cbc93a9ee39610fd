"""Pure decisions of the agent driver: what to tell the LLM, what a tool call
needs, whether a reply fits, what a timeout decides, whether recovery holds.

No Temporal import: the workflow calls these and acts on their answers.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from workflows.config import McpServerConfig, SessionConfig, ToolCallRequest
from workflows.contract import (
    ActionType,
    ExecutionContract,
    ExecutionStatus,
    Trigger,
    already_done_reason,
)
from workflows.contract import idempotency_key_for as _key
from workflows.execution_views import consequence_view, render_facts_for_prompt, render_for_prompt
from workflows.io import ChatMessage, ToolCallResult, ToolSpec
from workflows.lineage import RAN_IN_PARENT
from workflows.messages import ReplyInput
from workflows.safety import SafetyClass
from workflows.session_state import PendingRequest, SessionState
from workflows.statechart import SessionEvent
from workflows.tool_messages import DEFAULT_MAX_CHARS, tool_message_content

# -- what the reasoning step sees (invariant 4: consequences, never contracts) --


def build_messages(state: SessionState) -> list[ChatMessage]:
    """The system prompt, the facts of the latest actions (consequence views: they
    summarise what older turns did), then the conversation window that the state
    keeps under the session's ContextPolicy."""
    agent = state.config.agent
    system = agent.system_prompt if agent else ""
    facts = render_facts_for_prompt(state.memory)
    if facts:
        system += "\n\nExecution facts so far (outcomes of earlier actions):\n" + facts
        older = state.contracts_total - len(state.memory) - len(state.open_contracts())
        if older > 0:
            system += f"\n({older} earlier actions are not listed.)"
    if state.messages_dropped:
        system += (f"\n\n({state.messages_dropped} earlier messages of this conversation "
                   "are not shown.)")
    return [ChatMessage(role="system", content=system), *state.conversation]


def consequence_message(contract: ExecutionContract, tool_call_id: str | None,
                        output: ToolCallResult | None = None, *,
                        max_chars: int = DEFAULT_MAX_CHARS) -> ChatMessage:
    """The answer to a tool call (``tool_message_content``: the server's output as
    data, or the consequence view when nothing ran); without a tool call to answer
    (an ECS request), the view goes in as a user turn."""
    view = consequence_view(contract)
    if tool_call_id is None:
        return ChatMessage(role="user", content=render_for_prompt([view]))
    return ChatMessage(role="tool", tool_call_id=tool_call_id,
                       content=tool_message_content(view, output, max_chars=max_chars))


def outcome_tags(contract: ExecutionContract) -> list[str]:
    """What a finished action's outcome is, for scripted alternatives (``when``): its
    status, and ``approved`` / ``rejected`` when a person decided on it."""
    tags = [contract.status.value]
    if contract.action_type is ActionType.ECS_REQUEST:
        answer = contract.result if isinstance(contract.result, dict) else {}
        if answer.get("approved") is True:
            tags.append("approved")
        elif answer.get("approved") is False or answer.get("declined"):
            tags.append("rejected")
    elif contract.irreversible and contract.status is not ExecutionStatus.REJECTED and any(
            t.trigger is Trigger.RESUME for t in contract.transitions):
        tags.append("approved")
    return tags


def script_outcomes(state: SessionState) -> dict[str, list[str]]:
    """The outcomes of the latest finished action ("") and of each tool's latest call,
    which a scripted provider's alternatives branch on; empty for other providers."""
    agent = state.config.agent
    if agent is None or agent.llm.provider != "scripted":
        return {}
    done = sorted((c for c in state.contracts if c.is_terminal),
                  key=lambda c: c.transitions[-1].timestamp)  # stable: equal times keep order
    outcomes: dict[str, list[str]] = {}
    for c in done:
        tags = outcome_tags(c)
        outcomes[""] = tags
        if c.action_type is ActionType.TOOL_CALL:
            outcomes[str(c.action_detail.get("tool"))] = tags
    return outcomes


# -- tool calls -------------------------------------------------------------------

ToolDecisionKind = Literal["run", "approve_first", "already_done", "unknown_server", "mistake"]


class ToolDecision(BaseModel):
    kind: ToolDecisionKind
    server: McpServerConfig | None = None
    tool: str
    safety: SafetyClass = SafetyClass.AT_MOST_ONCE
    idempotency_key: str
    message: str = ""
    detail: dict[str, Any]


def _find_server(config: SessionConfig, call: ToolCallRequest, catalog: list[ToolSpec]):
    servers = {s.name: s for s in (config.agent.tools if config.agent else [])}
    if call.server is not None:
        return servers.get(call.server)
    owners = [t.server for t in catalog if t.name == call.tool]
    if len(owners) == 1:
        return servers.get(owners[0])
    if len(servers) == 1:
        return next(iter(servers.values()))
    return None


def decide_tool_call(
    state: SessionState, call: ToolCallRequest, catalog: list[ToolSpec],
    *, unknown_tools: bool = False,
) -> ToolDecision:
    """Which safety class a call has, and whether it may run now, later or never.

    A call whose arguments are unusable is a ``mistake``: it fails without reaching
    a server, and the model is told why (``call_mistake``). With ``unknown_tools``
    (sessions started since the agent loop's patch) so is a call to a tool or
    server that is not there. Without it (older sessions, as they ran), a tool that
    its server did not list is sent anyway and runs at most once: the server
    refuses it with its own message, which fails the contract.
    """
    server = _find_server(state.config, call, catalog)
    server_name = server.name if server else (call.server or "?")
    detail = {"server": server_name, "tool": call.tool, "arguments": call.arguments}
    key = _key({"session": state.session_id, **detail})
    problem = call_mistake(state.config, call, catalog, unknown_tools=unknown_tools)
    if problem is not None:
        listed = server is not None and any(
            t.server == server.name and t.name == call.tool for t in catalog)
        detail = {**detail, "server": server_name if listed else (call.server or "?"),
                  "mistake": True}  # ask_user, or a tool no server has: on no server
        if call.raw_arguments is not None:
            detail["raw_arguments"] = call.raw_arguments
        return ToolDecision(kind="mistake", server=server if listed else None,
                            tool=call.tool, idempotency_key=key, detail=detail,
                            message=problem)
    if server is None:
        return ToolDecision(
            kind="unknown_server", tool=call.tool, idempotency_key=key, detail=detail,
            message=f"no configured MCP server offers tool {call.tool!r}"
            + (f" (server {call.server!r} is not configured)" if call.server else ""),
        )
    spec = next((t for t in catalog if t.server == server.name and t.name == call.tool), None)
    safety = spec.safety if spec else SafetyClass.AT_MOST_ONCE
    # The ledger outlives the contracts the state keeps: at-most-once tools (a
    # commit) are never run twice either, like irreversible ones.
    done = state.once_done.get(key)
    if done is not None:
        return ToolDecision(
            kind="already_done", server=server, tool=call.tool, safety=safety,
            idempotency_key=key, detail=detail,
            message=f"{already_done_reason(done.execution_id)}; its result was: "
                    f"{json.dumps(done.result, ensure_ascii=False, default=str)}",
        )
    kind: ToolDecisionKind = "approve_first" if safety is SafetyClass.IRREVERSIBLE else "run"
    return ToolDecision(
        kind=kind, server=server, tool=call.tool, safety=safety, idempotency_key=key,
        detail=detail,
    )


# -- model mistakes ----------------------------------------------------------------


def call_mistake(config: SessionConfig, call: ToolCallRequest, catalog: list[ToolSpec],
                 *, unknown_tools: bool = True) -> str | None:
    """Why a tool call of the model cannot be made, in words the model can act on,
    or None when it can: unusable arguments (the LLM activity checked them against
    the tool's input schema), and with ``unknown_tools`` a server that is not
    configured or a tool its server did not list."""
    if call.arguments_error is not None:
        return f"{call.arguments_error}. Call the tool again with arguments that fit its schema."
    if not unknown_tools:
        return None
    server = _find_server(config, call, catalog)
    if server is None:
        where = f" (there is no tool server {call.server!r})" if call.server else ""
        return f"there is no tool {call.tool!r}{where}. Call one of the tools you were given."
    if not any(t.server == server.name and t.name == call.tool for t in catalog):
        return (f"there is no tool {call.tool!r} on {server.name!r}. "
                "Call one of the tools you were given.")
    return None


class MistakeVerdict(BaseModel):
    """What an answer's mistakes make of the session: the count of answers in a row
    with a mistake, and the reason to fail when that is past the bound."""

    consecutive: int
    fail_reason: str | None = None


def judge_mistakes(consecutive: int, problems: list[str], limit: int) -> MistakeVerdict:
    """One model answer's mistakes (``problems``, one per bad tool call) against the
    session's bound: an answer without a mistake resets the count; an answer with
    some adds one, and past ``limit`` answers in a row the session fails. Up to the
    bound, each mistake goes back to the model as a failed tool result."""
    if not problems:
        return MistakeVerdict(consecutive=0)
    count = consecutive + 1
    if count <= limit:
        return MistakeVerdict(consecutive=count)
    return MistakeVerdict(consecutive=count, fail_reason=(
        f"the model made mistakes in {count} answers in a row (max_consecutive_mistakes "
        f"is {limit}); the last: {problems[-1]}"))


# -- replies ------------------------------------------------------------------------


def reply_problem(pending: PendingRequest | None, reply: ReplyInput) -> str | None:
    """Why ``reply`` cannot be accepted now, or None when it fits the request."""
    if pending is None:
        return "nothing is pending: the session is not waiting for a reply"
    if pending.kind == "message":
        return "the session waits for a new message, not a reply: send a message instead"
    if reply.request_id != pending.request_id:
        return (
            f"reply names request {reply.request_id!r}, but the pending request is "
            f"{pending.request_id!r}"
        )
    if pending.kind in ("step", "window"):
        return None  # plan commands are checked against the plan's cursor by the workflow
    if pending.kind in ("approval", "confirm") and reply.approve is None:
        return f"a {pending.kind} request needs `approve`: true or false"
    if pending.kind == "choose" and reply.choice not in pending.options:
        return f"`choice` must be one of {pending.options}"
    if pending.kind == "form":
        values = reply.values or {}
        missing = [f.name for f in pending.fields if f.required and f.name not in values]
        unknown = sorted(set(values) - {f.name for f in pending.fields})
        if missing or unknown:
            return f"form values: missing {missing}, unknown {unknown}"
        types = {"string": str, "number": (int, float), "boolean": bool}
        for f in pending.fields:
            if f.name in values and not isinstance(values[f.name], types[f.type]):
                return f"form field {f.name!r} must be a {f.type}"
    return None


def answer_of(pending: PendingRequest, reply: ReplyInput) -> dict[str, Any]:
    answer: dict[str, Any]
    if pending.kind in ("step", "window"):
        answer = {"choice": reply.choice, "values": reply.values or {}}
    elif pending.kind in ("approval", "confirm"):
        answer = {"approved": bool(reply.approve)}
    elif pending.kind == "choose":
        answer = {"choice": reply.choice}
    else:
        answer = {"values": reply.values or {}}
    if reply.comment:
        answer["comment"] = reply.comment
    return answer


def auto_answer(pending: PendingRequest, config: SessionConfig) -> dict[str, Any]:
    """The documented default decision of ``interaction.auto_decide.timeout``.

    approval and confirm follow ``auto_decision`` (default: reject; always reject for a
    fork's call that its parent already sent, ``RAN_IN_PARENT``); choose takes
    the first option when approving, declines otherwise; a form is declined
    (values cannot be invented); a plan step is approved, or the plan stops.
    """
    approve = config.auto_decision == "approve" and pending.reason_code != RAN_IN_PARENT
    if pending.kind == "step":  # a plan fails closed: 'reject' stops it
        return {"choice": "approve" if approve else "stop", "auto": True}
    if pending.kind in ("approval", "confirm"):
        return {"approved": approve, "auto": True}
    if pending.kind == "choose" and approve:
        return {"choice": pending.options[0], "auto": True}
    return {"declined": True, "auto": True}


# -- restart recovery (seeds 004 and 000) -------------------------------------------


class RecoveryDecision(BaseModel):
    event: SessionEvent
    waiting_contracts: int
    expected_waiting: int
    warnings: list[str]
    reason: str


def recovery_check(state: SessionState) -> RecoveryDecision:
    """Resume alignment: count WAITING contracts against the pending request, then
    preserve the wait if the request and its handle are valid, else fail."""
    pending = state.pending
    waiting = [c for c in state.contracts if c.status == ExecutionStatus.WAITING]
    expected = 1 if pending is not None and pending.execution_id else 0
    warnings = []
    if len(waiting) != expected:
        warnings.append(
            f"alignment: {len(waiting)} WAITING contract(s), expected {expected} "
            f"for the pending request"
        )
    problem = None
    if pending is None:
        problem = "no pending request"
    elif pending.execution_id is not None:
        try:
            c = state.contract(pending.execution_id)
        except KeyError:
            problem = f"pending request names unknown contract {pending.execution_id}"
        else:
            if c.status != ExecutionStatus.WAITING:
                problem = f"contract {c.execution_id} is {c.status.value}, not waiting"
    event = (
        SessionEvent.RESTART_RECONCILE_FAILED if problem else SessionEvent.RESTART_PRESERVE_WAITING
    )
    return RecoveryDecision(
        event=event, waiting_contracts=len(waiting), expected_waiting=expected,
        warnings=warnings, reason=problem or "pending request and its contract are valid",
    )
