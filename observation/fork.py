"""A session's state at a point of its past, rebuilt from what is recorded (issue 27,
fork): nothing runs again.

The point is a line of the session's log (``seq``). The log is verified up to it; the
line's ``event_id`` names the Temporal run and history event it was mapped from. That
run's history, cut after the workflow task the line belongs to, is replayed with
Temporal's ``Replayer`` (no worker, no activity: every LLM answer and tool result comes
from history), and the workflow's state is taken where it then waits.

A point is a fork point when the session waits there for the person's next message
(a turn boundary: the agent answered, nothing is in flight, no contract is open), or,
for a plan session, at the gate before a step (a step boundary: nothing of the step
run, only the gate's contract open; ``workflows.fork.at_a_gate``), and the line is
the last one of that workflow task. A person's ``message`` line stands for
the wait it answered (the fork point before it; the caller may replace the message).
Anywhere else :class:`ForkRefused` says why and names the nearest fork points before
and after it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from observation import event_types as ev
from observation.exporter.verify import (
    LOG_NAME,
    ChainBrokenError,
    read_head,
    read_lines,
    verify_lines,
)
from workflows.fork_point import at_a_gate
from workflows.journal_carrier import INTERCEPTORS
from workflows.lineage import ParentAction
from workflows.people import digest_of
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus

#: How many fork points either side of a refused one an answer names.
NEAREST = 3
#: A replay that takes longer is refused (a history it cannot end on).
REPLAY_TIMEOUT_S = 60.0


class ForkRefused(ValueError):
    """Not a point to fork at: ``status`` 404 (no log), 422 (before line 1) or 409
    (past the log's end, inside a turn: the nearest fork points named)."""

    def __init__(self, status: int, message: str, nearest: list[int] | None = None):
        self.status, self.nearest = status, nearest or []
        if nearest is not None:
            message += (f" (the nearest fork points: {', '.join(map(str, nearest))})"
                        if nearest else " (this log has no fork point yet)")
        super().__init__(message)


@dataclass(frozen=True)
class Rebuilt:
    state: SessionState  # the parent's, as it was at the point
    session_id: str  # the parent
    seq: int  # the point: a line of the parent's log
    line_hash: str  # that line's
    run_id: str  # the Temporal run the point is in
    parent_actions: list[ParentAction]  # the once-only calls it sent after the point
    message: str | None = None  # asked at a person's message: its text (to replace)


def _history_ref(event_id: str) -> tuple[str, int]:
    run, hev, _ = event_id.split(":")
    return run, int(hev)


def _read(log: Path, session_id: str, upto: int) -> list[dict[str, Any]]:
    try:
        return list(verify_lines(islice(read_lines(log), upto), session_id))
    except ChainBrokenError as err:
        raise ForkRefused(409, f"the session's log does not verify up to line {upto}: "
                          f"{err}") from None


def fork_points(lines: list[dict[str, Any]]) -> list[int]:
    """The log's candidate fork points: the last line of each workflow task whose
    status change is a wait for the person's message, or a plan's wait at a gate
    (the replay confirms one)."""
    points: list[int] = []
    for i, line in enumerate(lines):
        p = line["payload"]
        detail = p.get("detail") or {}
        if line["type"] != ev.RUN_STATE_CHANGED or p.get("new_state") != "waiting_user" or (
                detail.get("kind") != "message" and not (
                    detail.get("kind") == "step"
                    and str(detail.get("prompt") or "").startswith("gate: "))):
            continue
        ref = line["event_id"].rsplit(":", 1)[0]
        j = i
        while j + 1 < len(lines) and lines[j + 1]["event_id"].rsplit(":", 1)[0] == ref:
            j += 1
        points.append(lines[j]["seq"])
    return points


#: The safety classes of the calls a fork asks before sending again.
ONCE_ONLY = frozenset({"irreversible", "at_most_once"})


def parent_actions(lines: list[dict[str, Any]], seq: int) -> list[ParentAction]:
    """The irreversible and at-most-once tool calls sent after line ``seq`` (each
    ``TOOL_CALL_STARTED``, its safety from its ``WORK_ITEM_QUEUED``), once per digest."""
    safety: dict[str, str] = {}
    out: dict[str, ParentAction] = {}
    for line in lines:
        p = line["payload"]
        if line["type"] == ev.WORK_ITEM_QUEUED:
            safety[p.get("work_item_id")] = (p.get("action_detail") or {}).get("safety")
        elif line["type"] == ev.TOOL_CALL_STARTED and line["seq"] > seq and \
                safety.get(p.get("work_item_id")) in ONCE_ONLY:
            digest = digest_of({"server": p.get("server"), "tool": p.get("tool"),
                                "arguments": p.get("arguments") or {}})
            out.setdefault(digest, ParentAction(digest=digest, server=p.get("server"),
                                                tool=p.get("tool"), seq=line["seq"],
                                                at=line["ts"]))
    return list(out.values())


def lineage_of(run_dir: Path) -> dict[str, Any] | None:
    """A fork's parent as its log's line 1 names it (``SESSION_FORKED``: the parent's
    ``session_id``, ``seq`` and ``line_hash``); None for any other log, or none yet.
    Read, not verified (``hitlflow log verify`` checks the link)."""
    try:
        with (run_dir / LOG_NAME).open("rb") as f:
            first = f.readline(64 * 1024)
        line = json.loads(first) if first.endswith(b"\n") else None
    except (OSError, ValueError):
        return None
    if not isinstance(line, dict) or line.get("type") != ev.SESSION_FORKED:
        return None
    p = line.get("payload") or {}
    found = {"session_id": p.get("parent_session_id"), "seq": p.get("parent_seq"),
             "line_hash": p.get("parent_line_hash")}
    if not (isinstance(found["session_id"], str) and type(found["seq"]) is int
            and isinstance(found["line_hash"], str)):
        return None
    return found


def _nearest(points: list[int], seq: int) -> list[int]:
    before = [p for p in points if p < seq][-NEAREST:]
    after = [p for p in points if p > seq][:NEAREST]
    return before + after


# -- the replay ---------------------------------------------------------------------------

_PROBES: dict[str, list[tuple[str, Any]]] = {}  # probe workflow id -> its awaits


class _Probe(Interceptor):
    """Records, for each replayed workflow, what it awaited last and its state then:
    ``("wait", state)`` for a condition, ``("busy", None)`` for an activity or timer."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type:
        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                _watch(workflow.instance(), _PROBES[workflow.info().workflow_id])
                return await super().execute_workflow(input)
        return Inbound


def _watch(instance: Any, seen: list[tuple[str, Any]]) -> None:
    wait, activity, sleep = instance._wait, instance._activity, instance._sleep

    async def watched_wait(condition: Any, timeout: Any = None) -> None:
        seen.append(("wait", instance._s.model_copy(deep=True)))
        return await wait(condition, timeout)

    async def watched_activity(*args: Any, **kw: Any) -> Any:
        seen.append(("busy", None))
        return await activity(*args, **kw)

    async def watched_sleep(delay: Any) -> None:
        seen.append(("busy", None))
        return await sleep(delay)

    instance._wait, instance._activity, instance._sleep = (
        watched_wait, watched_activity, watched_sleep)


async def _state_after(client: Client, session_id: str, run_id: str,
                       history_event: int, workflow_class: type) -> tuple[SessionState | None, int]:
    """The state where the run waits once the workflow task of ``history_event`` is
    done (None: it does not wait there for a message), and the id of the first history
    event after that task."""
    history = await client.get_workflow_handle(session_id, run_id=run_id).fetch_history()
    events = list(history.events)
    cut = next((i for i, e in enumerate(events) if e.event_id > history_event
                and e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), len(events))
    after = events[cut].event_id if cut < len(events) else events[-1].event_id + 1
    if not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
               for e in events[:cut]):
        return None, after  # before the first workflow task: nothing waits yet
    probe_id = f"fork-probe-{uuid.uuid4().hex}"
    seen = _PROBES.setdefault(probe_id, [])
    try:
        replayer = Replayer(workflows=[workflow_class], interceptors=[*INTERCEPTORS, _Probe()],
                            data_converter=pydantic_data_converter,
                            workflow_runner=UnsandboxedWorkflowRunner())
        result = await asyncio.wait_for(replayer.replay_workflow(
            WorkflowHistory(probe_id, events[:cut]), raise_on_replay_failure=False),
            REPLAY_TIMEOUT_S)
    except TimeoutError:
        raise ForkRefused(409, "the session's history did not replay to the point within "
                          f"{REPLAY_TIMEOUT_S:.0f} s") from None
    finally:
        _PROBES.pop(probe_id, None)
    if result.replay_failure is not None:
        raise ForkRefused(409, f"the session's history does not replay to the point: "
                          f"{result.replay_failure}")
    if not seen or seen[-1][0] != "wait":
        return None, after
    state: SessionState = seen[-1][1]
    ok = (state.status == SessionStatus.WAITING_USER and state.pending is not None
          and not state.inbox and (
              (state.pending.kind == "message" and not state.open_contracts())
              or at_a_gate(state)))
    return (state if ok else None), after


async def rebuild(client: Client, runs_dir: Path, session_id: str, seq: int,
                  workflow_class: type) -> Rebuilt:
    """The session's state at line ``seq`` of its log (see the module's text), and the
    once-only calls it sent after it, as far as its log has them now.
    ``workflow_class``: ``workflows.session.SessionWorkflow`` (given by the caller:
    observation does not import the workflow's own dependencies)."""
    log = runs_dir / session_id / LOG_NAME
    if not log.is_file():
        raise ForkRefused(404, f"session {session_id} has no log yet")
    if seq < 1:
        raise ForkRefused(422, f"at_seq {seq}: a log's lines count from 1")
    head = read_head(runs_dir / session_id)  # the lines up to it are whole
    lines = _read(log, session_id, head[0] if head else 1 << 62)
    if len(lines) < seq:
        raise ForkRefused(409, f"at_seq {seq} is past the end of the log ({len(lines)} "
                          "lines)", _nearest(fork_points(lines), seq))
    asked_at, message = seq, None
    if lines[seq - 1]["type"] == ev.MESSAGE:  # a person's message: the wait it answered
        before = [p for p in fork_points(lines) if p < seq]
        between = before and any(x["type"] in (ev.MESSAGE, ev.TURN_INTERRUPTED)
                                 for x in lines[before[-1]:seq - 1])
        if not before or between:
            raise ForkRefused(409, f"line {seq} is a message the session did not wait "
                              "for (the first one, or one sent while the agent worked)",
                              _nearest(fork_points(lines), seq))
        seq, message = before[-1], lines[asked_at - 1]["payload"].get("text")
    line = lines[seq - 1]
    run_id, hev = _history_ref(line["event_id"])
    state, after = await _state_after(client, session_id, run_id, hev, workflow_class)
    nxt = lines[seq] if len(lines) > seq else None
    inside = nxt is not None and _history_ref(nxt["event_id"])[0] == run_id and \
        _history_ref(nxt["event_id"])[1] < after
    if state is None or inside:
        raise ForkRefused(409, f"line {seq} ({line['type']}) is inside a turn: a fork "
                          "starts where the session waits for the person's message "
                          "(a plan: at a gate)",
                          _nearest(fork_points(lines), seq))
    return Rebuilt(state, session_id, seq, line["line_hash"], run_id,
                   parent_actions(lines, seq), message)
