"""SSE frames made fast (issue 28): each event's JSON by orjson where that writes what
``json.dumps`` wrote, the same value everywhere, and the stream's batching and
keep-alives, all without a server (the stream over real HTTP: test_http_sse.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activities.deltas import LLM_CALL_SCHEDULED, TextDelta
from api.cli.sse_client import SseParser
from api.http.sse import INBOX_ITEMS, PING, StreamEvent, coerce, event_json, frame, sse_stream


def reference(data: Any) -> bytes:
    """What the stream wrote before orjson (api.http.sse before issue 28)."""
    return json.dumps(data, separators=(",", ":"), default=str).encode()


def has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(has_float(v) for v in value)
    return False


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_event_json_is_what_json_dumps_wrote(value: Any) -> None:
    out = event_json(value)
    old = reference(value)
    assert out.isascii() and b"\n" not in out and b"\r" not in out
    assert same(json.loads(out), json.loads(old))
    if not has_float(value):  # a float's exponent may be written otherwise, its value not
        assert out == old


@pytest.mark.parametrize("text", ["é", "line\u2028separator\u2029", "\x7f del", "😀 astral",
                                  "\x00\x1f control", "quote \" and \\ and /",
                                  "lone \ud800 surrogate"])
def test_what_json_dumps_escapes_is_escaped_as_it_did(text: str) -> None:
    value = {"text": text, text: [text]}
    assert event_json(value) == reference(value)


class Kind(StrEnum):
    A = "a"


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [
    {"at": datetime(2026, 11, 26, 19, 0, tzinfo=UTC)},  # str(): a space, not orjson's T
    {"kind": Kind.A}, {"point": Point(1)}, {1: "int key"}, {"big": 2**80},
    {"nan": float("nan"), "inf": [float("inf"), float("-inf")]}, {"tuple": (1, "a")},
])
def test_other_types_take_the_reference_path(value: Any) -> None:
    assert event_json(value) == reference(value)


def test_frames_carry_the_id_type_and_one_line_of_data() -> None:
    out = frame(StreamEvent(seq=7, event="text  with\nspace", data={"text": "a\nb é"}))
    assert out == b'id: 7\nevent: text with space\ndata: {"text":"a\\nb \\u00e9"}\n\n'
    assert frame(StreamEvent(seq=0, event="text.delta", data={}), with_id=False) == \
        b"event: text.delta\ndata: {}\n\n"


def test_coerce_takes_log_lines_models_and_objects_and_refuses_the_rest() -> None:
    line = {"seq": 3, "type": "text", "payload": {"text": "hi"}, "ts": "x"}
    assert coerce(line) == StreamEvent(3, "text", {"text": "hi"})
    assert coerce({"seq": 1, "event": "a", "data": {"x": 1}, "payload": {"y": 2}}) == \
        StreamEvent(1, "a", {"x": 1})
    assert coerce({"seq": 1, "kind": Kind.A}) == StreamEvent(1, "a", {})

    @dataclasses.dataclass
    class Obj:
        seq: int
        type: str
        payload: Any

    assert coerce(Obj(2, "text", {"t": 1})) == StreamEvent(2, "text", {"t": 1})
    for broken in ({"seq": "1", "type": "a"}, {"seq": 1}, {"type": "a"}, object(), None):
        with pytest.raises(ValueError, match="not a stream event"):
            coerce(broken)


# -- the stream ---------------------------------------------------------------------


def parse(parser: SseParser, chunk: bytes) -> list[Any]:
    """The messages a chunk completes (chunks end at a message's end)."""
    out = [parser.feed(line) for line in chunk.decode().split("\n")]
    return [m for m in out if m is not None]


async def messages(stream: AsyncIterator[bytes]) -> tuple[list[bytes], list[Any]]:
    """The chunks and the parsed messages of a whole stream."""
    chunks, parser, out = [], SseParser(), []
    async for chunk in stream:
        chunks.append(chunk)
        out.extend(parse(parser, chunk))
    return chunks, out


async def listed(items: list[Any], gate: asyncio.Event | None = None) -> AsyncIterator[Any]:
    for item in items:
        yield item
    if gate is not None:
        await gate.wait()


async def test_what_comes_together_goes_out_in_one_write_in_order() -> None:
    lines = [{"seq": i, "type": "text", "payload": {"text": f"t{i}"}} for i in range(1, 6)]
    chunks, msgs = await messages(sse_stream(listed(lines), keepalive_s=60, retry_ms=5))
    assert chunks[0] == b"retry: 5\n\n"
    assert [(m.id, m.event, m.json()) for m in msgs] == [
        *((str(i), "text", {"text": f"t{i}"}) for i in range(1, 6)),
        ("5", "stream.complete", {"last_id": 5})]
    # five lines handed over at once: one write (and the end), not one per line
    assert len(chunks) <= 3


async def test_a_slow_client_holds_the_provider_back() -> None:
    """The inbox is bounded: a provider with more to give waits until the stream's
    client takes what was handed over (what was not sent is not read further)."""
    taken = 0

    async def endless() -> AsyncIterator[Any]:
        nonlocal taken
        while True:
            await asyncio.sleep(0)  # lets the test run on, whether or not it is held
            taken += 1
            yield {"seq": taken, "type": "text", "payload": {}}

    stream = sse_stream(endless(), keepalive_s=60, retry_ms=5)
    await anext(stream)  # retry
    await anext(stream)  # the first batch
    for _ in range(3000):  # unbounded, the provider would be thousands ahead by now
        await asyncio.sleep(0)
    assert INBOX_ITEMS <= 256 and taken <= 2 * 256 + 2
    await stream.aclose()


async def test_keep_alives_flow_while_nothing_happens_and_stop_ends_the_stream() -> None:
    stopping, never = asyncio.Event(), asyncio.Event()
    stream = sse_stream(listed([], never), keepalive_s=0.01, retry_ms=5, stopping=stopping)
    assert await anext(stream) == b"retry: 5\n\n"
    assert await anext(stream) == PING
    assert await anext(stream) == PING
    stopping.set()
    with pytest.raises(StopAsyncIteration):
        while True:  # a ping may already be on its way
            assert await asyncio.wait_for(anext(stream), 5) == PING


async def test_a_provider_that_fails_or_gives_garbage_ends_with_an_error_event() -> None:
    async def failing() -> AsyncIterator[Any]:
        yield {"seq": 1, "type": "text", "payload": {"text": "before"}}
        raise RuntimeError("boom")

    _, msgs = await messages(sse_stream(failing(), keepalive_s=60, retry_ms=5))
    assert [(m.event, m.id) for m in msgs] == [("text", "1"), ("error", None)]
    assert msgs[-1].json()["error"] == {"code": "stream_failed",
                                        "message": "RuntimeError: boom"}
    _, msgs = await messages(sse_stream(listed([{"seq": "x"}]), keepalive_s=60, retry_ms=5))
    assert [m.event for m in msgs] == ["error"]
    assert "not a stream event" in msgs[0].json()["error"]["message"]


async def test_deltas_wait_for_their_calls_marker_and_stop_at_its_text() -> None:
    go, done = asyncio.Event(), asyncio.Event()

    async def provider() -> AsyncIterator[Any]:
        await go.wait()
        yield StreamEvent(seq=0, event=LLM_CALL_SCHEDULED, data={"call_id": "c1"})
        yield StreamEvent(seq=1, event="text", data={"call_id": "c1", "text": "Hello"})
        await done.wait()

    async def deltas() -> AsyncIterator[Any]:
        yield TextDelta(call_id="c1", delta="Hel")
        yield TextDelta(call_id="c1", delta="lo")
        go.set()
        await done.wait()

    stream = sse_stream(provider(), keepalive_s=60, retry_ms=5, deltas=deltas())
    parser, got = SseParser(), []
    async for chunk in stream:
        got.extend(parse(parser, chunk))
        if any(m.event == "text" for m in got):
            break
    await stream.aclose()
    done.set()
    # the held text goes out at the marker, before the call's text; nothing after it
    assert [(m.event, m.json().get("text")) for m in got] == [
        ("text.delta", "Hello"), ("text", "Hello")]
    assert got[0].id is None and got[1].id == "1"
