"""Verify a log: every line's canonical form and hashes, every ``prev_hash``, the
sequence, what each field must be, the head (``head`` file and ``snapshot.json``),
and the artifacts.

The format version is read from line 1 (``log_version`` 2: seed 003's ``event_hash``
and the chained ``line_hash``, both checked; no ``log_version``: v1, its one
``event_hash``), and every later line must be of the same version.

Beyond the hashes, every line must say what the exporter writes (``fields.py``):
the session's ``run_id`` and ``trace_id`` (the session is the run directory's name),
its spans, a well-formed ``ts``, unique ``event_id``s in history order, and LLM
artifacts that hash to their ``output_hash``.

Each line is read with every number as a double (:func:`read_json`, as RFC 8785
reads numbers), so a line must be the JCS form of what it holds.
Any failure raises :class:`ChainBrokenError`, whose text starts with
``EVENT_CHAIN_BROKEN`` (or ``ARTIFACT_MISMATCH``) and names the 1-based line; no
content of a file makes it raise anything else.
``verify_lines`` and ``check_head`` are pure; ``verify_dir`` only reads files.

Speed: each line is parsed once. The fast path (:func:`fast_line`, format v2) reads
it with ``orjson`` and proves it canonical by writing it back with ``orjson`` (sorted
keys, integers within +-(2^53 - 1)) and comparing the bytes: for values of strings,
booleans, null, safe integers and ASCII keys, nested, orjson writes exactly what RFC
8785 does (``tests/observation/test_verify_fast.py`` checks it over generated values);
a line holding a float or a non-ASCII key, or whose envelope is not as it must be,
takes the reference path instead: C ``json`` with every number read as a double,
checked with C ``json.dumps`` where that is exactly RFC 8785, else with ``rfc8785``
(``chain.jcs``), and that path gives every error. Both hashes are taken over slices
of the canonical line itself (no re-serialisation). ``verify_lines`` runs the fast
path in its loop (no call per line; the envelope's types, ``seq`` and ``prev_hash``
checked before hashing) and sends any line it does not take through
:func:`_checked_line`, the checks and errors of before
(``tests/observation/test_exporter_verify_loop.py``: forged lines get the same answer).

A big log (``PARALLEL_MIN_BYTES``, not ``live``) is verified by :func:`verify_dir` on
several processes (``jobs``): ranges of lines, each through ``verify_lines`` seeded
with a :class:`Start` (``_range``), the seams proved by ``verify_parallel``, and on
anything it cannot prove the serial loop from line 1, so the answer and every error
are the serial ones (``tests/observation/test_verify_parallel.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from hashlib import sha256 as _sha256
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson
import rfc8785

from observation.exporter.fields import FieldError, LineFields
from observation.exporter.lines import (
    ARTIFACT_WRITTEN,
    GENESIS,
    HASH_PREFIX,
    LINE_PREFIX,
    SESSION_FORKED,
    read_json,
)
from observation.exporter.lines import number as double
from workflows.canonical import canonical_text, jcs

LOG_NAME, HEAD_NAME, SNAPSHOT_NAME = "events.ndjson", "head", "snapshot.json"
#: ``verify_dir`` verifies a log this big or bigger on several cores (smaller: the
#: processes would cost more than they save).
PARALLEL_MIN_BYTES = 32 << 20
#: ``verify_dir``'s processes when not told: the cores, at most this many.
DEFAULT_MAX_JOBS = 8
#: ``verify_dir``'s processes at most (``hitlflow log verify --jobs``).
MAX_JOBS = 64
_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # workflows.config.SESSION_ID_RE
#: The fields of a v1 line; a v2 line has these and ``log_version``, ``line_hash``.
ENVELOPE = frozenset({"seq", "event_id", "run_id", "ts", "type", "payload", "trace_id",
                      "span_id", "parent_span_id", "prev_hash", "event_hash"})
ENVELOPE_V2 = ENVELOPE | {"log_version", "line_hash"}
#: The JSON type of each field (``parent_span_id``: a string or null).
FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "seq": int, "payload": dict, "parent_span_id": (str, type(None)), "log_version": int,
    **{k: str for k in ("event_id", "run_id", "ts", "type", "trace_id", "span_id",
                        "prev_hash", "event_hash", "line_hash")}}
#: Bytes that keep a line off the ``json.dumps`` fast path: the UTF-8 lead bytes of
#: U+E000 and above (where UTF-16 order, JCS's key order, and code point order can
#: differ). Lone surrogates cannot come from UTF-8 (strict); from a ``\ud800``
#: escape they fail the fast path's encode.
_SLOW_BYTES = re.compile(rb"[\xee-\xf4]")
#: ``json.dumps`` as JCS writes the values the fast path lets through.
_fast_jcs = canonical_text
#: orjson's options on the fast path: sorted keys, and an integer beyond
#: +-(2^53 - 1) refused (JCS would write it as the double it rounds to).
ORJSON_JCS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_V2_FIELDS = tuple(sorted(ENVELOPE_V2))
_v2_values = itemgetter(*_V2_FIELDS)
#: The types of a v2 line's fields in key order (``parent_span_id``: str or None).
_V2_TYPES = frozenset(tuple(parent if f == "parent_span_id" else FIELD_TYPES[f]
                            for f in _V2_FIELDS) for parent in (str, type(None)))


class ChainBrokenError(ValueError):
    def __init__(self, line: int | None, reason: str, code: str = "EVENT_CHAIN_BROKEN"):
        self.line, self.reason, self.code = line, reason, code
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{code}: {where}{reason}")


@dataclass(frozen=True)
class Verified:
    events: int
    last_hash: str
    log_version: int | None = None  # None: an empty log
    forked_from: tuple[str, int] | None = None  # a fork's parent and seq, its link checked


class _Numbers:
    """``json`` decoder hooks: every number read as a double (as ``read_json``), and
    a record of what ``json.dumps`` would not print as RFC 8785 does (a float whose
    literal is not its JCS form, an integer beyond 2^53 - 1); NaN and the
    infinities are refused (not JSON)."""

    def __init__(self) -> None:
        self.exact = True  # False: the line must be checked with chain.jcs

    def int(self, s: str) -> int | float:
        if len(s) > 15:
            self.exact = False
            return double(s)
        return int(s)

    def float(self, s: str) -> float:
        x = float(s)
        if self.exact:
            try:
                self.exact = rfc8785.dumps(x) == s.encode() and repr(x) == s
            except rfc8785.CanonicalizationError:
                self.exact = False
        return x

    @staticmethod
    def constant(s: str) -> Any:
        raise ValueError(f"{s} is not JSON")

    def decoder(self) -> json.JSONDecoder:
        return json.JSONDecoder(parse_int=self.int, parse_float=self.float,
                                parse_constant=self.constant)


def parse_line(line: bytes, number: int, decode: Any = None) -> dict[str, Any]:
    """One line as a dict with exactly a log event's fields, of their JSON types;
    ``decode``: a ``JSONDecoder.decode`` with :class:`_Numbers`' hooks."""
    if not line.endswith(b"\n"):
        raise ChainBrokenError(number, "the last line is not terminated (a torn write)")
    if decode is None:
        decode = _Numbers().decoder().decode
    try:
        obj = decode(line.decode())
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise ChainBrokenError(number, f"not JSON ({type(err).__name__}: {err})") from None
    if not isinstance(obj, dict) or obj.keys() not in (ENVELOPE, ENVELOPE_V2) or (
            "log_version" in obj and obj["log_version"] != 2):
        found = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        version = obj.get("log_version") if isinstance(obj, dict) else None
        raise ChainBrokenError(number, f"not a log event: fields {found}"
                               + (f", log_version {version!r}" if version is not None else ""))
    for field, kind in FIELD_TYPES.items():
        if field in obj and (not isinstance(obj[field], kind) or isinstance(obj[field], bool)):
            raise ChainBrokenError(number, f"not a log event: {field} is "
                                   f"{type(obj[field]).__name__} {obj[field]!r:.40}")
    return obj


