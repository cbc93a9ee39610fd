"""Activity events (LLM calls, MCP tool calls, the tool catalog) to log events.

LLM_CALL_STARTED is ``llm_call_started(input)`` at the activity's start (the time
of ActivityTaskStarted, which Temporal writes when the attempt ends), FINISHED the
activity's own binding payload, FAILED the ``LLMCallFailed`` detail of its failure
(or one made from the failure when the activity timed out or was cancelled). The
model's answer and every tool output are kept as artifacts: files whose bytes are
a pure function of history. A plan step's verify command (a ``run_command``
activity with purpose ``verify``) is a gate run: GATE_RUN_STARTED at its start,
GATE_RUN_FINISHED at its end (see ``gates.py``). Part of the pure mapping (see
``mapping.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent

from activities.llm.payloads import (
    canonical_bytes,
    llm_call_started,
    messages_json,
    tool_schema_hash,
)
from observation import event_types as ev
from observation.exporter import ids
from observation.exporter.chain import jsonable, logged_jcs
from observation.exporter.decode import event_ms, first_value, payload_value
from observation.exporter.gates import GateMapper, is_gate
from observation.exporter.model import (
    LLM_OUTPUT_SCHEMA,
    TOOL_RESULT_SCHEMA,
    Artifact,
    MappedEvent,
)
from workflows.canonical import jcs
from workflows.io import LLMCallFailed, LLMCallInput, LLMCallResult, LLMCallStarted

#: The most JSON of a call's messages whose parts are kept for the next call.
KEEP_CALL_BYTES = 64 * 1024


@dataclass
class _Activity:
    type: str
    input: dict[str, Any]
    started_ms: int | None = None
    attempt: int = 1


def _key(value: Any) -> bytes:
    """A part of a call's input as its JSON bytes: equal bytes, equal JSON values
    (orjson tells ``1`` from ``1.0`` and ``true``; the input is read from JSON)."""
    return orjson.dumps(value)


def _same_items(a: list[Any], b: list[Any]) -> bool:
    """The same objects in the same order (pydantic copies a list it validates)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)


