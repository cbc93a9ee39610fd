"""The audit log as an outsider sees it: docs/audit-log.md's verifier, and a real history
that carries a given JSON value into the log."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from temporalio.api.history.v1 import HistoryEvent

from observation.exporter.decode import load_history
from workflows.canonical import MAX_SAFE_INT

REPO = Path(__file__).resolve().parents[2]
README = REPO / "docs" / "audit-log.md"
HISTORIES = REPO / "tests" / "workflows" / "histories"
#: The values a tool, an LLM or a person may send that JSON libraries disagree on.
EDGE = {
    "v8": 1e16, "two53": 2.0**53, "max": 1.7976931348623157e308, "tiny": 5e-324,
    "neg_zero": -0.0, "one": 1.0, "e21": 1e21, "e_7": 1e-7, "pi": 3.141592653589793,
    "safe": MAX_SAFE_INT, "unsafe": MAX_SAFE_INT + 2, "big": 2**64 + 1, "neg_big": -(2**70),
    "text": "é ☃ 😀 \u2028 \x00 \"\\ \ue000", "keys": {"é": 1, "😀": 2, "\ue000": 3, "": []},
}
#: EDGE as the log holds it (README, "Values").
EDGE_LOGGED = ('"keys":{"":[],"é":1,"😀":2,"\ue000":3}'.encode(),
               b'"big":"18446744073709551617"', b'"e21":1e+21', b'"e_7":1e-7',
               b'"max":1.7976931348623157e+308', b'"neg_big":"-1180591620717411303424"',
               b'"neg_zero":0', b'"one":1', b'"tiny":5e-324',
               b'"two53":9007199254740992', b'"unsafe":"9007199254740993"',
               b'"v8":10000000000000000')
DEMO_SID, DEMO = load_history((HISTORIES / "demo.json").read_text())
#: The demo history up to its first call_tool's completion (event 23).
UPTO_TOOL = 23


def readme_verifier() -> Callable[..., int]:
    """``verify(run_dir, live=False)`` of docs/audit-log.md: its one
    fenced python block, executed as printed."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
              if "\ndef verify(run_dir, live=False):" in b]
    assert len(blocks) == 1, "the README's outside verifier: one python block"
    namespace: dict = {"__name__": "readme_verifier"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace["verify"]


def carrying(value_json: bytes) -> list[HistoryEvent]:
    """The demo history up to its first tool result, with a JSON value (as text, the
    way a tool, an LLM or a person sent it) in the session's config (RUN_CREATED's
    ``config.sent``) and as that tool's structured output (``tool_result`` and the
    tool artifact)."""
    events = []
    for e in DEMO[:UPTO_TOOL]:
        copy = HistoryEvent()
        copy.CopyFrom(e)
        events.append(copy)
    start = events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert start.data.count(b'"config":{') == 1
    start.data = start.data.replace(b'"config":{', b'"config":{"sent":' + value_json + b",")
    result = events[-1].activity_task_completed_event_attributes.result.payloads[0]
    result.data = result.data.rstrip()[:-1] + b', "structured": ' + value_json + b"}"
    return events