def _no_float(value: dict[str, Any] | list[Any]) -> bool:
    """No float anywhere in a container orjson read (its types: dict, list, str, int,
    bool, None, float)."""
    for v in value.values() if type(value) is dict else value:
        t = type(v)
        if t is dict or t is list:
            if not _no_float(v):
                return False
        elif t is float:
            return False
    return True


def _plain_keys(value: dict[str, Any] | list[Any]) -> bool:
    """No float and only ASCII keys anywhere in a container orjson read."""
    if type(value) is dict:
        if not all(k.isascii() for k in value):
            return False
        value = list(value.values())
    for v in value:
        t = type(v)
        if t is dict or t is list:
            if not _plain_keys(v):
                return False
        elif t is float:
            return False
    return True


def fast_line(line: bytes) -> dict[str, Any] | None:
    """A newline-terminated v2 line, parsed, when ``orjson`` proves it is the RFC 8785
    form of what it holds and its envelope is as it must be (the 13 fields of their
    JSON types, ``log_version`` 2); None when it cannot (the reference path then
    decides, and explains).

    The proof: orjson reads the line and writes it back with sorted keys and no
    integer beyond +-(2^53 - 1), byte for byte the line; and the line holds no float
    and no non-ASCII key. For such values orjson writes what RFC 8785 does (the same
    escapes, code point key order is UTF-16 order for ASCII keys) and reads what
    :func:`read_json` reads (every integer within the doubles' exact range)."""
    if line[-1:] != b"\n":  # a torn line, whatever orjson makes of it
        return None
    try:
        obj = orjson.loads(line)
        if type(obj) is not dict or len(obj) != 13 or \
                orjson.dumps(obj, option=ORJSON_JCS) != line[:-1]:
            return None
        values = _v2_values(obj)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, KeyError):
        return None
    if tuple(map(type, values)) not in _V2_TYPES or obj["log_version"] != 2:
        return None
    if not (_no_float(obj["payload"]) if line.isascii() else _plain_keys(obj["payload"])):
        return None
    return obj


