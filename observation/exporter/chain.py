"""The hash chain: canonical bytes (RFC 8785, JCS), sha256.

A line of ``events.ndjson`` is ``JCS(event) + "\\n"``. Two format versions:

* v2 (what is written now; every line has ``"log_version": 2``)::

    event_hash = sha256(UTF-8(event_id + ts + type + JCS(payload) + prev_hash)).hex()
    line_hash  = sha256(b"hitlflow-log-v2\\n" + UTF-8(prev_line_hash) + b"\\n"
                        + JCS(event without "line_hash")).hex()

  ``event_hash`` is seed 003's binding formula, exactly; ``line_hash`` covers every
  other field of the line (``seq``, ``run_id``, the span ids, ``event_hash``,
  ``log_version``) and chains on the line before (``prev_line_hash``: its
  ``line_hash``; ``GENESIS`` for line 1), so no envelope field changes unnoticed.

* v1 (logs written before; no ``log_version``, no ``line_hash``)::

    event_hash = sha256(b"hitlflow-log-v1\\n" + JCS(event without "event_hash")).hex()

In both, the first event's ``prev_hash`` is ``GENESIS``; each later one's is the
previous line's ``event_hash``; ``seq`` is the 1-based line number. A log is one
version from its first line to its last. Pure: no I/O.

Numbers (both versions): JCS writes every number as the IEEE 754 double it is, in
ECMAScript form, so a line is read back with every number as a double
(:func:`read_json`; the float ``1e16`` is written ``10000000000000000``, which is that
double again). Before a value is written, :func:`jsonable` makes it one that JCS
writes exactly: integers outside +-(2**53 - 1) become strings of their decimal
digits, and a lone surrogate (not Unicode; UTF-8 cannot carry it) becomes U+FFFD.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from observation.exporter.lines import (  # re-exported: the names of a line
    GENESIS,
    HASH_PREFIX,
    LINE_PREFIX,
    LOG_VERSION,
    LOG_VERSIONS,
    read_json,
)
from observation.exporter.model import LogEvent, MappedEvent
from workflows.canonical import MAX_SAFE_INT, canonical_text, jcs, plain

__all__ = ["GENESIS", "HASH_PREFIX", "LINE_PREFIX", "LOG_VERSION", "LOG_VERSIONS", "Chain",
           "hash_body", "jsonable", "line_bytes", "line_hash", "read_json", "seed_hash"]

#: JCS (I-JSON) numbers: integers beyond this lose precision, so they become strings.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    """``value`` as Unicode text: a lone surrogate (which a JSON ``\\udXXX`` escape
    can make, but UTF-8 cannot carry) becomes U+FFFD."""
    if value.isascii() or not _SURROGATE.search(value):
        return value
    return _SURROGATE.sub("\ufffd", value)


def jsonable(value: Any) -> Any:
    """The value as the log holds it, which JCS writes exactly and :func:`read_json`
    reads back equal: dict keys as strings, integers outside +-(2**53 - 1) and
    non-finite floats as strings, a float that is a safe integer as that integer
    (``1.0`` and ``-0.0`` are written ``1`` and ``0``), lone surrogates as U+FFFD,
    tuples as lists."""
    if isinstance(value, dict):
        return {_text(str(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int):
        return value if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return int(value) if value.is_integer() and abs(value) <= MAX_SAFE_INT else value
    return _text(str(value))


def hash_body(body: dict[str, Any]) -> str:
    """v1's ``event_hash`` of an envelope given without its ``event_hash``."""
    return hashlib.sha256(HASH_PREFIX + jcs(body)).hexdigest()


def seed_hash(event: dict[str, Any]) -> str:
    """v2's ``event_hash``, seed 003's rule:
    ``sha256(event_id + ts + type + payload + prev_hash)``, the fields concatenated as
    UTF-8 strings in that order, ``payload`` as its RFC 8785 (JCS) text, hex digest."""
    text = (event["event_id"] + event["ts"] + event["type"] + jcs(event["payload"]).decode()
            + event["prev_hash"])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def line_hash(event: dict[str, Any], prev_line_hash: str) -> str:
    """v2's ``line_hash`` of an event given without its ``line_hash``."""
    return hashlib.sha256(LINE_PREFIX + prev_line_hash.encode() + b"\n" + jcs(event)
                          ).hexdigest()


def line_bytes(event: LogEvent) -> bytes:
    return jcs(event.line()) + b"\n"


class Chain:
    """Links mapped events one after the other: seq, prev_hash, event_hash (and in v2
    log_version and line_hash), in format ``version``."""

    def __init__(self, seq: int = 0, head: str = GENESIS, *, version: int = LOG_VERSION,
                 line_head: str = GENESIS) -> None:
        if version not in LOG_VERSIONS:
            raise ValueError(f"unknown log format version {version!r}")
        self.seq, self.head, self.version, self.line_head = seq, head, version, line_head
        self.line: bytes | None = None  # the last linked line's bytes (v2)
        self.exact = False  # ... which read back as the very values (see link)

    def link(self, event: MappedEvent) -> LogEvent:
        """The next line. In v2 its canonical bytes are made once, the payload's JCS
        text spliced into the envelope's, both hashes taken over those bytes; they are
        left in :attr:`line` (and :attr:`exact`: the line holds no float, no integer
        beyond 2^53 - 1 and only ASCII keys, so any JSON reader reads it back as the
        same values) for the writer, which then neither re-encodes nor re-reads it."""
        if self.version == 1:
            body = {**event.envelope(), "seq": self.seq + 1, "prev_hash": self.head}
            digest = hash_body(body)
            linked = LogEvent(**body, event_hash=digest, log_version=1)
            self.line, self.exact = None, False
        else:
            linked = self._link_v2(event)
            digest = linked.event_hash
        self.seq += 1
        self.head = digest
        return linked

    def _link_v2(self, event: MappedEvent) -> LogEvent:
        full = dict(event)  # the fields as they are (validated when mapped)
        del full["artifact"]
        payload = full["payload"]
        self.exact = exact = plain(payload)
        try:  # jcs(payload), its plain() walk done once
            text = canonical_text(payload).encode() if exact else jcs(payload)
        except UnicodeEncodeError:  # a lone surrogate: rfc8785 refuses it as before
            text = jcs(payload)
        digest = hashlib.sha256((full["event_id"] + full["ts"] + full["type"]).encode() + text
                                + self.head.encode()).hexdigest()
        full.update(seq=self.seq + 1, prev_hash=self.head, event_hash=digest,
                    log_version=self.version)
        rest = jcs({**full, "payload": 0})  # the envelope: strings, integers, null
        # Top-level markers: a raw '"' is never inside a JSON string (it is escaped).
        i = rest.index(b',"payload":0,')
        body = b"".join((rest[:i], b',"payload":', text, rest[i + 12:]))
        self.line_head = lhash = hashlib.sha256(
            b"".join((LINE_PREFIX, self.line_head.encode(), b"\n", body))).hexdigest()
        j = body.index(b',"log_version":')  # "line_hash" sorts before it
        self.line = b"".join((body[:j], b',"line_hash":"', lhash.encode(), b'"', body[j:],
                              b"\n"))
        return LogEvent.model_construct(**full, line_hash=lhash)

    def link_all(self, events: Iterable[MappedEvent]) -> Iterator[LogEvent]:
        for e in events:
            yield self.link(e)
