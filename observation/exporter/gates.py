"""Gate runs: a plan step's verify command to GATE_RUN_STARTED / GATE_RUN_FINISHED.

A gate run is a ``run_command`` activity whose input says ``purpose: "verify"``.
STARTED comes at the activity's start (its ActivityTaskStarted), FINISHED at its
end: ``passed`` is ``exit_code == 0``. A verify that never gave an exit code (its
worker was lost, it was cancelled) finished without passing, ``exit_code`` null
and the reason in ``error``: the workflow decides it as a failed verify too. One
that ended before it started gets both events at its end, so that every gate the
workflow decided on is in the log.

``gate_id`` is ``<execution_id>.verify`` (the step's contract: one verify each),
``-2``, ``-3``... should one contract ever run two. Span: ``gate/<gate_id>``,
parent: the step's work item. Part of the pure mapping (see ``mapping.py``).
"""

from __future__ import annotations

from typing import Any

from observation import event_types as ev
from observation.exporter import ids
from observation.exporter.model import MappedEvent

#: The output kept in GATE_RUN_FINISHED (stdout then stderr, like the workflow's feedback).
EXCERPT_CHARS = 2000


def is_gate(activity_type: str, activity_input: dict[str, Any]) -> bool:
    return activity_type == "run_command" and activity_input.get("purpose") == "verify"


def gate_span(session_id: str, gate_id: str) -> str:
    return ids.span_id(session_id, "gate", gate_id)


def excerpt(stdout: str, stderr: str) -> tuple[str, bool]:
    text = (stdout + stderr).strip()
    return text[:EXCERPT_CHARS], len(text) > EXCERPT_CHARS


class GateMapper:
    """State for gate runs; ``ActivityMapper`` calls it from the activity events."""

    sid: str
    _ts: str

    def __init__(self) -> None:
        self.gate_ids: dict[str, str] = {}  # execution id -> its open gate's id
        self.gates_seen: set[str] = set()

    def emit(self, type: str, payload: dict[str, Any], span: str | None = None,
             parent: str | None = None, artifact: Any = None) -> MappedEvent:
        raise NotImplementedError

    def _gate(self, inp: dict[str, Any], new: bool) -> tuple[str, dict[str, Any], str, str]:
        execution_id = inp["execution_id"]
        gate_id = self.gate_ids.get(execution_id) if not new else None
        if gate_id is None:
            base, n = f"{execution_id}.verify", 2
            gate_id = base
            while gate_id in self.gates_seen:
                gate_id, n = f"{base}-{n}", n + 1
            self.gates_seen.add(gate_id)
            self.gate_ids[execution_id] = gate_id
        about = {"gate_id": gate_id, "kind": "verify_cmd", "step": inp.get("step"),
                 "command": inp["command"], "work_item_id": execution_id}
        return gate_id, about, gate_span(self.sid, gate_id), \
            ids.work_item_span(self.sid, execution_id)

    def gate_started(self, inp: dict[str, Any], attempt: int) -> None:
        _, about, span, parent = self._gate(inp, new=True)
        self.emit(ev.GATE_RUN_STARTED, {
            **about, "attempt": attempt, "timeout_s": inp.get("timeout_s"),
            "started_at": self._ts}, span, parent)

    def _finish(self, inp: dict[str, Any], **outcome: Any) -> None:
        if inp["execution_id"] not in self.gate_ids:  # it ended before it started
            self.gate_started(inp, attempt=0)
        _, about, span, parent = self._gate(inp, new=False)
        self.gate_ids.pop(inp["execution_id"], None)
        self.emit(ev.GATE_RUN_FINISHED, {**about, **outcome, "finished_at": self._ts},
                  span, parent)

    def gate_finished(self, inp: dict[str, Any], result: dict[str, Any]) -> None:
        code = result.get("exit_code")
        text, cut = excerpt(result.get("stdout", ""), result.get("stderr", ""))
        self._finish(inp, passed=code == 0, exit_code=code,
                     duration_s=result.get("duration_s"), output_excerpt=text,
                     output_truncated=cut, killed_by_signal=result.get("killed_by_signal"),
                     error=None)

    def gate_ended_badly(self, inp: dict[str, Any], error: str) -> None:
        self._finish(inp, passed=False, exit_code=None, duration_s=None,
                     output_excerpt="", output_truncated=False, killed_by_signal=None,
                     error=error[:EXCERPT_CHARS])