def canonical(obj: Any, number: int) -> bytes:
    """``jcs(obj)``; a number JCS cannot write (``1e400`` reads as infinity) is a broken
    line, not a crash."""
    try:
        return jcs(obj)
    except (rfc8785.CanonicalizationError, RecursionError) as err:
        raise ChainBrokenError(number, "not in canonical form (RFC 8785): "
                               f"{type(err).__name__}: {err}") from None


def line_version(obj: dict[str, Any]) -> int:
    """A parsed line's format version (a v1 line has no marker)."""
    return int(obj.get("log_version", 1))


def _canonical(obj: dict[str, Any], line: bytes, n: int, nums: _Numbers) -> None:
    """The line is ``JCS(obj) + "\\n"``, byte for byte."""
    if nums.exact and (line.isascii() or _SLOW_BYTES.search(line) is None):
        try:
            if _fast_jcs(obj).encode() + b"\n" == line:
                return
        except (UnicodeEncodeError, RecursionError):  # a lone surrogate (a \\ud800 escape)
            pass
    if canonical(obj, n) + b"\n" != line:
        raise ChainBrokenError(n, "not in canonical form (RFC 8785): the bytes were edited")


def _slice_hashes(obj: dict[str, Any], line: bytes, version: int, prev_line: str
                  ) -> tuple[str, str | None]:
    """``(event_hash, line_hash)`` as they must be, from a canonical line's own bytes:
    in JCS the members are in key order, so the fields' canonical texts are slices
    (a raw ``"`` is never inside a string: the markers below are the top level's)."""
    if version == 1:  # the line without its first member, "event_hash":"<64>",
        body = b"{" + line[81:-1]  # (an event_hash not 64 long cannot match anyway)
        return hashlib.sha256(HASH_PREFIX + body).hexdigest(), None
    i = line.find(b',"payload":') + 11
    payload = line[i:line.rfind(b',"prev_hash":"')]
    seed = hashlib.sha256(b"".join((obj["event_id"].encode(), obj["ts"].encode(),
                                    obj["type"].encode(), payload,
                                    obj["prev_hash"].encode()))).hexdigest()
    j = line.find(b',"line_hash":"')
    body = line[:j] + line[j + 79:-1]  # without ,"line_hash":"<64>" (else: no match)
    return seed, hashlib.sha256(b"".join((LINE_PREFIX, prev_line.encode(), b"\n", body))
                                ).hexdigest()


