"""The TelemetryRun record (seed 003, "central telemetry").

One parent run per session (``job_type`` ``session``) and one child per reasoning
step (``reasoning``), work item — a tool call, a request to the person or a plan
step — (``work_item``), gate run (``gate``) and LLM call (``llm_call``; its parent
is its reasoning step). Each run is one span of the log: ``context_json`` holds the
``trace_id`` and ``span_id`` (and ``parent_span_id``) that the NDJSON events of
that operation carry.

:class:`TelemetryRun` is the record as read and shown (the store's rows, the CLI,
``project``); :class:`Run` is the projector's own mutable state of one run, a plain
slotted object changed on every log line (no validation per attribute set) that
keeps its store row's JSON texts until what they encode changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel

from observation.exporter.verify import ORJSON_JCS
from workflows.canonical import jcs, plain

JOB_TYPES = ("session", "reasoning", "work_item", "gate", "llm_call")
#: Statuses of runs. A session run has the session's canonical status; a child is
#: queued/running/waiting_user until it ends succeeded, failed, rejected or canceled.
STATUSES = ("queued", "running", "waiting_user", "succeeded", "failed", "rejected",
            "canceled")
ENDED = frozenset({"succeeded", "failed", "rejected", "canceled"})


#: orjson writes RFC 8785 for values ``plain`` holds for (sorted keys; an integer
#: beyond +-(2**53 - 1) refused): as ``observation.exporter.chain.payload_jcs``.


def run_id(session_id: str, kind: str, key: str = "") -> str:
    """``<session_id>/session`` for the parent, ``<session_id>/<kind>/<key>`` for a
    child (the span's kind and key, as in ``observation.exporter.ids``)."""
    return f"{session_id}/{kind}/{key}" if key else f"{session_id}/{kind}"


class SpanIds:
    """What a run's ``ended_at`` and ``context_json`` say, for both shapes of a run
    (:class:`TelemetryRun`, validated; :class:`Run`, the projector's)."""

    __slots__ = ()
    if TYPE_CHECKING:  # the classes' own fields (annotated here, pydantic would add them)
        ended_at: str | None
        context_json: dict[str, str | None]

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


class TelemetryRun(SpanIds, BaseModel):
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



class Run(SpanIds):
    """A run as the projector holds it: the fields of :class:`TelemetryRun`, mutable,
    without validation. ``attributes`` is changed only through :meth:`set_attrs`
    (which drops the cached ``attributes_json``); ``context_json`` never changes."""

    __slots__ = (
        "_attrs_text",
        "_context_text",
        "_odd",
        "attributes",
        "context_json",
        "ended_at",
        "event_count",
        "first_seq",
        "job_type",
        "last_seq",
        "name",
        "ordinal",
        "parent_run_id",
        "run_id",
        "session_id",
        "started_at",
        "status",
        "updated_at",
    )

    def __init__(self, *, run_id: str, parent_run_id: str | None, session_id: str,
                 job_type: str, name: str, status: str, updated_at: str,
                 context_json: dict[str, str | None], attributes: dict[str, Any],
                 ordinal: int, first_seq: int, last_seq: int,
                 started_at: str | None = None, ended_at: str | None = None,
                 event_count: int = 0) -> None:
        self.run_id, self.parent_run_id, self.session_id = run_id, parent_run_id, session_id
        self.job_type, self.name, self.status = job_type, name, status
        self.started_at, self.ended_at, self.updated_at = started_at, ended_at, updated_at
        self.context_json, self.attributes = context_json, attributes
        self.ordinal, self.first_seq, self.last_seq = ordinal, first_seq, last_seq
        self.event_count = event_count
        self._context_text: str | None = None
        self._attrs_text: str | None = None
        # attributes whose value orjson may not write as RFC 8785 does (floats, non-ASCII
        # keys, big integers...): while there is one, the texts go through rfc8785
        self._odd = {k for k, v in attributes.items() if not (k.isascii() and plain(v))}


    def set_attrs(self, attrs: dict[str, Any]) -> None:
        """Set attributes; each new value is checked once for the fast encoder."""
        self.attributes.update(attrs)
        self._attrs_text = None
        odd = self._odd
        for k, v in attrs.items():
            if k.isascii() and plain(v):
                odd.discard(k)
            else:
                odd.add(k)

    def texts(self) -> tuple[str, str]:
        """``(context_json, attributes_json)`` as RFC 8785 text, each encoded once per
        change."""
        if self._context_text is None:
            self._context_text = _jcs_text(self.context_json, plain(self.context_json))
        if self._attrs_text is None:
            self._attrs_text = _jcs_text(self.attributes, not self._odd)
        return self._context_text, self._attrs_text

    def model(self) -> TelemetryRun:
        """The :class:`TelemetryRun` of this state (copies: later changes stay out)."""
        return TelemetryRun(
            run_id=self.run_id, parent_run_id=self.parent_run_id, session_id=self.session_id,
            job_type=self.job_type, name=self.name, status=self.status,
            started_at=self.started_at, ended_at=self.ended_at, updated_at=self.updated_at,
            context_json=dict(self.context_json), attributes=dict(self.attributes),
            ordinal=self.ordinal, first_seq=self.first_seq, last_seq=self.last_seq,
            event_count=self.event_count)


def _jcs_text(value: dict[str, Any], is_plain: bool) -> str:
    """``jcs(value)`` as text; ``is_plain``: ``plain(value)`` is known to hold."""
    if is_plain:
        try:
            return orjson.dumps(value, option=ORJSON_JCS).decode()
        except orjson.JSONEncodeError:  # a lone surrogate: jcs raises its own error
            pass
    return jcs(value).decode()
