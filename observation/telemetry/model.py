"""The TelemetryRun record (seed 003, "central telemetry").

One parent run per session (``job_type`` ``session``) and one child per reasoning
step (``reasoning``), work item — a tool call, a request to the person or a plan
step — (``work_item``), gate run (``gate``) and LLM call (``llm_call``; its parent
is its reasoning step). Each run is one span of the log: ``context_json`` holds the
``trace_id`` and ``span_id`` (and ``parent_span_id``) that the NDJSON events of
that operation carry.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

JOB_TYPES = ("session", "reasoning", "work_item", "gate", "llm_call")
#: Statuses of runs. A session run has the session's canonical status; a child is
#: queued/running/waiting_user until it ends succeeded, failed, rejected or canceled.
STATUSES = ("queued", "running", "waiting_user", "succeeded", "failed", "rejected",
            "canceled")
ENDED = frozenset({"succeeded", "failed", "rejected", "canceled"})


def run_id(session_id: str, kind: str, key: str = "") -> str:
    """``<session_id>/session`` for the parent, ``<session_id>/<kind>/<key>`` for a
    child (the span's kind and key, as in ``observation.exporter.ids``)."""
    return f"{session_id}/{kind}/{key}" if key else f"{session_id}/{kind}"


class TelemetryRun(BaseModel):
    run_id: str
    parent_run_id: str | None
    session_id: str
    job_type: str
    name: str
    status: str
    started_at: str | None = None
    ended_at: str | None = None
    updated_at: str
    #: ``{"trace_id", "span_id", "parent_span_id"}``: the ids of the NDJSON events.
    context_json: dict[str, str | None]
    attributes: dict[str, Any]
    ordinal: int  # the n-th run of its session (0: the parent), in the log's order
    first_seq: int  # the log line that created the run
    last_seq: int  # the last log line that changed it
    event_count: int = 0  # log lines on this run's span

    @property
    def ended(self) -> bool:
        """The run has its end time (a session: its last run closed)."""
        return self.ended_at is not None

    @property
    def trace_id(self) -> str:
        return str(self.context_json["trace_id"])

    @property
    def span_id(self) -> str:
        return str(self.context_json["span_id"])

    @property
    def parent_span_id(self) -> str | None:
        return self.context_json.get("parent_span_id")