def _v2_hashes(obj: dict[str, Any], line: bytes, prev_line: bytes) -> tuple[str, str]:
    """``(event_hash, line_hash)`` of a canonical v2 line, from its own bytes (as
    :func:`_slice_hashes`; ``prev_line``: the ``line_hash`` before, as bytes)."""
    i = line.find(b',"payload":', 150) + 11  # after the three hashes' fields
    seed = _sha256(b"".join((obj["event_id"].encode(), obj["ts"].encode(),
                             obj["type"].encode(), line[i:line.rfind(b',"prev_hash":"')],
                             obj["prev_hash"].encode()))).hexdigest()
    j = line.find(b',"line_hash":"', 79)
    h = _sha256(b"".join((LINE_PREFIX, prev_line, b"\n", line[:j])))
    h.update(line[j + 79:-1])
    return seed, h.hexdigest()


@dataclass(frozen=True)
class Start:
    """Where :func:`verify_lines` starts when not at line 1: the state it would have
    after line ``line`` (its ``event_hash``, its ``line_hash`` (v1: ``GENESIS``), its
    version) and the field checks' state then (``verify_parallel``: a range of a log)."""
    line: int
    prev_hash: str
    prev_line_hash: str
    version: int | None
    fields: LineFields


def verify_lines(lines: Iterable[bytes], session_id: str | None = None, *,
                 fast: bool = True, start: Start | None = None
                 ) -> Iterator[dict[str, Any]]:
    """Yield each verified event; raise on the first line that breaks the chain.
    ``session_id``: the session the log must be of (default: line 1's ``run_id``).
    ``fast=False``: every line on the reference path (what the fast one must equal).
    ``start``: ``lines`` are the log's from line ``start.line + 1`` on, checked as if
    the lines before had just been (default: from line 1).

    A v2 line is taken at once (the fast path, in the loop) when all of this holds,
    else it goes through :func:`_checked_line` (what every line went through before:
    :func:`fast_line` or the reference path, every check, and every error): orjson
    reads it as a dict and writes it back byte for byte (sorted keys, no integer
    beyond +-(2^53 - 1), the newline), its 13 fields are v2's of their JSON types,
    ``log_version`` 2, ``payload`` holds no float and only ASCII keys (so the line is
    RFC 8785 of what it holds, as for :func:`fast_line`); ``seq`` is the line number,
    ``prev_hash`` the event_hash before, and both hashes match. The slices hashed are
    found by the top level's markers (a raw ``"`` is never inside a string); as both
    hashes match, ``event_hash`` and ``line_hash`` are 64 long, so the markers of
    ``line_hash`` (at 93 or later) and ``payload`` (at 211 or later) are the first
    ones from 79 and 150 on, as :func:`_v2_hashes` finds them. Then the field checks."""
    if start is None:
        first, prev, prev_line, version = 1, GENESIS, GENESIS, None
        fields = LineFields(session_id, session_id is not None)
    else:
        first, prev, prev_line = start.line + 1, start.prev_hash, start.prev_line_hash
        version, fields = start.version, start.fields
    pre = b"".join((LINE_PREFIX, prev_line.encode(), b"\n"))  # line_hash's first bytes
    check_fields = fields.check
    nums = _Numbers()
    decode = nums.decoder().decode
    loads, dumps, sha256 = orjson.loads, orjson.dumps, _sha256
    values_of, types, option, no_float, plain_keys = (
        _v2_values, _V2_TYPES, ORJSON_JCS | orjson.OPT_APPEND_NEWLINE, _no_float,
        _plain_keys)
    for n, line in enumerate(lines, first):
        if fast and version != 1:
            try:
                obj = loads(line)
                values = values_of(obj)
                same = dumps(obj, option=option) == line
            except (ValueError, TypeError, KeyError):  # orjson's errors are of these
                same = False
            if same and len(obj) == 13 and tuple(map(type, values)) in types and \
                    values[3] == 2 and values[8] == n and values[6] == prev and (
                    no_float(values[5]) if line.isascii() else plain_keys(values[5])):
                event_hash, event_id, lhash, _, _, _, _, _, _, _, _, ts, kind = values
                i = line.find(b',"payload":', 150) + 11
                j = line.find(b',"line_hash":"', 79)
                if event_hash == sha256((event_id + ts + kind).encode()
                                        + line[i:line.rfind(b',"prev_hash":"')]
                                        + prev.encode()).hexdigest() and \
                        lhash == sha256(pre + line[:j] + line[j + 79:-1]).hexdigest():
                    try:
                        check_fields(obj, n)
                    except FieldError as err:
                        raise ChainBrokenError(err.line, err.reason, err.code) from None
                    prev, prev_line, version = event_hash, lhash, 2
                    pre = b"".join((LINE_PREFIX, lhash.encode(), b"\n"))
                    yield obj
                    continue
        obj, prev, prev_line, version = _checked_line(
            line, n, prev, prev_line, version, fast, nums, decode, check_fields)
        pre = b"".join((LINE_PREFIX, prev_line.encode(), b"\n"))
        yield obj


