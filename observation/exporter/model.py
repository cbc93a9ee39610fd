"""The mapped event model: what the exporter writes, and what SSE and telemetry read.
The event types themselves are declared in ``observation/event_types.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr

from observation.event_types import is_sse
from observation.exporter.lines import LLM_OUTPUT_SCHEMA as LLM_OUTPUT_SCHEMA  # its home
from workflows.canonical import plain

M = TypeVar("M", bound=BaseModel)
_set = object.__setattr__
#: The ``schema_id`` of an artifact: an LLM answer, a tool's output (``activities.py``).
TOOL_RESULT_SCHEMA = "hitlflow/tool_result/v1"


@dataclass(frozen=True)
class StreamHead:
    """Where a session's SSE stream stands now: the last id so far (the log's last
    line; 0: none yet), the last id an event of the stream carries (0: none), and
    whether the session ended (then no id after ``last_seq`` will ever come)."""

    last_seq: int
    last_event_seq: int
    finished: bool


class Artifact(BaseModel):
    """A file the exporter writes under ``runs/<session_id>/`` before its
    ARTIFACT_WRITTEN line; ``content`` is a pure function of history."""

    model_config = ConfigDict(frozen=True)
    path: str  # relative to the run directory, e.g. "artifacts/tool/<execution_id>.json"
    content: bytes


class Envelope(BaseModel):
    """Seed 003's event envelope, the fields every log event has."""

    model_config = ConfigDict(frozen=True)
    event_id: str
    run_id: str
    ts: str
    type: str
    payload: dict[str, Any]
    trace_id: str
    span_id: str
    parent_span_id: str | None = None


class MappedEvent(Envelope):
    """One log event before it is chained (no seq, no hashes)."""

    artifact: Artifact | None = None
    #: ``plain(payload)``: its JCS is orjson's (``chain.payload_jcs``); known when
    #: mapped (``chain.log_value``), else computed here.
    _plain: bool = PrivateAttr(default=False)

    def model_post_init(self, context: Any, /) -> None:
        self._plain = plain(self.payload)

    def envelope(self) -> dict[str, Any]:
        return self.model_dump(exclude={"artifact"})


def built(cls: type[M], values: dict[str, Any], private: dict[str, Any] | None = None) -> M:
    """An instance of ``cls`` (:class:`MappedEvent` or :class:`LogEvent`) from
    ``values``, every field of it in its declaration order, each already of its type:
    what the exporter's hot path makes (its mapping and chain guarantee the types),
    without pydantic's validation or ``model_construct``'s per-field walk. The same
    instance as ``cls(**values)`` makes (``tests/observation/test_hotpath.py``);
    ``private``: its private attributes, as its ``model_post_init`` would set them."""
    m = cls.__new__(cls)
    _set(m, "__dict__", values)
    _set(m, "__pydantic_fields_set__", set(values))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", private)
    return m


class LogEvent(Envelope):
    """One line of ``events.ndjson`` (the envelope plus ``seq`` and the chain).

    ``log_version`` 2 lines carry it and ``line_hash``; version 1 lines have neither
    (:meth:`line` leaves them out)."""

    parent_span_id: str | None  # on every line, null or not
    seq: int
    prev_hash: str
    event_hash: str
    log_version: int = 2
    line_hash: str | None = None

    def line(self) -> dict[str, Any]:
        """The line's fields, exactly (what ``events.ndjson`` holds)."""
        if self.log_version == 1:
            return self.model_dump(exclude={"log_version", "line_hash"})
        return self.model_dump()

    @property
    def is_sse(self) -> bool:
        return is_sse(self.type)
