"""The pure mapping: a session's history events (all runs, in order) to log events.

``SessionMapper.feed`` takes one history event at a time and returns the log events
it makes. Each log event depends only on the history events before it, so mapping
a prefix of the history gives a prefix of the log: a follower that sees history
grow writes the same lines as a one-shot export. Workflow task events are ignored
(the server may show transient ones that later vanish).

``event_id``, ``ts``, ``trace_id`` and ``span_id`` come from the session id, the
Temporal run id, the Temporal event id and the event time: nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from observation import event_types as ev
from observation.exporter import ids
from observation.exporter.activities import ActivityMapper
from observation.exporter.chain import log_value
from observation.exporter.decode import MappingError, first_value, format_ts, journal_of
from observation.exporter.journal import JournalMapper
from observation.exporter.model import Artifact, MappedEvent, built

__all__ = ["MappingError", "SessionMapper", "map_history"]

ET = EventType


class SessionMapper(ActivityMapper, JournalMapper):
    def __init__(self, session_id: str) -> None:
        JournalMapper.__init__(self)
        ActivityMapper.__init__(self)
        self.sid = session_id
        self.trace = ids.trace_id(session_id)
        self.session_span = ids.session_span(session_id)
        self.run_id: str | None = None
        self.next_run_id: str | None = None
        self.created = False
        self.closed = False
        self._event: HistoryEvent | None = None
        self._ts = ""
        self._out: list[MappedEvent] = []

    # -- output ---------------------------------------------------------------------

    def emit(self, type: str, payload: dict[str, Any], span: str | None = None,
             parent: str | None = None, artifact: Artifact | None = None) -> MappedEvent:
        assert self._event is not None and self.run_id is not None
        if span is None:
            span, parent = self.session_span, None
        logged, exact = log_value(payload)
        values = {
            "event_id": ids.event_id(self.run_id, self._event.event_id, len(self._out)),
            "run_id": self.sid, "ts": self._ts, "type": type, "payload": logged,
            "trace_id": self.trace, "span_id": span, "parent_span_id": parent,
            "artifact": artifact}
        # Every field is of its type (the ids are strings) but the two that come from
        # history: a type or payload of another kind is refused by pydantic, as before.
        m = built(MappedEvent, values, {"_plain": exact}) if type.__class__ is str and \
            logged.__class__ is dict and self.sid.__class__ is str else MappedEvent(**values)
        self._out.append(m)
        return m

    def feed(self, event: HistoryEvent) -> list[MappedEvent]:
        kind = event.event_type
        if self.closed and kind != ET.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            raise MappingError(f"history event {event.event_id} after the run closed")
        handler = _HANDLERS.get(kind)
        if handler is None:  # most events (workflow tasks, updates): no line, no time
            self._out = []
            return self._out
        self._event, self._ts, self._out = event, format_ts(event), []
        handler(self, event)
        return self._out

    # -- the run ------------------------------------------------------------------------

    def _started(self, e: HistoryEvent) -> None:
        a = e.workflow_execution_started_event_attributes
        self.closed = False
        self.run_id = a.original_execution_run_id or self.next_run_id \
            or a.first_execution_run_id
        if not self.run_id:
            raise MappingError("cannot tell the Temporal run id of a WorkflowExecutionStarted")
        if a.continued_execution_run_id:
            if not self.created:
                raise MappingError("the history starts in a continued run: export needs "
                                   "every run from the first one")
            return
        if self.created:
            raise MappingError("a second first run in one session's history")
        self.created = True
        inp = first_value(a.input) or {}
        self.session_config = inp.get("config")  # the wait's steps (next_wait_step)
        fork = inp.get("forked_from")
        if isinstance(fork, dict):  # a fork's line 1 names its parent (issue 27)
            self.emit(ev.SESSION_FORKED, {
                "session_id": self.sid, "parent_session_id": fork.get("session_id"),
                "parent_seq": fork.get("seq"), "parent_line_hash": fork.get("line_hash")})
        self.emit(ev.RUN_CREATED, {
            "session_id": self.sid, "temporal_run_id": self.run_id,
            "workflow_type": a.workflow_type.name, "task_queue": a.task_queue.name,
            "identity": a.identity, "config": inp.get("config"), "run_state": "queued",
            "created_at": self._ts})

    def _memo(self, e: HistoryEvent) -> None:
        self.journal(journal_of(e))

    def _act_scheduled(self, e: HistoryEvent) -> None:
        self.journal(journal_of(e))  # what happened before the activity, first
        self._scheduled(e)

    def _cancel_requested(self, e: HistoryEvent) -> None:
        a = e.workflow_execution_cancel_requested_event_attributes
        self.emit(ev.RUN_CANCEL_REQUESTED, {"identity": a.identity, "cause": a.cause})

    def _close(self, type: str, status: str, outcome: str, **extra: Any) -> None:
        self.emit(type, {"status": status, "outcome": outcome, "temporal_run_id": self.run_id,
                         "finished_at": self._ts, "failure_reason": None, **extra})
        self.closed = True

    def _completed(self, e: HistoryEvent) -> None:
        r = first_value(e.workflow_execution_completed_event_attributes.result) or {}
        status = r.get("status", "succeeded")
        self._close(ev.RUN_FAILED if status == "failed" else ev.RUN_COMPLETED, status,
                    "completed", failure_reason=r.get("failure_reason"),
                    contracts=r.get("contracts"), turns=r.get("turns"))

    def _failed(self, e: HistoryEvent) -> None:
        f = e.workflow_execution_failed_event_attributes.failure
        self._close(ev.RUN_FAILED, "failed", "workflow_failed", failure_reason=f.message)

    def _canceled(self, e: HistoryEvent) -> None:
        self._close(ev.RUN_COMPLETED, "canceled", "canceled")

    def _terminated(self, e: HistoryEvent) -> None:
        a = e.workflow_execution_terminated_event_attributes
        self._close(ev.RUN_FAILED, "failed", "terminated",
                    failure_reason=f"terminated: {a.reason}" if a.reason else "terminated")

    def _timed_out(self, e: HistoryEvent) -> None:
        self._close(ev.RUN_FAILED, "failed", "timed_out", failure_reason="workflow timed out")

    def _continued(self, e: HistoryEvent) -> None:
        a = e.workflow_execution_continued_as_new_event_attributes
        self.emit(ev.RUN_CONTINUED_AS_NEW, {
            "temporal_run_id": self.run_id, "new_temporal_run_id": a.new_execution_run_id})
        self.next_run_id = a.new_execution_run_id
        self.closed = True


_HANDLERS = {
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: SessionMapper._started,
    ET.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED: SessionMapper._memo,
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED: SessionMapper._cancel_requested,
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: SessionMapper._completed,
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: SessionMapper._failed,
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: SessionMapper._canceled,
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: SessionMapper._terminated,
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: SessionMapper._timed_out,
    ET.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: SessionMapper._continued,
    ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: SessionMapper._act_scheduled,
    ET.EVENT_TYPE_ACTIVITY_TASK_STARTED: ActivityMapper._act_started,
    ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: ActivityMapper._act_completed,
    ET.EVENT_TYPE_ACTIVITY_TASK_FAILED: ActivityMapper._act_failed,
    ET.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: ActivityMapper._act_timed_out,
    ET.EVENT_TYPE_ACTIVITY_TASK_CANCELED: ActivityMapper._act_canceled,
}


def map_history(session_id: str, events: Iterable[HistoryEvent]) -> list[MappedEvent]:
    """Every log event of a session, from its history events (all runs, in order)."""
    mapper = SessionMapper(session_id)
    return [m for e in events for m in mapper.feed(e)]