def _checked_line(line: bytes, n: int, prev: str, prev_line: str, version: int | None,
                  fast: bool, nums: _Numbers, decode: Any, check_fields: Any
                  ) -> tuple[dict[str, Any], str, str, int]:
    """Line ``n`` checked: ``(event, its event_hash, its line_hash (v1: the one before),
    its version)``; raises on what breaks the chain."""
    obj = fast_line(line) if fast else None
    if obj is None:  # the reference path: it names what is wrong
        nums.exact = True
        obj = parse_line(line, n, decode)
        line_v = line_version(obj)
        if version is not None and line_v != version:
            raise ChainBrokenError(n, f"a log format v{line_v} line in a v{version} log: "
                                   "a log is one version from its first line to its last")
        _canonical(obj, line, n, nums)
        event_hash, lhash = _slice_hashes(obj, line, line_v, prev_line)
    else:
        line_v = 2
        if version is not None and version != 2:
            raise ChainBrokenError(n, f"a log format v2 line in a v{version} log: "
                                   "a log is one version from its first line to its last")
        event_hash, lhash = _v2_hashes(obj, line, prev_line.encode())
    if event_hash != obj["event_hash"]:
        raise ChainBrokenError(n, "event_hash does not match the event's content"
                               if line_v == 1 else "event_hash does not match sha256("
                               "event_id + ts + type + payload + prev_hash) (seed 003)")
    if line_v != 1:
        if lhash != obj["line_hash"]:
            raise ChainBrokenError(n, "line_hash does not match the line's content and "
                                   "the line_hash before it (an envelope field changed)")
        prev_line = lhash
    if obj["seq"] != n:
        raise ChainBrokenError(n, f"seq {obj['seq']} on line {n}: a line was deleted, "
                               "inserted or moved")
    if obj["prev_hash"] != prev:
        raise ChainBrokenError(n, "prev_hash is not the event_hash of the line before")
    try:
        check_fields(obj, n)
    except FieldError as err:
        raise ChainBrokenError(err.line, err.reason, err.code) from None
    return obj, event_hash, prev_line, line_v


