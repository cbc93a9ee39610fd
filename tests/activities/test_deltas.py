"""The DeltaBus: the model's text as it is written, in one process and over PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from activities.deltas import (
    QUEUE_DELTAS,
    InProcessDeltaBus,
    TextDelta,
    cluster_delta_bus,
    split_text,
)
from activities.deltas.postgres import CHANNEL, PIECE_CHARS, PostgresDeltaBus
from tests.support.postgres import postgres_url

GUARD_S = 30


async def take(it: AsyncIterator[TextDelta]) -> TextDelta:
    return await asyncio.wait_for(anext(it), GUARD_S)


def shown(items: list[TextDelta]) -> str:
    """What a client shows: a snapshot (``text`` set) replaces, a delta appends."""
    out = ""
    for item in items:
        out = item.text if item.text is not None else out + item.delta
    return out


async def test_a_late_subscriber_gets_the_text_so_far_then_deltas() -> None:
    bus = InProcessDeltaBus()
    bus.publish("s", "c1", "Hello", first=True)
    bus.publish("s", "c1", ", wor")
    bus.publish("other", "c9", "not mine", first=True)
    it = bus.subscribe("s")
    assert await take(it) == TextDelta("c1", "", "Hello, wor")
    bus.publish("s", "c1", "ld")
    assert await take(it) == TextDelta("c1", "ld")
    await it.aclose()


async def test_a_new_attempt_starts_over_and_a_finished_call_is_forgotten() -> None:
    bus = InProcessDeltaBus()
    bus.publish("s", "c1", "first try", first=True)
    it = bus.subscribe("s")
    assert (await take(it)).payload() == {"call_id": "c1", "delta": "", "text": "first try"}
    bus.publish("s", "c1", "again", first=True)  # the attempt's first piece: a reset
    assert (await take(it)).payload() == {"call_id": "c1", "delta": "again", "text": "again"}
    assert bus.writing("s") == {"c1": "again"}
    bus.finish("s", "c1")
    assert bus.writing("s") == {}
    await it.aclose()
    late = bus.subscribe("s")
    bus.publish("s", "c2", "next", first=True)
    assert await take(late) == TextDelta("c2", "", "next")  # a snapshot; nothing of c1
    await late.aclose()


async def test_a_subscriber_that_falls_behind_gets_one_snapshot() -> None:
    bus = InProcessDeltaBus()
    bus.publish("s", "c1", "a", first=True)
    it = bus.subscribe("s")
    got = [await take(it)]
    for _ in range(QUEUE_DELTAS + 5):  # nobody reads meanwhile: the queue overflows
        bus.publish("s", "c1", "a")
    for _ in range(QUEUE_DELTAS):  # what fitted; the 5 others were dropped...
        got.append(await take(it))
    assert shown(got) == "a" * (QUEUE_DELTAS + 1)
    bus.publish("s", "c1", "b")  # ...so the next one comes whole
    got.append(await take(it))
    assert got[-1] == TextDelta("c1", "", "a" * (QUEUE_DELTAS + 6) + "b")
    assert shown(got) == "a" * (QUEUE_DELTAS + 6) + "b"
    await it.aclose()


def test_split_text_joins_back() -> None:
    text = "The notes are saved and the draft is gone."
    pieces = split_text(text)
    assert 1 < len(pieces) <= 4 and "".join(pieces) == text
    assert split_text("") == [] and split_text("word") == ["word"]


def test_the_cluster_bus_is_postgresql_only_where_the_read_model_is() -> None:
    assert cluster_delta_bus(None) is None
    assert cluster_delta_bus("sqlite:///x.db") is None
    bus = cluster_delta_bus("postgresql://u:secret@db.invalid/hitlflow")
    assert isinstance(bus, PostgresDeltaBus)  # connects on first use, not here
    bus.close()


@pytest.fixture
async def pg_buses() -> AsyncIterator[tuple[PostgresDeltaBus, PostgresDeltaBus, str]]:
    url = postgres_url()
    worker, api = PostgresDeltaBus(url), PostgresDeltaBus(url)
    api.listen()
    assert await asyncio.to_thread(api.listening.wait, GUARD_S), "not listening"
    try:
        yield worker, api, url
    finally:
        await asyncio.to_thread(worker.close)
        await asyncio.to_thread(api.close)


async def until_shown(it: AsyncIterator[TextDelta], text: str) -> list[TextDelta]:
    got: list[TextDelta] = []
    while shown(got) != text:
        got.append(await take(it))
        assert text.startswith(shown(got)), (shown(got), text)
    return got


async def test_postgres_carries_deltas_between_processes_whole_and_in_order(pg_buses) -> None:
    worker, api, url = pg_buses
    it = api.subscribe("s")
    long = "é→" * PIECE_CHARS  # past one notification's payload: sent in pieces
    worker.publish("s", "c1", "Hello ", first=True)
    worker.publish("s", "c1", long)
    worker.publish("other", "c2", "not for s", first=True)
    worker.publish("s", "c1", "end.")
    got = await until_shown(it, "Hello " + long + "end.")
    assert {g.call_id for g in got} == {"c1"}
    # A notification that is not a delta is ignored; the channel goes on.
    with psycopg.connect(url, autocommit=True) as conn:
        for junk in ("not json", "5", "{}"):
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, junk))
    worker.finish("s", "c1")
    worker.publish("s", "c3", "after", first=True)
    assert await take(it) == TextDelta("c3", "after", "after")
    assert api.local.writing("s") == {"c3": "after"}  # c1's end was heard
    await it.aclose()
