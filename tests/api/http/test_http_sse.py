"""The SSE stream over real HTTP: framing, ids, resume, keep-alive, unknown types,
and a real session's events from the default provider (the exporter, once it exists)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from activities.deltas import LLM_CALL_SCHEDULED, InProcessDeltaBus
from api.cli.sse_client import SseMessage, SseParser
from api.http.app import ApiServer, create_app
from api.http.deps import ApiTuning
from api.http.sse import StreamEvent
from api.sse_names import STREAM_COMPLETE
from observation.exporter import StreamHead
from tests.api.http_support import AUTH, HttpStack, confirm_body, error_of

SEED_000_PAYLOAD = {"execution_id", "action_summary", "from_status", "to_status", "trigger",
                    "actor_category", "is_terminal", "is_resumable", "has_side_effects",
                    "timestamp"}
HANG_GUARD_S = 30
#: The text deltas of the ``sse`` fixture's API (sessions are distinct per test).
DELTAS = InProcessDeltaBus()


class Bus:
    """A fake event provider for one session: publish events, close when done."""

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []
        self.last_seq = 0
        self.closed = False
        self.fail: str | None = None
        self.calls: list[int | None] = []
        self._cond = asyncio.Condition()

    async def publish(self, event: str, data: Any) -> None:
        async with self._cond:
            self.last_seq += 1
            self.events.append(StreamEvent(seq=self.last_seq, event=event, data=data))
            self._cond.notify_all()

    async def mark(self, call_id: str) -> None:
        """Where an LLM call was scheduled: a marker, as the exporter's providers give."""
        async with self._cond:
            self.events.append(StreamEvent(seq=0, event=LLM_CALL_SCHEDULED,
                                           data={"call_id": call_id}))
            self._cond.notify_all()

    async def close(self, fail: str | None = None) -> None:
        async with self._cond:
            self.closed, self.fail = True, fail
            self._cond.notify_all()

    async def head(self) -> StreamHead:
        return StreamHead(self.last_seq, self.last_seq, self.closed)

    async def stream(self, after_seq: int | None) -> AsyncIterator[StreamEvent]:
        self.calls.append(after_seq)
        taken = 0  # events (and markers) taken from the list
        while True:
            async with self._cond:
                await self._cond.wait_for(
                    lambda taken=taken: len(self.events) > taken or self.closed)
                new, taken = self.events[taken:], len(self.events)
            for event in new:
                if event.event == LLM_CALL_SCHEDULED or event.seq > (after_seq or 0):
                    yield event
            if self.closed and taken >= len(self.events):
                if self.fail:
                    raise RuntimeError(self.fail)
                return


