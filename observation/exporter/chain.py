"""The hash chain: canonical bytes (RFC 8785, JCS), a version prefix, sha256.

A line of ``events.ndjson`` is ``JCS(event) + "\\n"``, where ``event`` is the whole
envelope including ``event_hash``, and

    event_hash = sha256(b"hitlflow-log-v1\\n" + JCS(event without "event_hash")).hex()

so the hash covers every other field of the line (``seq``, ``run_id``, the span ids
too, not only the seed's five). The first event's ``prev_hash`` is ``GENESIS``; each
later one's is the previous line's ``event_hash``; ``seq`` is the 1-based line number.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

import rfc8785

from observation.exporter.model import LogEvent, MappedEvent

HASH_PREFIX = b"hitlflow-log-v1\n"
GENESIS = "0" * 64
#: JCS (I-JSON) numbers: integers beyond this lose precision, so they become strings.
MAX_SAFE_INT = 2**53 - 1


def jsonable(value: Any) -> Any:
    """The same value in the subset JCS can encode exactly: dict keys as strings,
    big integers and non-finite floats as strings, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


def _plain(value: Any) -> bool:
    """No floats, ASCII keys, safe integers: where JCS is ``json.dumps`` sorted."""
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return -MAX_SAFE_INT <= value <= MAX_SAFE_INT
    if t is dict:
        return all(type(k) is str and k.isascii() and _plain(v) for k, v in value.items())
    if t is list or t is tuple:
        return all(_plain(v) for v in value)
    return False


def jcs(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``.

    Most events hold no floats and only ASCII keys; for those, JCS is exactly the C
    ``json.dumps`` with sorted keys, no spaces and raw UTF-8 (same escapes; code point
    order is UTF-16 order for ASCII), several times faster than ``rfc8785``, which
    does the rest (floats, non-ASCII keys) and raises on what JCS cannot encode."""
    if _plain(value):
        try:
            return json.dumps(value, ensure_ascii=False, sort_keys=True,
                              separators=(",", ":")).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 raises its own error for it
    return rfc8785.dumps(value)


def hash_body(body: dict[str, Any]) -> str:
    """``event_hash`` of an envelope given without its ``event_hash``."""
    return hashlib.sha256(HASH_PREFIX + jcs(body)).hexdigest()


def line_bytes(event: LogEvent) -> bytes:
    return jcs(event.model_dump()) + b"\n"


class Chain:
    """Links mapped events one after the other: seq, prev_hash, event_hash."""

    def __init__(self, seq: int = 0, head: str = GENESIS) -> None:
        self.seq = seq
        self.head = head

    def link(self, event: MappedEvent) -> LogEvent:
        body = {**event.envelope(), "seq": self.seq + 1, "prev_hash": self.head}
        digest = hash_body(body)
        self.seq += 1
        self.head = digest
        return LogEvent(**body, event_hash=digest)

    def link_all(self, events: Iterable[MappedEvent]) -> Iterator[LogEvent]:
        for e in events:
            yield self.link(e)
