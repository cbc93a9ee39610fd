"""A session's state at a point of its past, rebuilt from what is recorded (issue 27,
fork): nothing runs again.

The point is a line of the session's log (``seq``). The log is verified up to it; the
line's ``event_id`` names the Temporal run and history event it was mapped from. That
run's history, cut after the workflow task the line belongs to, is replayed with
Temporal's ``Replayer`` (no worker, no activity: every LLM answer and tool result comes
from history), and the workflow's state is taken where it then waits.

A point is a fork point when the session waits there for the person's next message
(a turn boundary: the agent answered, nothing is in flight, no contract is open), or,
for a plan session, at a step boundary (``workflows.fork_point``): where the plan waits
for a person at a step (a gate, a human verify, a failed or interrupted step: the line
is the last one of that workflow task), or the plan event that ends step ``k - 1`` (or
resets the plan) when the plan goes on at once to run step ``k``: the state is the
one the plan had as it was about to start step ``k``, nothing of it run.
A person's ``message`` line stands for
the wait it answered (the fork point before it; the caller may replace the message).
Anywhere else :class:`ForkRefused` says why and names the nearest fork points before
and after it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
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
    read_lines,
    verify_lines,
)
from workflows.fork_point import PLAN_WAITS, plan_point
from workflows.journal_carrier import INTERCEPTORS
from workflows.lineage import ParentAction
from workflows.people import digest_of
from workflows.plan import PLAN_EVENT_TYPES
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


def _whole_lines(log: Path) -> Iterator[bytes]:
    """The log's lines that are whole now: the exporter may be appending one (the
    head lags the log by a few seconds; every line before the last is whole)."""
    for raw in read_lines(log):
        if not raw.endswith(b"\n"):
            return
        yield raw


def _read(log: Path, session_id: str) -> list[dict[str, Any]]:
    try:
        return list(verify_lines(_whole_lines(log), session_id))
    except ChainBrokenError as err:
        raise ForkRefused(409, f"the session's log does not verify: {err}") from None


#: The plan events after which a plan may go on at once to run the step at its cursor.
GOES_ON = frozenset({"TaskStarted", "StepCompleted", "StepApproved", "StepSkipped",
                     "StepReset", "TaskReset"})


def _task(line: dict[str, Any]) -> str:
    return line["event_id"].rsplit(":", 1)[0]


def fork_points(lines: list[dict[str, Any]]) -> list[int]:
    """The log's candidate fork points: the last line of each workflow task whose
    status change is a wait for the person's message or a plan's wait at a step, and
    each plan event after which the plan starts its next step in the same task (the
    replay confirms one)."""
    points: list[int] = []
    for i, line in enumerate(lines):
        p = line["payload"]
        detail = p.get("detail") or {}
        if line["type"] in GOES_ON and (line["type"] != "StepCompleted"
                                        or p.get("exit_code") == 0):
            if _starts_a_step(lines, i):
                points.append(line["seq"])
            continue
        if line["type"] != ev.RUN_STATE_CHANGED or p.get("new_state") != "waiting_user" or (
                detail.get("kind") not in ("message", "step")):
            continue
        j = i
        while j + 1 < len(lines) and _task(lines[j + 1]) == _task(line):
            j += 1
        points.append(lines[j]["seq"])
    return points


def _starts_a_step(lines: list[dict[str, Any]], i: int) -> bool:
    """After plan event ``lines[i]`` the plan starts its next step (its work item is
    queued, not a gate's) with no other plan event, wait or end between, in the same workflow task
    or, where the run continued as new there, in the next run's first."""
    continued = False
    for x in lines[i + 1:]:
        if x["type"] == ev.WORK_ITEM_QUEUED:  # a step's run, not a gate's wait
            return not (x["payload"].get("action_detail") or {}).get("gate")
        if x["type"] in PLAN_EVENT_TYPES or (x["type"] == ev.RUN_STATE_CHANGED and
                                             x["payload"].get("new_state") != "running"):
            return False
        if x["type"] == ev.RUN_CONTINUED_AS_NEW:
            continued = True
        elif _task(x) != _task(lines[i]) and not continued:
            return False
    return False


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
    """Records, for each replayed workflow, what it awaited and its state then, with
    the history length of the workflow task it was in: ``("wait", state)`` for a
    condition, ``("busy", None)`` for an activity or timer, and ``("step", state)`` as a
    plan is about to run a step (the step boundary)."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type:
        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                _watch(workflow.instance(), _PROBES[workflow.info().workflow_id])
                return await super().execute_workflow(input)
        return Inbound


def _watch(instance: Any, seen: list[tuple[str, Any, int]]) -> None:
    wait, activity, sleep = instance._wait, instance._activity, instance._sleep
    run_step = instance._run_step

    def note(kind: str, state: Any) -> None:
        seen.append((kind, state, workflow.info().get_current_history_length()))

    async def watched_wait(condition: Any, timeout: Any = None) -> None:
        note("wait", instance._s.model_copy(deep=True))
        return await wait(condition, timeout)

    async def watched_activity(*args: Any, **kw: Any) -> Any:
        note("busy", None)
        return await activity(*args, **kw)

    async def watched_sleep(delay: Any) -> None:
        note("busy", None)
        return await sleep(delay)

    async def watched_run_step(*args: Any, **kw: Any) -> Any:
        note("step", instance._s.model_copy(deep=True))
        return await run_step(*args, **kw)

    instance._wait, instance._activity, instance._sleep, instance._run_step = (
        watched_wait, watched_activity, watched_sleep, watched_run_step)


async def _replayed(client: Client, session_id: str, run_id: str, history_event: int,
                    workflow_class: type) -> tuple[list[tuple[str, Any, int]], int, int]:
    """What the run awaited up to the end of the workflow task of ``history_event``
    (``_Probe``; empty before its first workflow task), the id of the first
    history event after that task, and the id of that task's start (the history
    length the probe notes for what the run did in it)."""
    history = await client.get_workflow_handle(session_id, run_id=run_id).fetch_history()
    events = list(history.events)
    cut = next((i for i, e in enumerate(events) if e.event_id > history_event
                and e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), len(events))
    after = events[cut].event_id if cut < len(events) else events[-1].event_id + 1
    task = max((e.event_id for e in events[:cut] if e.event_id <= history_event and
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED), default=0)
    if not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
               for e in events[:cut]):
        return [], after, task  # before the first workflow task: nothing waits yet
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
    return seen, after, task


def _waiting(seen: list[tuple[str, Any, int]]) -> SessionState | None:
    """The state where the run waits for the person at the end of the replay: for
    its next message, or (a plan) at a step (``plan_point``); else None."""
    if not seen or seen[-1][0] != "wait":
        return None
    state: SessionState = seen[-1][1]
    ok = (state.status == SessionStatus.WAITING_USER and state.pending is not None and (
        (state.pending.kind == "message" and not state.open_contracts() and not state.inbox)
        or plan_point(state) in PLAN_WAITS))
    return state if ok else None


def _before_step(seen: list[tuple[str, Any, int]], task: int, line: dict[str, Any]
                 ) -> SessionState | None:
    """The plan's state as it was about to run its next step in the workflow task
    that began at history event ``task``, where ``line`` is the last plan event
    before it; else None."""
    steps = [state for kind, state, length in seen if kind == "step" and length == task]
    if not steps:
        return None  # no step began in that workflow task
    state: SessionState = steps[-1]
    last = state.plan_events[-1] if state.plan_events else None
    # the same event (its type and step: its text may be clipped or redacted in the log)
    if plan_point(state) != "boundary" or last is None or last.type != line["type"] or \
            getattr(last, "step", None) != line["payload"].get("step"):
        return None
    return state


async def _first_step(client: Client, session_id: str, run_id: Any, workflow_class: type,
                      line: dict[str, Any]) -> SessionState | None:
    """The plan's state as its run ``run_id`` (continued from the run of ``line``) is
    about to start a step in its first workflow task; else None."""
    if not isinstance(run_id, str) or not run_id:
        return None
    history = await client.get_workflow_handle(session_id, run_id=run_id).fetch_history()
    first = next((e.event_id for e in history.events
                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED), None)
    if first is None:
        return None
    seen, _, task = await _replayed(client, session_id, run_id, first, workflow_class)
    return _before_step(seen, task, line)


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
    lines = _read(log, session_id)
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
    seen, after, task = await _replayed(client, session_id, run_id, hev, workflow_class)
    in_task = [x for x in lines[seq:] if _history_ref(x["event_id"])[0] == run_id
               and _history_ref(x["event_id"])[1] < after]
    state = None
    if line["type"] in GOES_ON and not any(x["type"] in PLAN_EVENT_TYPES for x in in_task):
        state = _before_step(seen, task, line)  # a plan's step boundary, inside the task
        moved = next((x for x in in_task if x["type"] == ev.RUN_CONTINUED_AS_NEW), None)
        if state is None and moved is not None:  # the next run starts the step
            state = await _first_step(client, session_id,
                                      moved["payload"].get("new_temporal_run_id"),
                                      workflow_class, line)
    elif not in_task:
        state = _waiting(seen)
    if state is None:
        raise ForkRefused(409, f"line {seq} ({line['type']}) is inside a turn: a fork "
                          "starts where the session waits for the person's message "
                          "(a plan: at a step boundary)",
                          _nearest(fork_points(lines), seq))
    return Rebuilt(state, session_id, seq, line["line_hash"], run_id,
                   parent_actions(lines, seq), message)
