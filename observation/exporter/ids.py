"""Deterministic ids: the same history always gives the same ids.

Telemetry (parent/child runs, OpenTelemetry spans) uses these functions too, so
an NDJSON event and its telemetry run carry the same ``trace_id``/``span_id``.

Spans, one per operation (not per event):

* ``session``           the session (root, no parent): one per workflow id
* ``reasoning/<call>``  a reasoning step (parent: session)
* ``llm_call/<call>``   the LLM call of that step (parent: its reasoning step)
* ``work_item/<exec>``  an ExecutionContract: a tool call or a request to the
                        person, with its tool activity (parent: session)
"""

from __future__ import annotations

import functools
import hashlib


def _h(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def trace_id(session_id: str) -> str:
    """32 hex digits (OpenTelemetry's 16-byte trace id)."""
    return _h("hitlflow-trace-v1", session_id)[:32]


@functools.lru_cache(maxsize=4096)  # pure: a session's spans come again and again
def span_id(session_id: str, kind: str, key: str = "") -> str:
    """16 hex digits (OpenTelemetry's 8-byte span id)."""
    return _h("hitlflow-span-v1", session_id, kind, key)[:16]


def session_span(session_id: str) -> str:
    return span_id(session_id, "session")


def reasoning_span(session_id: str, call_id: str) -> str:
    return span_id(session_id, "reasoning", call_id)


def llm_span(session_id: str, call_id: str) -> str:
    return span_id(session_id, "llm_call", call_id)


def work_item_span(session_id: str, execution_id: str) -> str:
    return span_id(session_id, "work_item", execution_id)


def event_id(temporal_run_id: str, temporal_event_id: int, index: int) -> str:
    """``<temporal run id>:<temporal event id>:<n>``: the n-th log event made from
    that history event (readable: it points back to the exact Temporal event)."""
    return f"{temporal_run_id}:{temporal_event_id}:{index}"