def parse_head(data: bytes, what: str, *, whole: bool = False) -> dict[str, Any]:
    """The head in ``head`` or ``snapshot.json`` (``whole``: all of the latter)."""
    try:
        head = read_json(data)
        if whole:
            if not isinstance(head, dict):
                raise TypeError("not an object")
            return head
        if isinstance(head, dict) and "head" in head:  # snapshot.json carries it too
            head = head["head"]
        if not (type(head["last_seq"]) is int and isinstance(head["last_hash"], str)):
            raise TypeError("last_seq/last_hash of the wrong type")
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        raise ChainBrokenError(None, f"{what} is not a valid head ({err})") from None
    return head


def read_head(run_dir: Path) -> tuple[int, str] | None:
    """``(last_seq, last_hash)`` of ``run_dir``'s ``head`` file; None when it is
    missing or unreadable (a caller then reads the log itself)."""
    try:
        head = json.loads((run_dir / HEAD_NAME).read_bytes())
        return int(head["last_seq"]), str(head["last_hash"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_head(verified: Verified, head: dict[str, Any], what: str) -> None:
    n, last_seq = verified.events, head["last_seq"]
    if last_seq > n:
        raise ChainBrokenError(n + 1, f"the log ends at line {n} but {what} says last_seq "
                               f"{last_seq}: lines were lost from the tail")
    if last_seq < n:
        raise ChainBrokenError(last_seq + 1, f"{what} says last_seq {last_seq} but the log "
                               f"goes on to line {n} (appended after the head was written, or "
                               "an exporter stopped mid-batch: restarting it repairs this)")
    if head["last_hash"] != verified.last_hash:
        raise ChainBrokenError(n, f"{what}'s last_hash is not the event_hash of line {n}")


def check_artifact(run_dir: Path, event: dict[str, Any]) -> None:
    p = event["payload"]
    if not (isinstance(p.get("path"), str) and isinstance(p.get("sha256"), str)):
        raise ChainBrokenError(event["seq"], "ARTIFACT_WRITTEN without a path and sha256",
                               "ARTIFACT_MISMATCH")
    try:
        path = (run_dir / p["path"]).resolve()
        inside = path.is_relative_to(run_dir.resolve() / "artifacts")
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if inside else ""
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        why = err.strerror if isinstance(err, OSError) else str(err)
        raise ChainBrokenError(event["seq"], f"artifact {p['path']!r}: {why}",
                               "ARTIFACT_MISMATCH") from None
    if not inside:
        raise ChainBrokenError(event["seq"], f"artifact path {p['path']!r} leaves the "
                               "artifacts folder", "ARTIFACT_MISMATCH")
    if digest != p["sha256"]:
        raise ChainBrokenError(event["seq"], f"artifact {p['path']} does not hash to its "
                               "recorded sha256", "ARTIFACT_MISMATCH")


def read_lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from f


def verify_dir(run_dir: Path, *, artifacts: bool = True, live: bool = False,
               parent: bool = True, jobs: int = 1,
               parallel_bytes: int | None = None) -> Verified:
    """Verify ``run_dir`` (``events.ndjson``, ``head``, ``snapshot.json``, artifacts):
    the log of the session its name says (``runs/<session_id>/``).

    ``live``: the log may still be written. The exporter appends lines, fsyncs them,
    then replaces ``snapshot.json`` and ``head``; so ``head`` is read first and the
    lines up to its ``last_seq`` are checked (lines after it are a batch in flight,
    checked against the next head), and ``snapshot.json`` is not compared.
    ``parent``: a fork's log also checks its link to its parent's (``check_parent``).

    ``jobs``: processes to verify with (default 1: this one, as a library call in a
    process with threads must not fork; ``hitlflow log verify`` passes
    :func:`default_jobs`); a log of at least ``parallel_bytes`` (default
    :data:`PARALLEL_MIN_BYTES`), not ``live``, is split into that many
    ranges, each verified in its own process (``verify_parallel``): the same answer
    as serially, which it falls back to on any failure, so every error is the serial
    one. A ``live`` log is verified serially."""
    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs must be 1 to {MAX_JOBS}, not {jobs}")
    log, head_path, snap_path = (run_dir / n for n in (LOG_NAME, HEAD_NAME, SNAPSHOT_NAME))
    for p in (log, head_path, snap_path):
        if not p.is_file():
            raise ChainBrokenError(None, f"{p} is missing" + (
                ": a truncated tail cannot be ruled out" if p != log else ""))
    session = run_dir.resolve().name
    count, last, version = 0, GENESIS, None
    lineage: dict[str, Any] | None = None
    try:
        heads = [(parse_head(head_path.read_bytes(), "head"), "head")] if live else []
        ranged = None if live else _ranges(run_dir, log, session, artifacts, jobs,
                                           parallel_bytes)
        if ranged is not None:
            count, last, version, lineage = (ranged.events, ranged.last_hash,
                                             ranged.log_version, ranged.lineage)
        else:
            lines = read_lines(log)
            for event in verify_lines(islice(lines, heads[0][0]["last_seq"]) if live
                                      else lines, session):
                if count == 0 and event["type"] == SESSION_FORKED:
                    lineage = event["payload"]
                count, last, version = event["seq"], event["event_hash"], line_version(event)
                if artifacts and event["type"] == ARTIFACT_WRITTEN:
                    check_artifact(run_dir, event)
        if not live:
            heads = [(parse_head(p.read_bytes(), p.name), p.name) for p in (head_path, snap_path)]
            snapshot_of = parse_head(snap_path.read_bytes(), "snapshot.json", whole=True)
            if snapshot_of.get("run_id") != session:
                raise ChainBrokenError(None, f"snapshot.json is not of session {session} "
                                       "(its run_id says another)")
    except OSError as err:
        raise ChainBrokenError(None, f"cannot read {err.filename}: {err.strerror}") from None
    verified = Verified(count, last, version)
    for head, what in heads:
        check_head(verified, head, what)
    if lineage is not None and parent:
        check_parent(run_dir, lineage)
        verified = Verified(count, last, version,
                            (lineage["parent_session_id"], lineage["parent_seq"]))
    return verified


def default_jobs() -> int:
    """The processes ``hitlflow log verify`` verifies with when not told: the cores, at
    most :data:`DEFAULT_MAX_JOBS`."""
    return max(1, min(os.cpu_count() or 1, DEFAULT_MAX_JOBS))


def _ranges(run_dir: Path, log: Path, session: str, artifacts: bool, jobs: int,
            parallel_bytes: int | None) -> Any:
    """:func:`verify_ranges` when there are processes to use and the log is big enough,
    else None (the serial loop)."""
    least = PARALLEL_MIN_BYTES if parallel_bytes is None else parallel_bytes
    if jobs < 2 or log.stat().st_size < max(least, 1):
        return None
    return verify_ranges(log, session, run_dir if artifacts else None, jobs)


def verify_ranges(log: Path, session: str, run_dir: Path | None, jobs: int) -> Any:
    """``log`` (of ``session``) verified in up to ``jobs`` ranges of lines, one process
    each (``verify_parallel``, which proves the seams): a ``RangesVerified`` (what
    the serial loop would find), or None when the ranges cannot prove it; ``run_dir``:
    check the artifact files there too (None: not)."""
    from observation.exporter.verify_parallel import run_ranges

    return run_ranges(_range, log, session, run_dir, jobs)


def check_range(path: Path, start: int, end: int, session: str, run_dir: Path | None
                ) -> Any:
    """One range's ``Summary``, checked in this process (as a worker does)."""
    from observation.exporter.verify_parallel import verify_range

    return verify_range(_range, str(path), start, end, session,
                        None if run_dir is None else str(run_dir))


def _range(out: Any, path: Path, start: int, end: int, session: str,
           run_dir: Path | None) -> None:
    """A range's checks, in its worker (``verify_parallel``): ``verify_lines`` seeded
    from the line before (``Start``, ``RangeFields``) over the range's own lines, the
    artifact files, and what the parent needs in ``out`` (a ``Summary``)."""
    from observation.exporter.verify_parallel import (
        RangeFields,
        line_before,
        lines_to,
        summarise,
    )

    fields = RangeFields(session)
    seeded = Start(0, GENESIS, GENESIS, None, fields)
    with path.open("rb") as f:
        if start:
            out.seed = line_before(f, start)
            obj = parse_line(out.seed, 0)
            fields.seed(obj)
            version = line_version(obj)
            seeded = Start(obj["seq"], obj["event_hash"],
                           obj["line_hash"] if version == 2 else GENESIS, version, fields)
            out.first = obj["seq"] + 1
        f.seek(start)
        seen: list[bytes] = []
        events = verify_lines(lines_to(f, end - start, seen), session, start=seeded)
        event = next(events, None)
        if event is None:
            raise ValueError("no line in the range")
        if start == 0 and event["type"] == SESSION_FORKED:
            out.lineage = event["payload"]
        if run_dir is not None and event["type"] == ARTIFACT_WRITTEN:
            check_artifact(run_dir, event)
        if run_dir is None:  # the rest consumed in C, the last one kept
            event = next(iter(deque(events, maxlen=1)), event)
        else:
            for event in events:
                if event["type"] == ARTIFACT_WRITTEN:
                    check_artifact(run_dir, event)
    if not seen:
        raise ValueError("the range did not end at its end")
    out.count = event["seq"] - out.first + 1  # every seq checked: the line numbers
    out.last_line, out.last_hash = seen[0], event["event_hash"]
    out.version = line_version(event)
    summarise(out, fields)


def check_parent(run_dir: Path, lineage: dict[str, Any]) -> None:
    """A fork's link (its ``SESSION_FORKED``, line 1): the parent's log, next to the
    fork's, verifies from its line 1 up to ``parent_seq``, and that line's
    ``line_hash`` is ``parent_line_hash``. Lines after it are not the fork's concern."""
    parent, seq, want = (lineage.get(k) for k in
                         ("parent_session_id", "parent_seq", "parent_line_hash"))
    if not (isinstance(parent, str) and _SESSION_NAME.fullmatch(parent)
            and type(seq) is int and seq >= 1 and isinstance(want, str)):
        raise ChainBrokenError(1, "SESSION_FORKED does not name its parent (session, seq, "
                               "line_hash)")
    log = run_dir.resolve().parent / parent / LOG_NAME
    where = f"the parent session {parent}'s log"
    if not log.is_file():
        raise ChainBrokenError(1, f"{where} is missing ({log}): the fork's link cannot be "
                               "checked")
    got: dict[str, Any] | None = None
    try:
        for event in verify_lines(islice(read_lines(log), seq), parent):
            got = event
    except ChainBrokenError as err:
        raise ChainBrokenError(1, f"{where} does not verify up to the fork point, line "
                               f"{seq}: {err}") from None
    except OSError as err:
        raise ChainBrokenError(1, f"cannot read {where}: {err.strerror}") from None
    if got is None or got["seq"] != seq:
        raise ChainBrokenError(1, f"{where} ends before line {seq}, the fork point")
    if got.get("line_hash") != want:
        raise ChainBrokenError(1, f"{where}: line {seq}'s line_hash is not the one the fork "
                               "recorded (the parent's log changed at or before the fork "
                               "point)")
