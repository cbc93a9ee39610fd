"""The pure projection: a session's log events -> its TelemetryRuns.

``TelemetryProjector.apply`` takes one log event (a dict shaped like a line of
``events.ndjson``) and returns the ids of the runs it changed; the runs of a log
are the fold over its lines, so the exporter (live, as lines are appended) and a
rebuild from the file give the same runs. No I/O, no clock.

Every run is one span of the log: its ``trace_id``/``span_id`` are the ones its
events carry, and the projector checks them against ``observation.exporter.ids``
(a log whose ids do not follow that scheme raises :class:`ProjectionError`).
Times are the log's: the payload's own time where it has one (``created_at``,
``started_at``, ``finished_at``), else the event's ``ts``.

The projector holds its runs as :class:`~observation.telemetry.model.Run` (plain
slotted objects: a log line changes a few fields of one or two runs, and validating
every set cost a fifth of the fold); :meth:`TelemetryProjector.ordered` and
:func:`project` give them as :class:`TelemetryRun` records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from observation import event_types as ev
from observation.event_types import LogFold, folds
from observation.exporter import ids
from observation.telemetry.model import Run, TelemetryRun, run_id

Event = dict[str, Any]

WORK_ITEM_STATUS = {"completed": "succeeded", "failed": "failed", "rejected": "rejected",
                    "cancelled": "canceled"}
CONTRACT_STATUS = {"pending": "queued", "running": "running", "waiting": "waiting_user"}


class ProjectionError(ValueError):
    """A log event that does not fit the telemetry model (ids or order)."""


def llm_provider(config: dict[str, Any] | None, base_url: str | None = None) -> str | None:
    """The session's LLM provider as configured (``openai``, ``scripted``)."""
    llm = ((config or {}).get("agent") or {}).get("llm") or {}
    if llm.get("provider"):
        return str(llm["provider"])
    if base_url:
        return "scripted" if base_url.startswith("scripted:") else "openai"
    return None


