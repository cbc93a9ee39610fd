"""What an operator sees and sends in the Temporal UI: the static summary and details,
the current details naming the request and its signal JSON, and signals that are
stale or malformed: refused, recorded (`interaction.reply.refused` in the log and the
stream) and logged as one line, the session unchanged and its workflow task intact."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata

from tests.api.http_support import HttpStack, confirm_body, session_until, waiting
from workflows.operators import SIGNALS


async def refusals(lines: AsyncIterator[str], count: int) -> list[dict]:
    """The payloads of the first ``count`` refusals on an SSE stream."""
    out: list[dict] = []
    event = None
    async for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event == "interaction.reply.refused":
            out.append(json.loads(line.removeprefix("data: ")))
            if len(out) == count:
                return out
    return out


async def test_ui_metadata_and_refused_signals(http_stack: HttpStack,
                                               caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING)
    http = http_stack.http
    body = {**confirm_body(), "title": "Tidy the notes"}
    sid = (await http.post("/api/sessions", json=body)).json()["session_id"]
    s = await session_until(http, sid, waiting("confirm"))
    rid = s["pending"]["request_id"]
    h = http_stack.client.get_workflow_handle(sid)

    desc = await h.describe()
    assert await desc.static_summary() == \
        "Tidy the notes · agent on scripted/scripted · interactive"
    details = await desc.static_details()
    assert "Tool servers: none" in details
    assert all(f"`{name}`" in details for name in SIGNALS)
    meta = await h.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    current = meta.current_details
    assert current.startswith(f"Waiting for the person: a confirmation — go on? (request {rid})")
    assert f'signal `submit_reply` with `{{"request_id": "{rid}", "approve": true}}`' in current
    described = {s.name: s.description for s in meta.definition.signal_definitions}
    assert described["submit_reply"] == SIGNALS["submit_reply"]

    # What an operator may get wrong in the UI's "Send a signal" form.
    await h.signal("submit_reply", ["not", "an", "object"])
    await h.signal("submit_reply", {"request_id": rid, "approve": True, "colour": "red"})
    await h.signal("submit_reply", {"request_id": "stale", "approve": True})
    await h.signal("end_conversation", {"reasn": "typo"})
    await h.signal("submit_message", {})

    # The stream (it follows history itself) shows each refusal as it happens.
    async with http.stream("GET", f"/api/sessions/{sid}/events") as r:
        got = await asyncio.wait_for(refusals(r.aiter_lines(), 5), 30)
    assert [(p["signal"], p["request_id"]) for p in got] == [
        ("submit_reply", None), ("submit_reply", rid), ("submit_reply", "stale"),
        ("end_conversation", None), ("submit_message", None)]
    assert got[0]["reason"] == "malformed signal: expected a JSON object, got list " \
        '["not", "an", "object"]'
    assert got[1]["reason"] == "malformed signal: colour: Extra inputs are not permitted"
    assert got[2]["reason"] == ("reply names request 'stale', but the pending request is "
                                f"'{rid}'")
    assert got[3]["reason"].startswith("malformed signal: reasn:")
    assert got[4]["reason"] == "malformed signal: text: Field required"

    # Nothing changed: still waiting for the same request; a good signal then answers it.
    s = await session_until(http, sid, waiting("confirm"), consistency="live")
    assert s["pending"]["request_id"] == rid and s["replies"] == 0
    await h.signal("submit_reply", {"request_id": rid, "approve": True, "by": "operator"})
    await session_until(http, sid, lambda s: s["status"] == "succeeded")

    # The log has them too, once the exporter followed the session past its wait.
    log = (await http.get(f"/api/sessions/{sid}/log")).text
    logged = [json.loads(x)["payload"] for x in log.splitlines()
              if json.loads(x)["type"] == "interaction.reply.refused"]
    assert [{k: p[k] for k in ("signal", "reason")} for p in logged] == \
        [{k: p[k] for k in ("signal", "reason")} for p in got]

    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 5 and all("\n" not in m for m in lines)
    assert any(f"session {sid}: signal submit_reply refused: reply names request 'stale'"
               in m for m in lines)
    assert not [r for r in caplog.records if "Failed deserializing" in r.getMessage()]
