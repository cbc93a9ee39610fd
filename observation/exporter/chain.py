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

import orjson

from observation.exporter.lines import (  # re-exported: the names of a line
    GENESIS,
    HASH_PREFIX,
    LINE_PREFIX,
    LOG_VERSION,
    LOG_VERSIONS,
    read_json,
)
from observation.exporter.model import LogEvent, MappedEvent, built
from observation.exporter.verify import ORJSON_JCS
from workflows.canonical import MAX_SAFE_INT, jcs, plain

__all__ = ["GENESIS", "HASH_PREFIX", "LINE_PREFIX", "LOG_VERSION", "LOG_VERSIONS", "Chain",
           "hash_body", "jsonable", "line_bytes", "line_hash", "log_value", "logged_jcs",
           "payload_jcs",
           "read_json", "seed_hash"]

#: JCS (I-JSON) numbers: integers beyond this lose precision, so they become strings.
_SURROGATE = re.compile("[\ud800-\udfff]")
_sha256 = hashlib.sha256


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


def log_value(value: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """:func:`jsonable` of a payload, and whether ``plain`` holds for it, in one walk
    that copies only what jsonable changes (most payloads: nothing; an LLM call's: its
    integral floats) and shares the rest. A payload is never changed once mapped (the
    mapping makes new dicts for what it changes), so it needs no copy of its own."""
    exact = [True]
    if type(value) is not dict:  # (which the mapped event then refuses)
        return _reference(value, exact), exact[0]
    return _logged(value, exact), exact[0]


def _logged(value: dict[str, Any] | list[Any] | tuple[Any, ...], exact: list[bool]) -> Any:
    """:func:`jsonable` of a container, ``value`` itself when it changes nothing;
    ``exact[0]`` cleared where the result is not ``plain``. Whatever is not a str, int,
    bool, None, float, dict, list or tuple of exactly those types takes the reference
    (:func:`_leaf`), and so does a dict with a key that is not a str or holds a lone
    surrogate. (One loop per kind of container, each value's common case first and
    left at once: the walk is the mapping's largest cost per line.)"""
    if type(value) is dict:
        return _logged_dict(value, exact)
    return _logged_list(value, exact)


def _logged_dict(value: dict[str, Any], exact: list[bool]) -> Any:
    changed: list[tuple[str, Any]] | None = None
    for k, v in value.items():
        if type(k) is not str or not k.isascii():
            if type(k) is not str or _SURROGATE.search(k):
                return _reference(value, exact)
            exact[0] = False  # a non-ASCII key: JCS's order is UTF-16's
        t = type(v)
        if t is str:
            if v.isascii() or not _SURROGATE.search(v):
                continue
            new: Any = _text(v)
        elif t is bool or v is None:
            continue
        elif t is int:
            if -MAX_SAFE_INT <= v <= MAX_SAFE_INT:
                continue
            new = str(v)
        elif t is dict:
            new = _logged_dict(v, exact)
            if new is v:
                continue
        elif t is list or t is tuple:
            new = _logged_list(v, exact)
            if new is v:
                continue
        else:
            new = _leaf(v, exact)
            if new is v:
                continue
        if changed is None:
            changed = []
        changed.append((k, new))
    if changed is None:
        return value
    out = dict(value)
    out.update(changed)
    return out


def _logged_list(value: list[Any] | tuple[Any, ...], exact: list[bool]) -> Any:
    changed: list[tuple[int, Any]] | None = [] if type(value) is tuple else None
    for i, v in enumerate(value):
        t = type(v)
        if t is str:
            if v.isascii() or not _SURROGATE.search(v):
                continue
            new: Any = _text(v)
        elif t is bool or v is None:
            continue
        elif t is int:
            if -MAX_SAFE_INT <= v <= MAX_SAFE_INT:
                continue
            new = str(v)
        elif t is dict:
            new = _logged_dict(v, exact)
            if new is v:
                continue
        elif t is list or t is tuple:
            new = _logged_list(v, exact)
            if new is v:
                continue
        else:
            new = _leaf(v, exact)
            if new is v:
                continue
        if changed is None:
            changed = []
        changed.append((i, new))
    if changed is None:
        return value
    out = list(value)
    for i, new in changed:
        out[i] = new
    return out


def _leaf(value: Any, exact: list[bool]) -> Any:
    if type(value) is float:
        if not math.isfinite(value):
            return str(value)
        if value.is_integer() and abs(value) <= MAX_SAFE_INT:
            return int(value)
        exact[0] = False
        return value
    return _reference(value, exact)


def _reference(value: Any, exact: list[bool]) -> Any:
    out = jsonable(value)
    if not plain(out):
        exact[0] = False
    return out


def payload_jcs(value: Any) -> bytes:
    """``jcs(value)``: orjson (sorted keys, integers within +-(2**53 - 1)) where
    ``plain(value)`` holds, which it writes exactly as RFC 8785 does (no float, ASCII
    keys: the same escapes, and code point order is UTF-16 order; the verifier's
    fast path, ``verify.fast_line``, rests on the same fact, and
    ``tests/observation/test_hotpath.py`` checks it over generated values); else
    ``jcs`` (rfc8785, which also refuses a lone surrogate, as before)."""
    return _orjson_jcs(value) if plain(value) else jcs(value)


def logged_jcs(value: dict[str, Any]) -> bytes:
    """``jcs(jsonable(value))`` of a dict: :func:`log_value`'s walk, then orjson where
    it found the result ``plain`` (as :func:`payload_jcs`, without walking again)."""
    logged, exact = log_value(value)
    return _orjson_jcs(logged) if exact else jcs(logged)


def _orjson_jcs(value: Any) -> bytes:
    """``jcs`` of a value ``plain`` holds for, by orjson."""
    try:
        return orjson.dumps(value, option=ORJSON_JCS)
    except orjson.JSONEncodeError:  # a lone surrogate (rfc8785 says why), or nesting
        return jcs(value)  # deeper than orjson goes


def _envelope_jcs(envelope: dict[str, Any]) -> bytes:
    """``jcs`` of a line's envelope (its payload set aside): orjson when every value is a
    str, int or None (strings, the two integers), as :func:`payload_jcs`."""
    for v in envelope.values():
        if type(v) is not str and type(v) is not int and v is not None:
            return jcs(envelope)
    try:
        return orjson.dumps(envelope, option=ORJSON_JCS)
    except orjson.JSONEncodeError:  # a lone surrogate: rfc8785 says why
        return jcs(envelope)


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
        f = event.__dict__  # the fields as they are (validated, or made so, when mapped)
        payload, head = f["payload"], self.head
        event_id, ts, type_ = f["event_id"], f["ts"], f["type"]
        self.exact = exact = event.__pydantic_private__["_plain"]  # plain(payload)
        text = _orjson_jcs(payload) if exact else jcs(payload)
        digest = _sha256((event_id + ts + type_).encode() + text + head.encode()).hexdigest()
        seq = self.seq + 1
        full = {"event_id": event_id, "run_id": f["run_id"], "ts": ts, "type": type_,
                "payload": payload, "trace_id": f["trace_id"], "span_id": f["span_id"],
                "parent_span_id": f["parent_span_id"], "seq": seq, "prev_hash": head,
                "event_hash": digest, "log_version": self.version}
        rest = _envelope_jcs({**full, "payload": 0})  # strings, integers, null
        # Top-level markers: a raw '"' is never inside a JSON string (it is escaped).
        i = rest.index(b',"payload":0,')
        body = b"".join((rest[:i], b',"payload":', text, rest[i + 12:]))
        self.line_head = lhash = _sha256(
            b"".join((LINE_PREFIX, self.line_head.encode(), b"\n", body))).hexdigest()
        j = body.index(b',"log_version":')  # "line_hash" sorts before it
        self.line = b"".join((body[:j], b',"line_hash":"', lhash.encode(), b'"', body[j:],
                              b"\n"))
        full["line_hash"] = lhash
        return built(LogEvent, full)  # every field given, as model_construct had it

    def link_all(self, events: Iterable[MappedEvent]) -> Iterator[LogEvent]:
        for e in events:
            yield self.link(e)
