"""Reading Temporal history events: payload values, event times, run ids."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

import orjson
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent

from workflows.journal_carrier import JOURNAL_HEADER
from workflows.session_state import JOURNAL_MEMO_KEY


class MappingError(ValueError):
    """History that the mapping cannot map exactly (it never guesses)."""


def format_ts(event: HistoryEvent) -> str:
    """ISO 8601 in UTC with microseconds, e.g. ``2026-11-22T14:53:32.083963Z``."""
    t = event.event_time
    return f"{_second(t.seconds)}.{t.nanos // 1000:06d}Z"


@functools.lru_cache(maxsize=256)  # a history's events come a few per second
def _second(seconds: int) -> str:
    return f"{datetime.fromtimestamp(seconds, UTC):%Y-%m-%dT%H:%M:%S}"


def event_ms(event: HistoryEvent) -> int:
    t = event.event_time
    return t.seconds * 1000 + t.nanos // 1_000_000


#: Each byte to 1 if an ASCII digit, else 0: 19 digits in a row (``_LONG``) may be an
#: integer token orjson reads as a double (beyond 64 bits). ``translate`` and ``find``
#: scan in C, several times faster than a regular expression.
_DIGITS = bytes(int(48 <= b <= 57) for b in range(256))
_LONG = b"\x01" * 19


def payload_value(p: Payload) -> Any:
    """A payload of the pydantic JSON converter (``json/plain``) or ``binary/null``."""
    encoding = p.metadata.get("encoding", b"")
    if encoding == b"binary/null":
        return None
    if encoding == b"json/plain":
        return json_value(p.data)
    raise MappingError(f"payload encoding {encoding!r} is not supported by the exporter "
                       "(a payload codec would need to be configured here too)")


def json_value(data: bytes) -> Any:
    """``json.loads`` of a payload's bytes (UTF-8, a lone surrogate as its 3 bytes, as
    pydantic writes one), by orjson where it reads the very values: the same strings,
    integers up to 18 digits, and doubles (both round to nearest). What orjson refuses
    (a lone surrogate, NaN, a double beyond range, a BOM, nesting past its limit) and
    any run of 19 digits (an integer beyond 64 bits it would read as a double) take
    ``json`` (``tests/observation/test_hotpath.py``)."""
    if data.translate(_DIGITS).find(_LONG) < 0:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    try:  # surrogatepass: pydantic writes a lone surrogate in a dict key as its 3 bytes
        return json.loads(data.decode("utf-8", "surrogatepass"))
    except ValueError as err:
        raise MappingError(f"a json/plain payload that is not UTF-8 JSON ({err})") from None


def first_value(payloads: Any) -> Any:
    return payload_value(payloads.payloads[0]) if payloads.payloads else None


def journal_of(event: HistoryEvent) -> list[dict[str, Any]]:
    """The journal entries a history event carries: a memo upsert's
    ``hitlflow.journal``, or an ActivityTaskScheduled's ``hitlflow-journal`` header
    (``workflows.journal_carrier``); none for any other event."""
    if event.HasField("workflow_properties_modified_event_attributes"):
        fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
        found = fields.get(JOURNAL_MEMO_KEY)
    elif event.HasField("activity_task_scheduled_event_attributes"):
        found = event.activity_task_scheduled_event_attributes.header.fields.get(JOURNAL_HEADER)
    else:
        return []
    entries = payload_value(found) if found is not None else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise MappingError(f"history event {event.event_id}: the journal is not a list")
    return entries


def load_history(data: str | bytes) -> tuple[str, list[HistoryEvent]]:
    """``(session_id, events)`` of a history saved as JSON (``WorkflowHistory.to_json``
    or ``temporal workflow show --output json``)."""
    from temporalio.client import WorkflowHistory

    history = WorkflowHistory.from_json("", data if isinstance(data, str) else data.decode())
    if not history.events:
        raise MappingError("the history has no events")
    start = first_value(history.events[0].workflow_execution_started_event_attributes.input)
    if not isinstance(start, dict) or "session_id" not in start:
        raise MappingError("the history does not start a session (no session_id in its input)")
    return start["session_id"], list(history.events)