class TelemetryProjector(LogFold):
    def __init__(self, session_id: str) -> None:
        self.sid = session_id
        self.trace = ids.trace_id(session_id)
        self.runs: dict[str, Run] = {}
        self._by_span: dict[str, str] = {}
        self._session: Run | None = None
        self._provider: str | None = None
        self._e: Event = {}
        self._seq = 0
        self._changed: set[str] = set()
        self._forked: dict[str, Any] = {}  # a fork's parent (its log's SESSION_FORKED)

    # -- the fold ----------------------------------------------------------------------

    def apply(self, event: Event) -> set[str]:
        """Fold one log event in; return the ids of the runs it changed."""
        if event.get("run_id", self.sid) != self.sid:
            raise ProjectionError(f"event {event.get('event_id')} is of session "
                                  f"{event.get('run_id')}, not {self.sid}")
        if event.get("trace_id") != self.trace:
            raise ProjectionError(f"event {event.get('event_id')}: trace_id "
                                  f"{event.get('trace_id')} is not the session's {self.trace}")
        self._e, self._changed = event, set()
        self._seq = int(event.get("seq") or self._seq + 1)
        handler = self.handlers.get(event["type"])
        if handler is not None:
            handler(self, event["payload"])
        own = self._by_span.get(event["span_id"])
        if own is not None:
            run = self.runs[own]
            run.event_count += 1
            self._touch(run)
        return self._changed

    def apply_all(self, events: Iterable[Event]) -> TelemetryProjector:
        for e in events:
            self.apply(e)
        return self

    def ordered(self) -> list[TelemetryRun]:
        """The runs in the order the log created them (each parent before its children)."""
        return [run.model() for run in self.runs.values()]

    # -- helpers -----------------------------------------------------------------------

    @property
    def _ts(self) -> str:
        return str(self._e["ts"])

    def _touch(self, run: Run) -> Run:
        run.last_seq, run.updated_at = self._seq, self._ts
        self._changed.add(run.run_id)
        return run

    def _ensure(self, kind: str, key: str, job_type: str, name: str, parent: Run | None,
                own_span: bool = True) -> Run:
        """The run of span ``kind/key``; created (status running) when first seen. The
        event must carry its span id (``own_span``) or name it as its parent."""
        span = ids.span_id(self.sid, kind, key)
        seen = self._e["span_id"] if own_span else self._e.get("parent_span_id")
        if seen != span:
            raise ProjectionError(
                f"event {self._e.get('seq')} ({self._e['type']}): span {seen} is not "
                f"{kind}/{key}'s span {span}")
        rid = run_id(self.sid, kind, key)
        run = self.runs.get(rid)
        if run is None:
            if parent is None:
                raise ProjectionError(f"{kind}/{key} has no parent run")
            run = Run(
                run_id=rid, parent_run_id=parent.run_id, session_id=self.sid,
                job_type=job_type, name=name, status="running", updated_at=self._ts,
                context_json={"trace_id": self.trace, "span_id": span,
                              "parent_span_id": parent.span_id},
                attributes={}, ordinal=len(self.runs), first_seq=self._seq,
                last_seq=self._seq)
            self.runs[rid], self._by_span[span] = run, rid
        return self._touch(run)

    def _root(self) -> Run:
        if self._session is None:
            raise ProjectionError(f"event {self._e.get('seq')} ({self._e['type']}) before "
                                  f"{ev.RUN_CREATED}")
        return self._session

    def _end(self, run: Run, status: str, at: str | None = None) -> None:
        if not run.ended:
            run.status, run.ended_at = status, at or self._ts
            self._touch(run)

    def _set(self, run: Run, **attrs: Any) -> None:
        run.set_attrs(attrs)
        self._touch(run)

    # -- the session -------------------------------------------------------------------

    @folds(ev.SESSION_FORKED)
    def _forked_from(self, p: Event) -> None:
        """A fork's line 1: its session run names the parent's (issue 27)."""
        parent = p.get("parent_session_id")
        if isinstance(parent, str):
            self._forked = {
                "forked_from_session_id": parent, "forked_from_seq": p.get("parent_seq"),
                "forked_from_run_id": run_id(parent, "session"),
                "forked_from_trace_id": ids.trace_id(parent),
                "forked_from_span_id": ids.session_span(parent)}

    @folds(ev.RUN_CREATED)
    def _run_created(self, p: Event) -> None:
        if self._session is not None:
            raise ProjectionError(f"a second {ev.RUN_CREATED}")
        span = ids.session_span(self.sid)
        if self._e["span_id"] != span:
            raise ProjectionError(f"{ev.RUN_CREATED} on span {self._e['span_id']}, not {span}")
        config = p.get("config") or {}
        llm = (config.get("agent") or {}).get("llm") or {}
        self._provider = llm_provider(config)
        rid = run_id(self.sid, "session")
        run = Run(
            run_id=rid, parent_run_id=None, session_id=self.sid, job_type="session",
            name=f"session {self.sid}", status=p.get("run_state", "queued"),
            started_at=p.get("created_at", self._ts), updated_at=self._ts,
            context_json={"trace_id": self.trace, "span_id": span, "parent_span_id": None},
            attributes={
                "workflow_type": p.get("workflow_type"), "task_queue": p.get("task_queue"),
                "temporal_run_ids": [p.get("temporal_run_id")],
                "driver": "plan" if config.get("plan") else "agent" if config.get("agent")
                else None, "mode": config.get("mode"), "llm_provider": self._provider,
                "llm_model": llm.get("model"), **self._forked},
            ordinal=0, first_seq=self._seq, last_seq=self._seq)
        self.runs[rid], self._by_span[span], self._session = run, rid, run
        self._touch(run)

    @folds(ev.RUN_STATE_CHANGED)
    def _run_state(self, p: Event) -> None:
        run = self._root()
        if not run.ended:
            run.status = p["new_state"]
        self._set(run, last_trigger=p.get("trigger"))

    @folds(ev.RUN_CONTINUED_AS_NEW)
    def _continued(self, p: Event) -> None:
        run = self._root()
        self._set(run, temporal_run_ids=[*run.attributes["temporal_run_ids"],
                                         p.get("new_temporal_run_id")])

    @folds(ev.RUN_COMPLETED, ev.RUN_FAILED)
    def _run_ended(self, p: Event) -> None:
        run = self._root()
        at = p.get("finished_at") or self._ts
        for child in self.runs.values():  # whatever is still open ends with the session
            if child is not run and not child.ended:
                self._set(child, closed_by="session_end")
                self._end(child, "canceled", at)
        run.status, run.ended_at = p["status"], at
        self._set(run, outcome=p.get("outcome"), failure_reason=p.get("failure_reason"),
                  turns=p.get("turns"), contracts=p.get("contracts"))

    # -- reasoning steps and LLM calls -------------------------------------------------

    def _reasoning(self, call: str, own_span: bool) -> Run:
        run = self._ensure("reasoning", call, "reasoning", f"reasoning {call}", self._root(),
                           own_span=own_span)
        if run.started_at is None:
            run.started_at = self._ts
        return run

    def _llm(self, p: Event) -> Run:
        call = p["call_id"]
        step = self._reasoning(call, own_span=False)
        return self._ensure("llm_call", call, "llm_call", f"llm_call {call}", step)

    @folds(ev.LLM_CALL_STARTED)
    def _llm_started(self, p: Event) -> None:
        run = self._llm(p)
        run.started_at = run.started_at or self._ts
        self._set(run, call_id=p["call_id"], model=p.get("model"),
                  provider=self._provider or llm_provider(None, p.get("provider_base_url")),
                  provider_base_url=p.get("provider_base_url"),
                  temperature=p.get("temperature"), max_tokens=p.get("max_tokens"),
                  prompt_hash=p.get("prompt_hash"), response_format=p.get("response_format"))
        run.name = f"llm_call {p['call_id']} ({p.get('model')})"

    @folds(ev.LLM_CALL_FINISHED)
    def _llm_finished(self, p: Event) -> None:
        run = self._llm(p)
        usage = p.get("token_usage") or {}
        self._set(run, latency_ms=p.get("latency_ms"), input_tokens=usage.get("input_tokens"),
                  output_tokens=usage.get("output_tokens"),
                  total_tokens=usage.get("total_tokens"), finish_reason=p.get("finish_reason"),
                  output_hash=p.get("output_hash"), api_cost_usd=p.get("api_cost_usd"),
                  tool_calls_count=p.get("tool_calls_count"))
        self._end(run, "succeeded")

    @folds(ev.LLM_CALL_FAILED)
    def _llm_failed(self, p: Event) -> None:
        run = self._llm(p)
        self._set(run, latency_ms=p.get("latency_ms"), error_class=p.get("error_class"),
                  error_summary=p.get("error_summary"), retryable=p.get("retryable"),
                  http_status=p.get("http_status"))
        self._end(run, "failed")
        step = self.runs[run.parent_run_id or ""]
        self._set(step, error_class=p.get("error_class"))
        self._end(step, "failed")

    @folds(ev.TEXT)
    def _text(self, p: Event) -> None:
        run = self._reasoning(p["call_id"], own_span=True)
        self._set(run, tool_calls=p.get("tool_calls"), ecs_request=p.get("ecs_request"),
                  end=p.get("end"))
        self._end(run, "succeeded")

    # -- work items (contracts), their tool calls and issues ----------------------------

    def _work(self, work_item_id: str, own_span: bool = True) -> Run:
        return self._ensure("work_item", work_item_id, "work_item", f"work_item {work_item_id}",
                            self._root(), own_span=own_span)

    @folds(ev.WORK_ITEM_QUEUED)
    def _queued(self, p: Event) -> None:
        run = self._work(p["work_item_id"])
        run.status, run.name = "queued", p.get("action_summary") or run.name
        self._set(run, work_item_id=p["work_item_id"], action_type=p.get("action_type"),
                  irreversible=p.get("irreversible"), idempotency_key=p.get("idempotency_key"),
                  queued_at=p.get("created_at", self._ts))

    @folds(ev.WORK_ITEM_STARTED)
    def _wi_started(self, p: Event) -> None:
        run = self._work(p["work_item_id"])
        run.started_at = p.get("started_at", self._ts)
        if not run.ended:
            run.status = "running"

    @folds(ev.EXECUTION_STATE)
    def _execution_state(self, p: Event) -> None:
        run = self._work(p["execution_id"])
        if p["to_status"] in CONTRACT_STATUS and not run.ended:
            run.status = CONTRACT_STATUS[p["to_status"]]
        self._set(run, contract_status=p["to_status"])

    @folds(ev.WORK_ITEM_FINISHED)
    def _wi_finished(self, p: Event) -> None:
        run = self._work(p["work_item_id"])
        self._set(run, outcome=p["outcome"], error_message=p.get("error_message"))
        self._end(run, WORK_ITEM_STATUS.get(p["outcome"], "failed"),
                  p.get("finished_at", self._ts))

    @folds(ev.TOOL_CALL_STARTED)
    def _tool_started(self, p: Event) -> None:
        self._set(self._work(p["work_item_id"]), server=p.get("server"), tool=p.get("tool"),
                  attempt=p.get("attempt"))

    @folds(ev.TOOL_RESULT)
    def _tool_result(self, p: Event) -> None:
        self._set(self._work(p["execution_id"]), is_error=p.get("is_error"),
                  tool_error=p.get("error_message"))

    @folds(ev.ISSUE_OPENED, ev.ISSUE_RESOLVED)
    def _issue(self, p: Event) -> None:
        run = self.runs.get(self._by_span.get(self._e["span_id"], ""))
        if run is None or run is self._session:
            return  # a request with no work item (a plan step's on_fail): the session's
        if self._e["type"] == ev.ISSUE_OPENED:
            self._set(run, issue_id=p["issue_id"], issue_kind=p.get("kind"))
        else:
            self._set(run, issue_resolution=p.get("resolution"), answered_by=p.get("by"))

    @folds(ev.ISSUE_REMINDED, ev.ISSUE_ESCALATED)
    def _wait_step(self, p: Event) -> None:
        """The wait's steps (issue 26), on the work item's run like its request."""
        run = self.runs.get(self._by_span.get(self._e["span_id"], ""))
        if run is None or run is self._session:
            return
        if self._e["type"] == ev.ISSUE_REMINDED:
            self._set(run, issue_reminded_at=p.get("reminded_at"))
        else:
            self._set(run, issue_escalated_at=p.get("escalated_at"),
                      issue_escalated_to=", ".join(p.get("escalated_to") or []))

    @folds(ev.ARTIFACT_WRITTEN)
    def _artifact(self, p: Event) -> None:
        run = self.runs.get(self._by_span.get(self._e["span_id"], ""))
        if run is not None and run is not self._session:
            self._set(run, artifacts=[*run.attributes.get("artifacts", []), p["path"]])

    # -- gates (plan steps' verify commands) --------------------------------------------

    def _gate(self, p: Event) -> Run:
        item = self._work(p["work_item_id"], own_span=False)
        return self._ensure("gate", p["gate_id"], "gate", f"gate {p['gate_id']}", item)

    @folds(ev.GATE_RUN_STARTED)
    def _gate_started(self, p: Event) -> None:
        run = self._gate(p)
        run.started_at = p.get("started_at", self._ts)
        run.name = f"gate step {p.get('step')}: {p.get('command')}"
        self._set(run, gate_id=p["gate_id"], kind=p.get("kind"), step=p.get("step"),
                  command=p.get("command"), work_item_id=p["work_item_id"],
                  attempt=p.get("attempt"))

    @folds(ev.GATE_RUN_FINISHED)
    def _gate_finished(self, p: Event) -> None:
        run = self._gate(p)
        self._set(run, passed=p["passed"], exit_code=p.get("exit_code"),
                  duration_s=p.get("duration_s"), error=p.get("error"))
        self._end(run, "succeeded" if p["passed"] else "failed", p.get("finished_at"))



#: The log event types that change telemetry runs (others only count on their span).
PROJECTED_TYPES = tuple(TelemetryProjector.handlers)

def project(session_id: str, events: Iterable[Event]) -> list[TelemetryRun]:
    """Every TelemetryRun of a session, from its log events (dicts, in order)."""
    return TelemetryProjector(session_id).apply_all(events).ordered()


__all__ = ["PROJECTED_TYPES", "ProjectionError", "TelemetryProjector", "llm_provider",
           "project"]
