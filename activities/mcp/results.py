"""MCP answers mapped to the workflow's types: tool specs (classified) and call results."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from workflows.config import McpServerConfig
from workflows.io import ToolCallResult, ToolSpec
from workflows.limits import value_problem
from workflows.safety import ToolAnnotations, classify


def tool_spec(server: McpServerConfig, tool: types.Tool) -> ToolSpec:
    a = tool.annotations
    annotations = ToolAnnotations(
        read_only_hint=a.read_only_hint if a else None,
        destructive_hint=a.destructive_hint if a else None,
        idempotent_hint=a.idempotent_hint if a else None,
    )
    return ToolSpec(
        server=server.name,
        name=tool.name,
        description=tool.description or "",
        input_schema=tool.input_schema,
        annotations=annotations,
        safety=classify(annotations, server.tool_overrides.get(tool.name)),
    )


def content_block(block: types.ContentBlock) -> dict[str, Any]:
    """One MCP content block as data, without its binary payload: the base64 ``data``
    of an image or audio block and the ``blob`` of a resource become ``size`` (the
    decoded length in bytes), so a picture never travels through history."""
    data = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    for holder in (data, data.get("resource")):
        if isinstance(holder, dict):
            for key in ("data", "blob"):
                encoded = holder.get(key)
                if isinstance(encoded, str):
                    del holder[key]
                    holder["size"] = len(encoded) * 3 // 4 - encoded[-2:].count("=")
    return data


def tool_result(result: types.CallToolResult) -> ToolCallResult:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content]")
    text = "\n".join(parts)
    structured = result.structured_content if isinstance(result.structured_content, dict) else None
    content = [content_block(block) for block in result.content]
    # What a tool answers goes into history, which a worker must decode again: past
    # the limits (too deep, a number JSON cannot carry) it is dropped, and said so.
    for name, value in (("structured", structured), ("content", content)):
        problem = value_problem(value, root=[name])
        if problem is not None:
            text += f"\n[{name} content dropped: {problem.message}]"
            if name == "structured":
                structured = None
            else:
                content = []
    if result.is_error:
        return ToolCallResult(
            is_error=True, text=text, structured=structured, error_message=text or "tool failed",
            content=content,
        )
    return ToolCallResult(text=text, structured=structured, content=content)