class ActivityMapper(GateMapper):
    sid: str
    run_id: str | None
    _ts: str

    def __init__(self) -> None:
        GateMapper.__init__(self)
        self.activities: dict[tuple[str | None, int], _Activity] = {}
        self.artifact_paths: set[str] = set()
        #: The parts of the session's last LLM call input, by their JSON (_call_started)
        self._last_call: dict[bytes, Any] = {}

    def emit(self, type: str, payload: dict[str, Any], span: str | None = None,
             parent: str | None = None, artifact: Artifact | None = None) -> MappedEvent:
        raise NotImplementedError

    def _spans(self, act: _Activity) -> tuple[str | None, str | None]:
        if act.type == "llm_call":
            call = act.input["call_id"]
            return ids.llm_span(self.sid, call), ids.reasoning_span(self.sid, call)
        if act.type == "call_tool":
            return ids.work_item_span(self.sid, act.input["execution_id"]), \
                ids.session_span(self.sid)
        return None, None

    def _take(self, scheduled_event_id: int, keep: bool = False) -> _Activity | None:
        key = (self.run_id, scheduled_event_id)
        return self.activities.get(key) if keep else self.activities.pop(key, None)

    def _artifact(self, path: str, content: bytes, schema_id: str, act: _Activity,
                  **about: Any) -> None:
        base, n = path.removesuffix(".json"), 2
        while path in self.artifact_paths:
            path, n = f"{base}-{n}.json", n + 1
        self.artifact_paths.add(path)
        self.emit(ev.ARTIFACT_WRITTEN, {
            "name": path.rsplit("/", 1)[-1], "path": path,
            "sha256": hashlib.sha256(content).hexdigest(), "size": len(content),
            "schema_id": schema_id, "media_type": "application/json", **about},
            *self._spans(act), artifact=Artifact(path=path, content=content))

    def llm_call_scheduled(self, e: HistoryEvent) -> str | None:
        """Once ``e`` was fed: the call id of the ``llm_call`` activity it scheduled
        (None for any other event), from the input already decoded: where a stream
        may let that call's streamed text through."""
        if not e.HasField("activity_task_scheduled_event_attributes"):
            return None
        act = self.activities.get((self.run_id, e.event_id))
        if act is None or act.type != "llm_call":
            return None
        call_id = act.input.get("call_id") if isinstance(act.input, dict) else None
        return call_id if isinstance(call_id, str) else None

    # -- history events -------------------------------------------------------------

    def _scheduled(self, e: HistoryEvent) -> None:
        a = e.activity_task_scheduled_event_attributes
        self.activities[(self.run_id, e.event_id)] = _Activity(
            type=a.activity_type.name, input=first_value(a.input) or {})

    def _act_started(self, e: HistoryEvent) -> None:
        a = e.activity_task_started_event_attributes
        act = self._take(a.scheduled_event_id, keep=True)
        if act is None:
            return
        act.started_ms, act.attempt = event_ms(e), a.attempt
        if act.type == "llm_call":
            self.emit(ev.LLM_CALL_STARTED, _dump(self._call_started(act.input)),
                      *self._spans(act))
        elif act.type == "call_tool":
            i = act.input
            self.emit(ev.TOOL_CALL_STARTED, {
                "work_item_id": i["execution_id"], "server": i["server"]["name"],
                "tool": i["tool"], "arguments": i.get("arguments", {}),
                "idempotency_key": i.get("idempotency_key"), "attempt": a.attempt},
                *self._spans(act))
        elif is_gate(act.type, act.input):
            self.gate_started(act.input, a.attempt)

    def _call_started(self, raw: Any) -> LLMCallStarted:
        """``llm_call_started(LLMCallInput.model_validate(raw))``, with what the
        session's previous LLM call validated and encoded reused: a call's input
        repeats the conversation so far, the model's settings and the tools. A part
        (``llm``, ``tools``, each message) whose JSON is the very bytes of one seen in
        the previous call is handed to pydantic as the instance validated then (which
        it takes as it is), and a message's canonical text is kept with it; the rest
        is validated as ever, the whole input too (``tests/observation/
        test_hotpath.py``). Only the last call's parts are kept, and only while its
        messages' JSON is at most ``KEEP_CALL_BYTES`` (the exporter keeps a parked
        session's mapper: a long conversation is not held for it)."""
        prev, seen = self._last_call, {}
        self._last_call = seen
        if type(raw) is not dict or type(raw.get("messages")) is not list:
            return llm_call_started(LLMCallInput.model_validate(raw))
        try:
            keys = [_key(m) for m in raw["messages"]]
            llm_key, tools_key = _key(("llm", raw.get("llm"))), _key(("tools", raw.get("tools")))
        except (orjson.JSONEncodeError, TypeError):  # not orjson's to write: no reuse
            return llm_call_started(LLMCallInput.model_validate(raw))
        given = {**raw, "messages": [prev[k][0] if k in prev else m
                                     for k, m in zip(keys, raw["messages"], strict=True)]}
        if llm_key in prev:
            given["llm"] = prev[llm_key]
        if tools_key in prev:
            given["tools"] = prev[tools_key]
        inp = LLMCallInput.model_validate(given)
        texts = []
        for k, m in zip(keys, inp.messages, strict=True):
            known = prev.get(k)
            text = known[1] if known is not None and known[0] is m else \
                canonical_bytes(m.model_dump(mode="json"))
            seen[k] = (m, text)
            texts.append(text)
        seen[llm_key], seen[tools_key] = inp.llm, inp.tools
        hashed = prev.get(b"#" + tools_key)
        if hashed is None or not _same_items(hashed[0], inp.tools):
            hashed = (inp.tools, tool_schema_hash(inp.tools))
        seen[b"#" + tools_key] = hashed
        if sum(map(len, keys)) > KEEP_CALL_BYTES:  # a parked session keeps its mapper
            self._last_call = {}
        return llm_call_started(inp, messages_json(texts), lambda _: hashed[1])

    def _act_completed(self, e: HistoryEvent) -> None:
        a = e.activity_task_completed_event_attributes
        act = self._take(a.scheduled_event_id)
        if act is None:
            return
        result = first_value(a.result) or {}
        if act.type == "llm_call":
            r = LLMCallResult.model_validate(result)
            self.emit(ev.LLM_CALL_FINISHED, _dump(r.finished), *self._spans(act))
            answer = {
                "text": r.text, "tool_calls": [c.model_dump(mode="json") for c in r.tool_calls],
                "ecs_request": r.ecs_request.model_dump(mode="json") if r.ecs_request else None,
                "end": r.end}
            call = r.finished.call_id
            self._artifact(f"artifacts/llm/{call}.json", canonical_bytes(answer),
                           LLM_OUTPUT_SCHEMA, act, call_id=call, work_item_id=None)
        elif act.type == "call_tool":
            self._tool_result(act, result)
            self._artifact(f"artifacts/tool/{act.input['execution_id']}.json",
                           logged_jcs(result) if type(result) is dict
                           else jcs(jsonable(result)), TOOL_RESULT_SCHEMA, act, call_id=None,
                           work_item_id=act.input["execution_id"])
        elif is_gate(act.type, act.input):
            self.gate_finished(act.input, result)
        elif act.type == "list_tools":
            self.emit(ev.TOOLS_LISTED, {"tools": [
                {k: t.get(k) for k in ("server", "name", "safety", "annotations")}
                for t in result.get("tools", [])]})

    def _tool_result(self, act: _Activity, result: dict[str, Any]) -> None:
        i = act.input
        self.emit(ev.TOOL_RESULT, {
            "execution_id": i["execution_id"], "server": i["server"]["name"], "tool": i["tool"],
            "is_error": bool(result.get("is_error")), "text": result.get("text", ""),
            "structured": result.get("structured"), "error_message": result.get("error_message")},
            *self._spans(act))

    def _ended_badly(self, e: HistoryEvent, scheduled_event_id: int, failure: Failure | None,
                     error_class: str, summary: str) -> None:
        act = self._take(scheduled_event_id)
        if act is None:
            return
        if act.type == "call_tool":
            self._tool_result(act, {"is_error": True, "error_message": summary})
        if is_gate(act.type, act.input):
            self.gate_ended_badly(act.input, error=f"{error_class}: {summary}")
        if act.type != "llm_call" or act.started_ms is None:
            return
        payload = None
        info = failure.application_failure_info if failure is not None else None
        if info is not None and info.details.payloads:
            try:
                payload = _dump(LLMCallFailed.model_validate(
                    payload_value(info.details.payloads[0])))
            except ValueError:
                payload = None
        if payload is None:
            payload = _dump(LLMCallFailed(
                call_id=act.input["call_id"], latency_ms=max(0, event_ms(e) - act.started_ms),
                error_class=(info.type if info is not None and info.type else error_class),
                error_summary=summary[:500],
                retryable=not (info.non_retryable if info is not None else True)))
        self.emit(ev.LLM_CALL_FAILED, payload, *self._spans(act))

    def _act_failed(self, e: HistoryEvent) -> None:
        a = e.activity_task_failed_event_attributes
        self._ended_badly(e, a.scheduled_event_id, a.failure, "ActivityError", a.failure.message)

    def _act_timed_out(self, e: HistoryEvent) -> None:
        a = e.activity_task_timed_out_event_attributes
        self._ended_badly(e, a.scheduled_event_id, None, "TimeoutError",
                          a.failure.message or "the activity timed out")

    def _act_canceled(self, e: HistoryEvent) -> None:
        a = e.activity_task_canceled_event_attributes
        self._ended_badly(e, a.scheduled_event_id, None, "CancelledError",
                          "the activity was cancelled")
