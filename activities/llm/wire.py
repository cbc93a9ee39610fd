"""Our tools as the model's functions, and our messages in chat-completions form.

The model sees our MCP tools as function tools named ``<server>__<tool>`` (made
safe for the function-name rules, see ``ToolNames``) plus two pseudo tools:
``ask_user`` (its call becomes ``ecs_request``) and ``end_conversation`` (its call
sets ``end``). That mapping, both ways, lives in this module only. Plain data: no
openai SDK here (the exporter hashes the ``tools`` payload through this module).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from workflows.canonical import canonical_json
from workflows.config import EcsRequest, FormField
from workflows.io import ChatMessage, ToolSpec

ASK_USER = "ask_user"
END_CONVERSATION = "end_conversation"

_FUNCTION_NAME_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_FUNCTION_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def _function_names(server: str, tool: str) -> Iterator[str]:
    """The function names ``(server, tool)`` may have, best first (docs/session-config.md: "What the
    model sees"): ``<server>__<tool>`` when the function-name rules allow it, then
    that name made safe (other characters as ``_``, cut to 55) with a digest of the
    original, then with digests of ``<server>__<tool>#2``, ``#3``, ... for a name
    another tool took already (server ``a__b`` with tool ``c`` and server ``a``
    with tool ``b__c`` are both ``a__b__c``)."""
    raw = f"{server}__{tool}"
    if _FUNCTION_NAME_OK.fullmatch(raw):
        yield raw
    safe = _FUNCTION_NAME_BAD_CHARS.sub("_", raw)[:55]
    for n in itertools.count(1):
        seed = raw if n == 1 else f"{raw}#{n}"
        yield f"{safe}_{hashlib.sha256(seed.encode('utf-8')).hexdigest()[:8]}"


def _function_name(server: str, tool: str) -> str:
    return next(_function_names(server, tool))


def _literal_values(model: type, field_name: str) -> list[str]:
    return list(typing.get_args(model.model_fields[field_name].annotation))  # type: ignore[attr-defined]


ASK_USER_FUNCTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": ASK_USER,
        "description": (
            "Ask the person and wait for the answer. kind=confirm: a yes/no question; "
            "kind=choose: pick one of `options` (at least two); kind=form: fill in `fields`. "
            "Use it before anything you cannot decide alone."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": _literal_values(EcsRequest, "kind")},
                "prompt": {"type": "string", "description": "The question, in plain words."},
                "options": {"type": "array", "items": {"type": "string"}},
                "fields": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "label": {"type": "string"},
                            "type": {"type": "string", "enum": _literal_values(FormField, "type")},
                            "required": {"type": "boolean"},
                        },
                        "required": ["name"],
                    },
                },
            },
            "required": ["kind", "prompt"],
        },
    },
}

END_CONVERSATION_FUNCTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": END_CONVERSATION,
        "description": "Call when the task is done and the conversation can end.",
        "parameters": {
            "type": "object",
            "properties": {
                "final_message": {"type": "string", "description": "Last words to the person."}
            },
        },
    },
}


@dataclass(frozen=True)
class ToolNames:
    """Function name <-> (server, tool), for the tools of one call.

    A ``(None, name)`` key is a tool without a server (the pseudo tools, or a
    call the model made to a function we did not offer): its function name is
    the tool name itself.
    """

    by_function: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    by_tool: dict[tuple[str | None, str], str] = field(default_factory=dict)

    @classmethod
    def build(cls, tools: list[ToolSpec]) -> ToolNames:
        names = cls()
        for reserved in (ASK_USER, END_CONVERSATION):
            names.by_function[reserved] = (None, reserved)
            names.by_tool[(None, reserved)] = reserved
        for spec in tools:
            key = (spec.server, spec.name)
            if key in names.by_tool:
                continue
            # The first name no earlier tool (nor a pseudo tool) has: never a clash.
            fname = next(f for f in _function_names(spec.server, spec.name)
                         if f not in names.by_function)
            names.by_function[fname] = key
            names.by_tool[key] = fname
        return names

    def function_name(self, server: str | None, tool: str) -> str:
        if (server, tool) in self.by_tool:
            return self.by_tool[(server, tool)]
        return tool if server is None else _function_name(server, tool)

    def resolve(self, function_name: str) -> tuple[str | None, str]:
        return self.by_function.get(function_name, (None, function_name))


def openai_tools(tools: list[ToolSpec], names: ToolNames) -> list[dict[str, Any]]:
    """The ``tools`` payload: our MCP tools, then ``ask_user`` and ``end_conversation``."""
    payload: list[dict[str, Any]] = []
    seen: set[str] = set()
    for spec in tools:
        fname = names.function_name(spec.server, spec.name)
        if fname in seen:
            continue
        seen.add(fname)
        payload.append(
            {
                "type": "function",
                "function": {
                    "name": fname,
                    "description": spec.description or f"{spec.name} (MCP server {spec.server})",
                    "parameters": spec.input_schema,
                },
            }
        )
    return [*payload, ASK_USER_FUNCTION, END_CONVERSATION_FUNCTION]


def openai_messages(messages: list[ChatMessage], names: ToolNames) -> list[dict[str, Any]]:
    """Our messages in chat-completions form (assistant tool_calls, tool results)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": names.function_name(call.server, call.tool),
                                "arguments": canonical_json(call.arguments),
                            },
                        }
                        for call in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": m.role, "content": m.content})
    return out
