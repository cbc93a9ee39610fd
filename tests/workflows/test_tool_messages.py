"""What the model reads back for a tool call: one function, one test per content type."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from workflows.contract import ActionType, Actor, ExecutionContract, Trigger
from workflows.execution_views import consequence_view
from workflows.io import ToolCallResult
from workflows.tool_messages import tool_message_content

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def contract(outcome: str, *, result=None, error: str | None = None):
    c = ExecutionContract(execution_id="s1.c1", session_id="s1",
                          action_type=ActionType.TOOL_CALL, created_at=T0,
                          action_detail={"server": "notes", "tool": "read_note",
                                         "arguments": {"name": "a"}})
    c.transition(Trigger.START, actor=Actor.REASONING, timestamp=T0)
    if outcome == "completed":
        c.transition(Trigger.SUCCEED, actor=Actor.TOOL_NODE, timestamp=T0, result=result)
    elif outcome == "failed":
        c.transition(Trigger.FAIL, actor=Actor.TOOL_NODE, timestamp=T0, error_message=error)
    return consequence_view(c)


def told(output: ToolCallResult, **kw) -> str:
    outcome = "failed" if output.is_error else "completed"
    view = contract(outcome, result=output.structured or output.text,
                    error=output.error_message)
    return tool_message_content(view, output, **kw)


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def test_text_content_is_sent_as_the_server_wrote_it():
    out = ToolCallResult(text="milk\neggs", content=[text("milk"), text("eggs")])
    assert told(out) == "milk\neggs"


def test_structured_content_is_json_not_a_python_repr():
    value = {"timezone": "UTC", "is_dst": False, "offset": None}
    out = ToolCallResult(structured=value)
    assert told(out) == '{"timezone":"UTC","is_dst":false,"offset":null}'
    assert json.loads(told(out)) == value


@pytest.mark.parametrize(("blocks", "structured"), [
    ([text('{\n  "name": "a",\n  "deleted": true\n}')], {"name": "a", "deleted": True}),
    ([text("milk")], {"result": "milk"}),                       # a wrapped plain value
    ([text("a"), text("b")], {"result": ["a", "b"]}),           # a wrapped list
])
def test_structured_content_the_text_already_says_is_not_sent_twice(blocks, structured):
    out = ToolCallResult(structured=structured, content=blocks)
    assert told(out) == "\n".join(b["text"] for b in blocks)


def test_text_and_different_structured_content_are_both_sent():
    out = ToolCallResult(structured={"count": 2}, content=[text("two notes")])
    assert told(out) == 'two notes\n{"count":2}'


@pytest.mark.parametrize(("block", "reference"), [
    ({"type": "image", "mimeType": "image/png", "size": 1204}, "[image image/png, 1204 bytes]"),
    ({"type": "audio", "mimeType": "audio/wav", "size": 88}, "[audio audio/wav, 88 bytes]"),
    ({"type": "resource", "resource": {"uri": "file:///n/a.txt", "mimeType": "text/plain",
                                       "text": "hello"}},
     "[resource file:///n/a.txt (text/plain), 5 characters]"),
    ({"type": "resource", "resource": {"uri": "file:///n/p.bin", "size": 9}},
     "[resource file:///n/p.bin (?), 9 bytes]"),
    ({"type": "resource_link", "uri": "file:///n/b.txt", "name": "b",
      "mimeType": "text/plain"}, "[resource link file:///n/b.txt 'b' (text/plain)]"),
])
def test_images_and_resources_go_as_a_reference(block, reference):
    out = ToolCallResult(content=[text("here it is"), block])
    assert told(out) == f"here it is\n{reference}"


def test_an_error_is_the_servers_error_text():
    out = ToolCallResult(is_error=True, text="note 'x' does not exist",
                         error_message="note 'x' does not exist",
                         content=[text("note 'x' does not exist")])
    assert told(out) == "Error: note 'x' does not exist"
    already = ToolCallResult(is_error=True, error_message="Error executing tool x: boom",
                             content=[text("Error executing tool x: boom")])
    assert told(already) == "Error executing tool x: boom"
    # A server that raised (no content blocks): its message.
    raised = ToolCallResult(is_error=True, error_message="Unknown tool: x")
    assert told(raised) == "Error: Unknown tool: x"


def test_a_large_result_is_cut_with_a_note():
    out = ToolCallResult(text="x" * 50, content=[text("x" * 50)])
    assert told(out, max_chars=100) == "x" * 50
    assert told(out, max_chars=20) == "x" * 20 + (
        "\n[truncated: the first 20 of 50 characters are shown; the whole result is kept in "
        "the session's log]")


def test_an_empty_result_says_so():
    assert told(ToolCallResult()) == "(the tool returned no content)"


def test_a_result_of_an_older_worker_without_blocks_still_reads_as_data():
    assert told(ToolCallResult(text="hello")) == "hello"
    out = ToolCallResult(text='{"a": 1}', structured={"a": 1})
    assert told(out) == '{"a": 1}'


def test_what_never_reached_a_server_reads_as_its_consequence():
    view = contract("failed", error="outcome unknown: the call did not report back")
    assert tool_message_content(view) == (
        "[FAILED] Call tool read_note(name='a') on notes (execution s1.c1): error: outcome "
        "unknown: the call did not report back")