class Reader:
    """Reads an SSE response line by line: messages and keep-alive comments. The
    stream's last event, ``stream.complete``, is kept in ``complete``, not returned."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()
        self.parser = SseParser()
        self.pings = 0
        self.complete: SseMessage | None = None

    async def next(self) -> SseMessage | None:
        """The next message, or None when the stream ended."""
        async def read() -> SseMessage | None:
            async for line in self.lines:
                if line.startswith(":"):
                    self.pings += 1
                msg = self.parser.feed(line)
                if msg is not None and msg.event == STREAM_COMPLETE:
                    assert self.complete is None, "two stream.complete events"
                    self.complete = msg
                elif msg is not None:
                    assert self.complete is None, f"{msg} after stream.complete"
                    return msg
            return None
        return await asyncio.wait_for(read(), HANG_GUARD_S)

    async def rest(self) -> list[SseMessage]:
        out = []
        while (msg := await self.next()) is not None:
            out.append(msg)
        return out


@pytest.fixture(scope="module")
async def sse(http_stack: HttpStack, free_port) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                                      dict[str, Bus]]]:
    """An API whose SSE source is a fake bus per session (sessions are real)."""
    buses: dict[str, Bus] = {}

    def provider(client: Any, session_id: str, after_seq: int | None):
        return buses[session_id].stream(after_seq)

    async def head(client: Any, session_id: str) -> StreamHead:
        return await buses[session_id].head()

    app = create_app(http_stack.settings, http_stack.client, event_provider=provider,
                     stream_head=head, tuning=ApiTuning(keepalive_s=0.05, retry_ms=1234),
                     delta_bus=DELTAS)
    server = ApiServer(app, "127.0.0.1", free_port())
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
            yield http, buses
    finally:
        await server.stop()


async def new_session(http_stack: HttpStack, buses: dict[str, Bus]) -> tuple[str, Bus]:
    sid = (await http_stack.http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    buses[sid] = Bus()
    return sid, buses[sid]


async def test_frames_carry_ids_types_and_json_and_pings_flow(http_stack, sse):
    http, buses = sse
    sid, bus = await new_session(http_stack, buses)
    await bus.publish("conversation.state.changed", {"from": "queued", "to": "running"})
    await bus.publish("some.future.event", {"text": "line one\nline two \u2028 ünïcode"})
    await bus.publish("text", {"text": "hello"})
    async with http.stream("GET", f"/api/sessions/{sid}/events") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        reader = Reader(r)
        got = [await reader.next() for _ in range(3)]
        assert reader.parser.retry_ms == 1234
        assert [(m.id, m.event) for m in got] == [
            ("1", "conversation.state.changed"), ("2", "some.future.event"), ("3", "text")]
        assert got[1].json() == {"text": "line one\nline two \u2028 ünïcode"}
        # Nothing happens for a while: keep-alive comments, then the next event.
        while reader.pings < 2:
            await asyncio.wait_for(reader.lines.__anext__(), HANG_GUARD_S)
            reader.pings += 1
        await bus.publish("execution_state", {"execution_id": "x"})
        msg = await reader.next()
        assert (msg.id, msg.event, msg.json()) == ("4", "execution_state", {"execution_id": "x"})
        await bus.close()
        assert await reader.rest() == []  # the stream ends with the session
        assert (reader.complete.id, reader.complete.json()) == ("4", {"last_id": 4})
    # A client that only knows some event types just skips the others.
    async with http.stream("GET", f"/api/sessions/{sid}/events") as r:
        texts = [m.json()["text"] for m in await Reader(r).rest() if m.event == "text"]
    assert texts == ["hello"]


async def test_text_deltas_have_no_id_and_stop_at_their_calls_text(http_stack, sse):
    http, buses = sse
    sid, bus = await new_session(http_stack, buses)
    await bus.publish("conversation.state.changed", {"from": "queued", "to": "running"})
    DELTAS.publish(sid, "c1", "Hel", first=True)
    async with http.stream("GET", f"/api/sessions/{sid}/events") as r:
        reader = Reader(r)
        state = await reader.next()
        assert (state.id, state.event) == ("1", "conversation.state.changed")
        # Held until the stream passes where its call was scheduled, then the text so far.
        await bus.mark("c1")
        first = await reader.next()
        assert (first.id, first.event, first.json()) == (
            None, "text.delta", {"call_id": "c1", "delta": "", "text": "Hel"})
        DELTAS.publish(sid, "c1", "lo")
        delta = await reader.next()
        assert (delta.id, delta.event, delta.json()) == (
            None, "text.delta", {"call_id": "c1", "delta": "lo"})
        await bus.publish("text", {"call_id": "c1", "text": "Hello"})
        text = await reader.next()
        assert (text.id, text.event) == ("2", "text")
        DELTAS.publish(sid, "c1", " (late)")  # after its text: dropped
        # The next call's text does not run ahead of what the log has before it.
        DELTAS.publish(sid, "c2", "Next", first=True)
        await bus.publish("tool_result", {"text": "before the call"})
        before = await reader.next()
        assert (before.id, before.event) == ("3", "tool_result")
        await bus.mark("c2")
        nxt = await reader.next()
        assert (nxt.id, nxt.json()) == (None, {"call_id": "c2", "delta": "", "text": "Next"})
        DELTAS.publish(sid, "c2", "!")
        assert (await reader.next()).json() == {"call_id": "c2", "delta": "!"}
        DELTAS.finish(sid, "c1")
        DELTAS.finish(sid, "c2")
        await bus.close()
        assert await reader.rest() == []
        # Neither a delta nor a marker is an id: the last id (what a resume names) is the log's.
        assert reader.parser.last_id == "3" and reader.complete.id == "3"
    r = await http.get(f"/api/sessions/{sid}/events", headers={"Last-Event-ID": "3"})
    assert r.status_code == 204


async def test_last_event_id_resumes_without_gaps_or_duplicates(http_stack, sse):
    http, buses = sse
    sid, bus = await new_session(http_stack, buses)
    for i in range(1, 7):
        await bus.publish("text", {"text": f"t{i}"})
    await bus.close()
    url = f"/api/sessions/{sid}/events"
    async with http.stream("GET", url) as r:
        reader = Reader(r)
        first = [await reader.next() for _ in range(2)]
    assert [m.id for m in first] == ["1", "2"]
    async with http.stream("GET", url, headers={"Last-Event-ID": first[-1].id}) as r:
        rest = await Reader(r).rest()
    assert [m.id for m in rest] == ["3", "4", "5", "6"]
    assert [m.json()["text"] for m in first + rest] == [f"t{i}" for i in range(1, 7)]
    async with http.stream("GET", url, params={"after": 4}) as r:
        assert [m.id for m in await Reader(r).rest()] == ["5", "6"]
    async with http.stream("GET", url, params={"after": 1},
                           headers={"Last-Event-ID": "5"}) as r:  # the header wins
        assert [m.id for m in await Reader(r).rest()] == ["6"]
    assert bus.calls == [None, 2, 4, 5]
    r = await http.get(url, headers={"Last-Event-ID": "not-a-number"})
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_last_event_id"


async def test_a_failing_provider_ends_the_stream_with_an_error_event(http_stack, sse):
    http, buses = sse
    sid, bus = await new_session(http_stack, buses)
    await bus.publish("text", {"text": "before"})
    await bus.close(fail="history went away")
    async with http.stream("GET", f"/api/sessions/{sid}/events") as r:
        reader = Reader(r)
        got = await reader.rest()
    assert [(m.id, m.event) for m in got] == [("1", "text"), (None, "error")]
    assert got[1].json()["error"]["message"] == "RuntimeError: history went away"
    assert reader.complete is None  # not complete: a client reconnects


async def test_a_resume_point_past_a_live_streams_end_is_a_400(http_stack, sse):
    """An id the stream never sent: waiting for it would wait in silence (or skip the
    events before it), so it is refused at once; the last id itself is a fine wait."""
    http, buses = sse
    sid, bus = await new_session(http_stack, buses)
    for i in range(3):
        await bus.publish("text", {"text": f"t{i}"})
    url = f"/api/sessions/{sid}/events"
    for headers, params in [({"Last-Event-ID": "4"}, {}), ({"Last-Event-ID": "10000"}, {}),
                            ({}, {"after": 4}), ({"Last-Event-ID": "9"}, {"after": 1})]:
        r = await asyncio.wait_for(http.get(url, headers=headers, params=params),
                                   HANG_GUARD_S)
        assert r.status_code == 400, (headers, params, r.text)
        err = error_of(r)
        assert err["code"] == "invalid_last_event_id" and "last event id, 3" in err["message"]
    assert bus.calls == []  # refused before the stream started
    async with http.stream("GET", url, headers={"Last-Event-ID": "3"}) as r:
        assert r.status_code == 200
        reader = Reader(r)
        await bus.publish("text", {"text": "t3"})
        assert (await reader.next()).id == "4"


async def test_a_finished_stream_completes_and_a_reconnect_after_it_is_204(http_stack, sse):
    """`stream.complete` ends a finished session's stream; an EventSource that
    reconnects anyway (with the id it carries) gets a 204 and stops for good."""
    http, buses = sse
    sid, bus = await new_session(http_stack, buses)
    await bus.publish("text", {"text": "one"})
    await bus.publish("interaction.requested", {"request_id": "r1"})
    await bus.close()
    url = f"/api/sessions/{sid}/events"
    async with http.stream("GET", url) as r:
        reader = Reader(r)
        got = await reader.rest()
    assert [(m.id, m.event) for m in got] == [
        ("1", "text"), ("2", "interaction.requested"), ("2", "ecs")]
    assert (reader.complete.id, reader.complete.json()) == ("2", {"last_id": 2})
    for headers, params in [({"Last-Event-ID": reader.complete.id}, {}), ({}, {"after": 2})]:
        r = await http.get(url, headers=headers, params=params)
        assert (r.status_code, r.content) == (204, b""), r.text
    r = await http.get(url, headers={"Last-Event-ID": "3"})
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_last_event_id"
    async with http.stream("GET", url, headers={"Last-Event-ID": "1"}) as r:  # the rest
        reader = Reader(r)
        assert [(m.id, m.event) for m in await reader.rest()] == [
            ("2", "interaction.requested"), ("2", "ecs")]
    assert reader.complete.id == "2"
    # Nothing was ever sent (a session that ended before its first event): id 0.
    sid, bus = await new_session(http_stack, buses)
    await bus.close()
    async with http.stream("GET", f"/api/sessions/{sid}/events") as r:
        reader = Reader(r)
        assert await reader.rest() == []
    assert reader.complete.id == "0"
    r = await http.get(f"/api/sessions/{sid}/events", headers={"Last-Event-ID": "0"})
    assert r.status_code == 204


async def test_open_streams_end_when_the_server_stops(http_stack, free_port):
    bus = Bus()
    sid = (await http_stack.http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    app = create_app(http_stack.settings, http_stack.client,
                     event_provider=lambda c, s, a: bus.stream(a))
    server = ApiServer(app, "127.0.0.1", free_port())
    await server.start()
    await bus.publish("text", {"text": "hi"})
    async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http, \
            http.stream("GET", f"/api/sessions/{sid}/events") as r:
        reader = Reader(r)
        assert (await reader.next()).event == "text"
        await asyncio.wait_for(server.stop(), HANG_GUARD_S)
        assert await reader.rest() == []
        assert reader.complete is None  # the session goes on: a client reconnects


async def test_seed000_events_keep_working_alongside_the_new_names(http_stack, sse):
    """Seed 000: existing SSE events (`text`, `ecs`, `tool_result`) SHALL continue to work:
    `ecs` goes out with each `interaction.requested` (same payload and id, right after it);
    `text` and `tool_result` under their own names; `emotion` is reserved, never sent."""
    http, buses = sse
    sid, bus = await new_session(http_stack, buses)
    request = {"request_id": "r1", "kind": "confirm", "prompt": "go on?"}
    await bus.publish("text", {"text": "hello"})
    await bus.publish("interaction.requested", request)
    await bus.publish("tool_result", {"execution_id": "x", "result": "ok"})
    await bus.close()
    url = f"/api/sessions/{sid}/events"
    async with http.stream("GET", url) as r:
        got = await Reader(r).rest()
    assert [(m.id, m.event) for m in got] == [
        ("1", "text"), ("2", "interaction.requested"), ("2", "ecs"), ("3", "tool_result")]
    assert got[1].json() == got[2].json() == request
    # Resuming after the request's id continues after both of its frames.
    async with http.stream("GET", url, headers={"Last-Event-ID": "2"}) as r:
        assert [(m.id, m.event) for m in await Reader(r).rest()] == [("3", "tool_result")]
    async with http.stream("GET", url, headers={"Last-Event-ID": "1"}) as r:
        assert [m.event for m in await Reader(r).rest()] == [
            "interaction.requested", "ecs", "tool_result"]


async def test_a_real_session_streams_its_transitions(http_stack: HttpStack):
    """The default provider (the exporter's mapped history once it exists)."""
    http = http_stack.http
    sid = (await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
    url = f"/api/sessions/{sid}/events"
    seen: list[SseMessage] = []
    async with http.stream("GET", url) as r:
        assert r.status_code == 200
        reader = Reader(r)
        while (msg := await reader.next()) is not None:
            seen.append(msg)
            if msg.event == "interaction.requested":
                # Live: an id past what the history maps to so far is refused at once.
                past = await asyncio.wait_for(http.get(url, headers={
                    "Last-Event-ID": str(int(msg.id) + 10_000)}), HANG_GUARD_S)
                assert past.status_code == 400, past.text
                assert error_of(past)["code"] == "invalid_last_event_id"
                rid = msg.json()["request_id"]
                reply = await http.post(f"/api/sessions/{sid}/reply",
                                        json={"request_id": rid, "approve": True})
                assert reply.status_code == 202, reply.text
    ids = [int(m.id) for m in seen if m.event != "ecs"]
    assert ids == sorted(set(ids))  # strictly increasing (the log's line numbers)
    # Seed 000's `ecs` repeats each `interaction.requested`, right after it, same id.
    for i, m in enumerate(seen):
        if m.event == "interaction.requested":
            assert (seen[i + 1].event, seen[i + 1].id, seen[i + 1].data) == ("ecs", m.id, m.data)
    assert "ecs" in {m.event for m in seen} and "emotion" not in {m.event for m in seen}
    changes = [m.json() for m in seen if m.event == "conversation.state.changed"]
    assert (changes[0]["from"], changes[0]["to"]) == ("queued", "running")
    assert ("running", "waiting_user") in [(c["from"], c["to"]) for c in changes]
    assert changes[-1]["to"] == "succeeded"
    assert all(a["to"] == b["from"] for a, b in itertools.pairwise(changes))
    states = [m.json() for m in seen if m.event == "execution_state"]
    # Seed 000's fields; a transition a person's answer made also names who and on what.
    assert all(set(s) == SEED_000_PAYLOAD or set(s) == SEED_000_PAYLOAD | {
        "principal", "digest"} for s in states)
    assert any("principal" in s for s in states)
    assert [(s["from_status"], s["to_status"], s["trigger"]) for s in states] == [
        ("pending", "running", "start"), ("running", "waiting", "suspend"),
        ("waiting", "running", "resume"), ("running", "completed", "succeed")]
    assert {"interaction.requested", "interaction.reply.accepted"} <= {m.event for m in seen}
    # The session ended: the stream said so with the last event's id.
    assert reader.complete is not None and reader.complete.id == seen[-1].id
    # Resume from the middle: exactly the rest, in order, and complete again.
    middle = seen[len(seen) // 2]
    async with http.stream("GET", url, headers={"Last-Event-ID": middle.id}) as r:
        again = Reader(r)
        rest = await again.rest()
    assert [(m.id, m.event, m.data) for m in rest] == \
        [(m.id, m.event, m.data) for m in seen if int(m.id) > int(middle.id)]
    assert again.complete.id == seen[-1].id
    # A reconnect after the last event: 204 (an EventSource stops); past it: 400.
    r = await http.get(url, headers={"Last-Event-ID": reader.complete.id})
    assert r.status_code == 204, r.text
    r = await http.get(url, headers={"Last-Event-ID": str(int(seen[-1].id) + 10_000)})
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_last_event_id"
