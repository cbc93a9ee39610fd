"""What the model reads back for one of its tool calls: the one function that writes it.

A tool that ran answers with what its MCP server returned, as data: the text of
its text blocks, its ``structuredContent`` as JSON (unless the text blocks
already say it: its JSON, as the MCP spec asks servers to send along, or the
value a Python server wraps as ``{"result": ...}``), a reference for an
image, audio or resource block (``[image image/png, 1204 bytes]``), and for a
failure the server's own error text. Anything longer than the context policy's
``max_tool_result_chars`` is cut, with a note that says so; the whole result
stays in history and in the log's tool artifact. A call that never reached a
server (rejected by the person, cancelled, a model mistake, an unknown outcome)
has no output: the model reads its consequence view (invariant 4), which says
what became of it. Pure: no Temporal import.
"""

from __future__ import annotations

import json
from typing import Any

from workflows.execution_views import ExecutionConsequenceView, render_for_prompt
from workflows.io import ToolCallResult

DEFAULT_MAX_CHARS = 20_000
NO_CONTENT = "(the tool returned no content)"


def tool_message_content(view: ExecutionConsequenceView, output: ToolCallResult | None = None,
                         *, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The content of the ``tool`` message that answers one tool call."""
    if output is None or view.consequence_label not in ("SUCCESS", "FAILED"):
        return render_for_prompt([view])
    if output.is_error:
        text = _blocks_text(output.content) or output.error_message or output.text
        text = text.strip() or "the tool failed without a message"
        if not text.lower().startswith("error"):
            text = f"Error: {text}"
    else:
        text = _output_text(output) or NO_CONTENT
    return _cut(text, max_chars)


def _output_text(output: ToolCallResult) -> str:
    if output.content:
        parts = [_block_text(b) for b in output.content]
        texts = [str(b.get("text", "")) for b in output.content if b.get("type") == "text"]
    else:  # a result from a worker that did not keep the blocks
        parts = texts = [output.text] if output.text else []
    if output.structured is not None and not _carried(texts, output.structured):
        parts = [*parts, _json(output.structured)]
    return "\n".join(parts)


def _carried(texts: list[str], structured: dict[str, Any]) -> bool:
    """Whether the text blocks already say what ``structuredContent`` says: its JSON
    (what the MCP spec asks a server to send along), or for a one-field object such
    as the ``{"result": ...}`` a Python server wraps a plain value in, that value."""
    if not texts:
        return False
    joined = "\n".join(texts)
    if _is_json_of(joined, structured) or any(_is_json_of(t, structured) for t in texts):
        return True
    if len(structured) != 1:
        return False
    (value,) = structured.values()
    return value in (joined, texts) or _is_json_of(joined, value) or (
        isinstance(value, list) and len(value) == len(texts)
        and all(v == t or _is_json_of(t, v) for v, t in zip(value, texts, strict=True)))


def _blocks_text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(_block_text(b) for b in blocks)


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        return f"[{kind} {block.get('mimeType', '?')}, {_size(block)}]"
    if kind == "resource":
        res = block.get("resource") or {}
        return f"[resource {res.get('uri', '?')} ({res.get('mimeType', '?')}), {_size(res)}]"
    if kind == "resource_link":
        name = f" {block['name']!r}" if block.get("name") else ""
        return f"[resource link {block.get('uri', '?')}{name} ({block.get('mimeType', '?')})]"
    return f"[{kind} content]"


def _size(holder: dict[str, Any]) -> str:
    if "size" in holder:
        return f"{holder['size']} bytes"
    if isinstance(holder.get("text"), str):
        return f"{len(holder['text'])} characters"
    return "size unknown"


def _is_json_of(text: str, value: Any) -> bool:
    try:
        return json.loads(text) == value
    except (TypeError, ValueError):
        return False


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return (f"{text[:max_chars]}\n[truncated: the first {max_chars} of {len(text)} characters "
            "are shown; the whole result is kept in the session's log]")
