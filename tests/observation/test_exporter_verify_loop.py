"""The verifier's loop takes a line at once (its fast path) only when everything about
it holds. A forger who makes both hashes match over the line's own bytes, as the
verifier takes them, but writes a field of the wrong JSON type, a float, a key or
form the fast path cannot prove, a wrong ``seq`` or ``prev_hash``, gets exactly the
reference path's answer, at that line; what the reference accepts is accepted."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import orjson
import pytest
import rfc8785

from observation.exporter import ChainBrokenError
from observation.exporter.chain import GENESIS, LINE_PREFIX
from observation.exporter.verify import verify_lines


def text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def forged(event: dict, write: Callable[[dict], bytes], prev_line: str
           ) -> tuple[bytes, str, str]:
    """``event`` written by ``write`` with both hashes taken over the bytes as written
    (the markers' slices, as the verifier takes them): line, event_hash, line_hash."""
    e = {**event, "event_hash": "e" * 64, "line_hash": "f" * 64}
    line = write(e)
    i, j = line.find(b',"payload":') + 11, line.rfind(b',"prev_hash":"')
    seed = "".join(text(e[k]) for k in ("event_id", "ts", "type")).encode() + line[i:j] \
        + text(e["prev_hash"]).encode()
    event_hash = hashlib.sha256(seed).hexdigest()
    line = line.replace(b"e" * 64, event_hash.encode(), 1)
    k = line.find(b',"line_hash":"')
    body = line[:k] + line[k + 79:]
    digest = hashlib.sha256(LINE_PREFIX + prev_line.encode() + b"\n" + body).hexdigest()
    return line.replace(b"f" * 64, digest.encode(), 1) + b"\n", event_hash, digest


def relinked(lines: list[bytes], k: int, edit: Callable[[dict], dict],
             write: Callable[[dict], bytes]) -> list[bytes]:
    """The log with line ``k`` as ``edit`` makes it (written by ``write``) and every
    line's hashes, seq and prev_hash made to match, so only line ``k``'s content can
    fail."""
    out, prev, prev_line = [], GENESIS, GENESIS
    for n, raw in enumerate(lines, 1):
        e = {**json.loads(raw), "seq": n, "prev_hash": prev}
        if n == k:
            e = edit(e)
        line, prev, prev_line = forged(e, write if n == k else rfc8785.dumps, prev_line)
        out.append(line)
    return out


def answers(lines: list[bytes], fast: bool) -> tuple[list[dict], tuple | None]:
    out: list[dict] = []
    try:
        for event in verify_lines(lines, fast=fast):
            out.append(event)
    except ChainBrokenError as err:
        return out, (err.line, err.code, err.reason)
    return out, None


def with_(**fields: object) -> Callable[[dict], dict]:
    return lambda e: {**e, **fields}


def with_payload(payload: object) -> Callable[[dict], dict]:
    """The payload replaced, or (a dict) its fields added to the line's own."""
    if isinstance(payload, dict):
        return lambda e: {**e, "payload": {**e["payload"], **payload}}
    return lambda e: {**e, "payload": payload}


JCS, ORJSON = rfc8785.dumps, lambda e: orjson.dumps(e, option=orjson.OPT_SORT_KEYS)

#: name -> (edit, writer, the error's words or None: the line is accepted).
CASES: dict[str, tuple[Callable[[dict], dict], Callable[[dict], bytes], str | None]] = {
    "seq true": (with_(seq=True), JCS, "seq is bool"),
    "seq a string": (with_(seq="1"), JCS, "seq is str"),
    "seq one ahead": (lambda e: {**e, "seq": e["seq"] + 1}, JCS, "a line was deleted"),
    "log_version 2.0": (with_(log_version=2.0), ORJSON, "log_version is float"),
    "log_version true": (with_(log_version=True), JCS, "log_version True"),
    "log_version 3": (with_(log_version=3), JCS, "log_version 3"),
    "run_id a list": (with_(run_id=["s"]), JCS, "run_id is list"),
    "ts a number": (with_(ts=5), JCS, "ts is int"),
    "type null": (with_(type=None), JCS, "type is NoneType"),
    "span_id a number": (with_(span_id=1), JCS, "span_id is int"),
    "parent_span_id a number": (with_(parent_span_id=7), JCS, "parent_span_id is int"),
    "payload a list": (with_payload([]), JCS, "payload is list"),
    "payload a string": (with_payload("x"), JCS, "payload is str"),
    "prev_hash another": (with_(prev_hash="a" * 64), JCS, "prev_hash is not the event_hash"),
    "a field more": (with_(extra=1), JCS, "not a log event: fields"),
    "a float written by orjson": (with_payload({"v": 1.0}), ORJSON, "canonical form"),
    "keys unsorted": (with_payload({"b": 1, "a": 2}), lambda e: json.dumps(
        {**e, "payload": {"b": 1, "a": 2}}, separators=(",", ":")).encode(), None),
    "a float, canonical": (with_payload({"v": 0.5, "w": 1e21}), JCS, None),
    "a non-ASCII key, canonical": (with_payload({"é": 1, "z": "ü"}), JCS, None),
    "a key above U+E000 beside an astral one": (
        with_payload({"\ue000": 1, "\U0001f600": 2}), JCS, None),
    "non-ASCII values": (with_payload({"v": "é😀\u2028", "w": ["ü"]}), JCS, None),
    "an integer beyond 2**53 as JCS writes it": (with_payload({"v": 2.0**60}), JCS, None),
}


@pytest.mark.parametrize("k", [1, 6])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_loop_answers_as_the_reference_does(demo_lines, name, k):
    edit, write, words = CASES[name]
    if name == "keys unsorted":  # json.dumps keeps the envelope's order: sort it first
        def write(e):
            return b"{" + b",".join(
                json.dumps(key).encode() + b":" + (
                    json.dumps(v, separators=(",", ":")).encode() if key == "payload"
                    else JCS(v))
                for key, v in sorted(e.items())) + b"}"
        words = "canonical form"
    lines = relinked(demo_lines, k, edit, write)
    fast, reference = answers(lines, True), answers(lines, False)
    assert fast == reference
    events, error = fast
    if words is None:
        assert error is None and len(events) == len(demo_lines)
    else:
        assert error is not None and error[0] == k and words in error[2], error


def test_an_intact_log_goes_through_the_loop_whole(demo_lines):
    """The same events either way, and each exactly the line read back."""
    fast = list(verify_lines(demo_lines))
    assert fast == list(verify_lines(demo_lines, fast=False))
    assert fast == [orjson.loads(x) for x in demo_lines]
