"""Seed 003's replay reducers: the log snapshot (``snapshot.json``) is a fold over
the log's events.

``LogSnapshot.apply`` takes one log event (as a dict, the way it is on disk); the
snapshot of a log is the fold over its lines from a new ``LogSnapshot``. The writer
keeps one incrementally; ``hitlflow log replay`` rebuilds one from the file alone.
Pure: no I/O. (Not seed 000's ``ExecutionSnapshot``, the view of one contract.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

from observation import event_types as ev
from observation.event_types import PLAN_TYPE_OF, LogFold, folds
from observation.exporter.chain import GENESIS
from workflows import plan
from workflows.canonical import jcs, plain
from workflows.plan import PLAN_EVENT_TYPES

SNAPSHOT_VERSION = "hitlflow-snapshot-v1"
#: ``json.dumps(indent=2, sort_keys=True, ensure_ascii=False)`` for plain values.
_ORJSON_INDENTED = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
Event = dict[str, Any]
# How a plan event sets its step's section state (``_plan``).
_RESTARTS = {PLAN_TYPE_OF[plan.TaskStarted], PLAN_TYPE_OF[plan.TaskReset]}
_STEP_STATE = {PLAN_TYPE_OF[m]: state for m, state in (
    (plan.StepApproved, "DONE"), (plan.StepSkipped, "SKIPPED"), (plan.StepWaiting, "BLOCKED"),
    (plan.WindowLaunched, "RUNNING"), (plan.WindowLost, "BLOCKED"))}


class ReplayError(ValueError):
    """A verified log whose events do not fold (e.g. a work item never queued)."""


def snapshot_bytes(snapshot: dict[str, Any]) -> bytes:
    """The exact bytes of ``snapshot.json``: JCS (RFC 8785) with a two-space indent.

    Members sorted and strings and numbers written as JCS writes them (raw UTF-8),
    each member or element on its own line indented two spaces per level, ``": "``
    after a key, ``","`` ending every member but the last, ``{}``/``[]`` when empty,
    and a final newline. Without floats and with ASCII keys this is exactly Python's
    ``json.dumps(indent=2, sort_keys=True, ensure_ascii=False)``."""
    if plain(snapshot):  # orjson writes that too, several times faster (test_hotpath.py)
        try:
            return orjson.dumps(snapshot, option=_ORJSON_INDENTED) + b"\n"
        except orjson.JSONEncodeError:  # a lone surrogate, or nesting deeper than orjson's
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


class LogSnapshot(LogFold):
    """The content of ``snapshot.json`` (``data``) as of the last event applied."""

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
    def replay(cls, run_id: str, events: Iterable[Event]) -> LogSnapshot:
        snap = cls(run_id)
        for e in events:
            snap.apply(e)
        return snap

    def to_bytes(self) -> bytes:
        return snapshot_bytes(self.data)

    def apply(self, e: Event) -> None:
        reducer = self.handlers.get(e["type"])
        if reducer is not None:
            try:
                reducer(self, e["payload"])
            except (KeyError, TypeError) as err:
                raise ReplayError(f"event {e.get('seq')} ({e['type']}) cannot be applied: "
                                  f"{type(err).__name__} {err}") from None
        self.data["updated_at"] = e["ts"]
        self.data["head"] = {"last_seq": e["seq"], "last_hash": e["event_hash"]}

    # -- the run -------------------------------------------------------------------------

    @folds(ev.RUN_CREATED)
    def _run_created(self, p: dict[str, Any]) -> None:
        self.data.update(run_id=p["session_id"], created_at=p["created_at"],
                         run_state=p["run_state"])

    @folds(ev.RUN_STATE_CHANGED)
    def _run_state(self, p: dict[str, Any]) -> None:
        self.data["run_state"] = p["new_state"]

    @folds(ev.RUN_COMPLETED, ev.RUN_FAILED)
    def _run_ended(self, p: dict[str, Any]) -> None:
        self.data.update(run_state=p["status"], finished_at=p["finished_at"])

    @folds(ev.ARTIFACT_WRITTEN)
    def _artifact(self, p: dict[str, Any]) -> None:
        self.data["artifacts"].append({k: p.get(k) for k in (
            "name", "path", "sha256", "size", "schema_id", "work_item_id", "call_id")})

    # -- work items (contracts) ----------------------------------------------------------

    @folds(ev.WORK_ITEM_QUEUED)
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

    @folds(ev.WORK_ITEM_STARTED)
    def _started(self, p: dict[str, Any]) -> None:
        self._work[p["work_item_id"]].update(status="in_progress", started_at=p["started_at"])

    @folds(ev.EXECUTION_STATE)
    def _execution_state(self, p: dict[str, Any]) -> None:
        self._work[p["execution_id"]]["contract_status"] = p["to_status"]

    @folds(ev.WORK_ITEM_FINISHED)
    def _finished(self, p: dict[str, Any]) -> None:
        self._work[p["work_item_id"]].update(
            status="completed", finished_at=p["finished_at"], outcome=p["outcome"],
            error_message=p.get("error_message"))

    # -- issues (requests to the person) -------------------------------------------------

    @folds(ev.ISSUE_OPENED)
    def _issue_opened(self, p: dict[str, Any]) -> None:
        issue = {
            "issue_id": p["issue_id"], "kind": p["kind"], "prompt": p["prompt"],
            "work_item_id": p.get("work_item_id"), "status": "OPEN", "opened_at": p["opened_at"],
            "resolved_at": None, "resolution": None, "answer": None, "by": None,
        }
        self._issues[issue["issue_id"]] = issue
        self.data["issues"].append(issue)

    @folds(ev.ISSUE_RESOLVED)
    def _issue_resolved(self, p: dict[str, Any]) -> None:
        self._issues[p["issue_id"]].update(
            status="RESOLVED", resolved_at=p["resolved_at"], resolution=p["resolution"],
            answer=p.get("answer"), by=p.get("by"))

    # -- gates and plan steps (seed 002) ---------------------------------------------------

    @folds(ev.GATE_RUN_STARTED)
    def _gate_started(self, p: dict[str, Any]) -> None:
        gate = {"gate_id": p["gate_id"], "step": p.get("step"), "command": p.get("command"),
                "status": "running", "started_at": p["started_at"], "finished_at": None,
                "passed": None, "exit_code": None}
        self._gates[gate["gate_id"]] = gate
        self.data["gates"].append(gate)

    @folds(ev.GATE_RUN_FINISHED)
    def _gate_finished(self, p: dict[str, Any]) -> None:
        self._gates[p["gate_id"]].update(
            status="passed" if p["passed"] else "failed", passed=p["passed"],
            exit_code=p.get("exit_code"), finished_at=p["finished_at"])

    def _sections(self, states: dict[int, str]) -> None:
        self.data["section_states"].update({str(k): v for k, v in states.items()})

    @folds(*PLAN_EVENT_TYPES)
    def _plan(self, p: dict[str, Any]) -> None:
        t, step = p["type"], p.get("step")
        current = self.data["section_states"]
        if t in _RESTARTS:
            n = p.get("steps", len(current))
            self.data["section_states"] = {str(i): "NOT_STARTED" for i in range(n)}
        elif t == PLAN_TYPE_OF[plan.StepCompleted]:
            self._sections({step: "DONE" if p["exit_code"] == 0 else "FAILED"})
        elif t in _STEP_STATE:
            self._sections({step: _STEP_STATE[t]})
        elif t == PLAN_TYPE_OF[plan.StepReset]:
            self._sections({int(k): "NOT_STARTED" for k in current if int(k) >= p["to_step"]})
