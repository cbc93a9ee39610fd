"""Seed 003's replay reducers: the snapshot is a fold over the log's events.

``Snapshot.apply`` takes one log event (as a dict, the way it is on disk); the
snapshot of a log is the fold over its lines from ``Snapshot.initial``. The writer
keeps one incrementally; ``hitlflow log replay`` rebuilds one from the file alone.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from observation.exporter.chain import GENESIS
from workflows.canonical import jcs, plain

SNAPSHOT_VERSION = "hitlflow-snapshot-v1"
Event = dict[str, Any]


class ReplayError(ValueError):
    """A verified log whose events do not fold (e.g. a work item never queued)."""


def snapshot_bytes(snapshot: dict[str, Any]) -> bytes:
    """The exact bytes of ``snapshot.json``: JCS (RFC 8785) with a two-space indent.

    Members sorted and strings and numbers written as JCS writes them (raw UTF-8),
    each member or element on its own line indented two spaces per level, ``": "``
    after a key, ``","`` ending every member but the last, ``{}``/``[]`` when empty,
    and a final newline. Without floats and with ASCII keys this is exactly Python's
    ``json.dumps(indent=2, sort_keys=True, ensure_ascii=False)``."""
    if plain(snapshot):
        text = json.dumps(snapshot, indent=2, sort_keys=True, ensure_ascii=False)
    else:
        text = _indented(snapshot, "\n")
    return (text + "\n").encode()


def _indented(value: Any, newline: str) -> str:
    inner = newline + "  "
    if isinstance(value, dict) and value:
        members = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(f"{inner}{jcs(k).decode()}: {_indented(v, inner)}"
                              for k, v in members) + newline + "}"
    if isinstance(value, list) and value:
        return "[" + ",".join(inner + _indented(v, inner) for v in value) + newline + "]"
    return jcs(value).decode()


class Snapshot:
    def __init__(self, run_id: str) -> None:
        self.data: dict[str, Any] = {
            "version": SNAPSHOT_VERSION, "run_id": run_id, "run_state": "CREATED",
            "created_at": None, "updated_at": None, "finished_at": None,
            "artifacts": [], "work_items": [], "issues": [], "section_states": {},
            "gates": [], "head": {"last_seq": 0, "last_hash": GENESIS},
        }
        self._work: dict[str, dict[str, Any]] = {}
        self._issues: dict[str, dict[str, Any]] = {}
        self._gates: dict[str, dict[str, Any]] = {}

    @classmethod
    def replay(cls, run_id: str, events: Iterable[Event]) -> Snapshot:
        snap = cls(run_id)
        for e in events:
            snap.apply(e)
        return snap

    def to_bytes(self) -> bytes:
        return snapshot_bytes(self.data)

    def apply(self, e: Event) -> None:
        reducer = _REDUCERS.get(e["type"])
        if reducer is not None:
            try:
                reducer(self, e["payload"])
            except (KeyError, TypeError) as err:
                raise ReplayError(f"event {e.get('seq')} ({e['type']}) cannot be applied: "
                                  f"{type(err).__name__} {err}") from None
        self.data["updated_at"] = e["ts"]
        self.data["head"] = {"last_seq": e["seq"], "last_hash": e["event_hash"]}

    # -- the run -------------------------------------------------------------------------

    def _run_created(self, p: dict[str, Any]) -> None:
        self.data.update(run_id=p["session_id"], created_at=p["created_at"],
                         run_state=p["run_state"])

    def _run_state(self, p: dict[str, Any]) -> None:
        self.data["run_state"] = p["new_state"]

    def _run_ended(self, p: dict[str, Any]) -> None:
        self.data.update(run_state=p["status"], finished_at=p["finished_at"])

    def _artifact(self, p: dict[str, Any]) -> None:
        self.data["artifacts"].append({k: p.get(k) for k in (
            "name", "path", "sha256", "size", "schema_id", "work_item_id", "call_id")})

    # -- work items (contracts) ----------------------------------------------------------

    def _queued(self, p: dict[str, Any]) -> None:
        item = {
            "work_item_id": p["work_item_id"], "action_type": p["action_type"],
            "action_summary": p["action_summary"], "irreversible": p["irreversible"],
            "idempotency_key": p["idempotency_key"], "status": "pending",
            "contract_status": "pending", "queued_at": p["created_at"], "started_at": None,
            "finished_at": None, "outcome": None, "error_message": None,
        }
        self._work[item["work_item_id"]] = item
        self.data["work_items"].append(item)

    def _started(self, p: dict[str, Any]) -> None:
        self._work[p["work_item_id"]].update(status="in_progress", started_at=p["started_at"])

    def _execution_state(self, p: dict[str, Any]) -> None:
        self._work[p["execution_id"]]["contract_status"] = p["to_status"]

    def _finished(self, p: dict[str, Any]) -> None:
        self._work[p["work_item_id"]].update(
            status="completed", finished_at=p["finished_at"], outcome=p["outcome"],
            error_message=p.get("error_message"))

    # -- issues (requests to the person) -------------------------------------------------

    def _issue_opened(self, p: dict[str, Any]) -> None:
        issue = {
            "issue_id": p["issue_id"], "kind": p["kind"], "prompt": p["prompt"],
            "work_item_id": p.get("work_item_id"), "status": "OPEN", "opened_at": p["opened_at"],
            "resolved_at": None, "resolution": None, "answer": None, "by": None,
        }
        self._issues[issue["issue_id"]] = issue
        self.data["issues"].append(issue)

    def _issue_resolved(self, p: dict[str, Any]) -> None:
        self._issues[p["issue_id"]].update(
            status="RESOLVED", resolved_at=p["resolved_at"], resolution=p["resolution"],
            answer=p.get("answer"), by=p.get("by"))

    # -- gates and plan steps (seed 002) ---------------------------------------------------

    def _gate_started(self, p: dict[str, Any]) -> None:
        gate = {"gate_id": p["gate_id"], "step": p.get("step"), "command": p.get("command"),
                "status": "running", "started_at": p["started_at"], "finished_at": None,
                "passed": None, "exit_code": None}
        self._gates[gate["gate_id"]] = gate
        self.data["gates"].append(gate)

    def _gate_finished(self, p: dict[str, Any]) -> None:
        self._gates[p["gate_id"]].update(
            status="passed" if p["passed"] else "failed", passed=p["passed"],
            exit_code=p.get("exit_code"), finished_at=p["finished_at"])

    def _sections(self, states: dict[int, str]) -> None:
        self.data["section_states"].update({str(k): v for k, v in states.items()})

    def _plan(self, p: dict[str, Any]) -> None:
        t, step = p["type"], p.get("step")
        current = self.data["section_states"]
        if t == "TaskStarted" or t == "TaskReset":
            n = p.get("steps", len(current))
            self.data["section_states"] = {str(i): "NOT_STARTED" for i in range(n)}
        elif t == "StepCompleted":
            self._sections({step: "DONE" if p["exit_code"] == 0 else "FAILED"})
        elif t in ("StepApproved", "StepSkipped", "StepWaiting", "WindowLaunched"):
            states = {"StepApproved": "DONE", "StepSkipped": "SKIPPED",
                      "StepWaiting": "BLOCKED", "WindowLaunched": "RUNNING"}
            self._sections({step: states[t]})
        elif t == "WindowLost":
            self._sections({step: "BLOCKED"})
        elif t == "StepReset":
            self._sections({int(k): "NOT_STARTED" for k in current if int(k) >= p["to_step"]})


_REDUCERS: dict[str, Callable[[Snapshot, dict[str, Any]], None]] = {
    "RUN_CREATED": Snapshot._run_created,
    "RUN_STATE_CHANGED": Snapshot._run_state,
    "RUN_COMPLETED": Snapshot._run_ended,
    "RUN_FAILED": Snapshot._run_ended,
    "ARTIFACT_WRITTEN": Snapshot._artifact,
    "WORK_ITEM_QUEUED": Snapshot._queued,
    "WORK_ITEM_STARTED": Snapshot._started,
    "WORK_ITEM_FINISHED": Snapshot._finished,
    "execution_state": Snapshot._execution_state,
    "ISSUE_OPENED": Snapshot._issue_opened,
    "ISSUE_RESOLVED": Snapshot._issue_resolved,
    "GATE_RUN_STARTED": Snapshot._gate_started,
    "GATE_RUN_FINISHED": Snapshot._gate_finished,
    **{t: Snapshot._plan for t in (
        "TaskStarted", "TaskStopped", "StepCompleted", "StepApproved", "StepSkipped",
        "StepWaiting", "WindowLaunched", "WindowLost", "StepReset", "TaskReset")},
}
