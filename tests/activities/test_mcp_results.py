"""MCP call results as data: the blocks the model and the log get (activities/mcp/results.py)."""

from __future__ import annotations

import base64

import mcp_types as types

from activities.mcp.results import tool_result


def test_blocks_are_kept_as_mcp_sends_them_without_binary_data():
    png = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()
    result = tool_result(types.CallToolResult(content=[
        types.TextContent(type="text", text="see"),
        types.ImageContent(type="image", data=png, mime_type="image/png"),
        types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri="file:///a.bin", blob=base64.b64encode(b"abc").decode())),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="file:///a.txt", mime_type="text/plain", text="hi")),
        types.ResourceLink(type="resource_link", uri="file:///b", name="b"),
    ], structured_content={"seen": True}))
    assert result.content == [
        {"type": "text", "text": "see"},
        {"type": "image", "mimeType": "image/png", "size": 100},
        {"type": "resource", "resource": {"uri": "file:///a.bin", "size": 3}},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain",
                                          "text": "hi"}},
        {"type": "resource_link", "uri": "file:///b", "name": "b"},
    ]
    assert result.structured == {"seen": True} and not result.is_error
    assert png not in result.model_dump_json()


def test_an_error_result_keeps_the_servers_text():
    result = tool_result(types.CallToolResult(
        content=[types.TextContent(type="text", text="no such note")], is_error=True))
    assert result.is_error and result.error_message == "no such note"
    assert result.content == [{"type": "text", "text": "no such note"}]


def test_results_past_the_limits_are_dropped_and_said_so():
    """A tool answering structured content nested past the limit (which its session's
    worker could not decode from history again) keeps its text; the rest is dropped,
    with a note saying where it went past the limit."""
    deep: dict = {"v": 1}
    for _ in range(300):
        deep = {"a": deep}
    result = tool_result(types.CallToolResult(
        content=[types.TextContent(type="text", text="done")], structured_content=deep))
    assert result.structured is None and not result.is_error
    assert result.text.startswith("done\n[structured content dropped: nesting deeper than")
    assert "$.structured.a.a" in result.text
    shallow = tool_result(types.CallToolResult(
        content=[types.TextContent(type="text", text="ok")], structured_content={"a": {"b": 1}}))
    assert shallow.structured == {"a": {"b": 1}} and shallow.text == "ok"
