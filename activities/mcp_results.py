"""MCP answers mapped to the workflow's types: tool specs (classified) and call results."""

from __future__ import annotations

import mcp_types as types

from workflows.config import McpServerConfig
from workflows.io import ToolCallResult, ToolSpec
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


def tool_result(result: types.CallToolResult) -> ToolCallResult:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content]")
    text = "\n".join(parts)
    structured = result.structured_content if isinstance(result.structured_content, dict) else None
    if result.is_error:
        return ToolCallResult(
            is_error=True, text=text, structured=structured, error_message=text or "tool failed"
        )
    return ToolCallResult(text=text, structured=structured)
