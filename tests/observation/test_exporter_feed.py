"""The exporter's log as a live feed (SSE in `up`): a stream gets exactly the log's
SSE lines after its resume point, in order, whether they were on disk when it
subscribed, committed while it read the disk, or committed later; a subscriber
that falls behind goes back to the disk and still misses nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from activities.deltas import LLM_CALL_SCHEDULED
from observation.event_types import END_TYPES
from observation.exporter import (
    LogFeed,
    LogWriter,
    SessionExport,
    StreamHead,
    export_history,
    is_sse,
)
from observation.exporter import feed as feed_mod
from observation.exporter.decode import load_history

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())


def log_lines(runs: Path) -> list[dict]:
    return [json.loads(raw) for raw in (runs / SID / "events.ndjson").read_bytes().splitlines()]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> list[dict]:
    runs = tmp_path_factory.mktemp("runs")
    export_history(SID, EVENTS, runs)
    return log_lines(runs)


def test_read_after_finds_every_resume_point(tmp_path, exported):
    export_history(SID, EVENTS, tmp_path)
    path = tmp_path / SID / "events.ndjson"
    assert path.stat().st_size > 3 * 4096  # the bisecting path is taken
    for after in [*range(0, len(exported) + 2), 10**9]:
        assert [e["seq"] for e in feed_mod.read_after(path, after)] == [
            e["seq"] for e in exported if e["seq"] > after]
    assert feed_mod.read_after(tmp_path / "missing" / "events.ndjson", 0) == []


def test_read_after_leaves_a_line_still_being_written(tmp_path, exported):
    export_history(SID, EVENTS, tmp_path)
    path = tmp_path / SID / "events.ndjson"
    with path.open("ab") as f:
        f.write(b'{"seq": 99999, "type": "te')  # torn: the writer is mid-line
    assert feed_mod.read_after(path, 0)[-1]["seq"] == exported[-1]["seq"]


def test_log_head_says_how_far_the_stream_goes(tmp_path, exported, monkeypatch):
    """What a Last-Event-ID is checked against in `up`: the log's last line, its last
    SSE line and whether it ended, at every prefix of a log, a torn last line ignored."""
    monkeypatch.setattr(feed_mod, "HEAD_TAIL_BYTES", 64)  # the tail grows to reach one
    path = tmp_path / "events.ndjson"
    assert feed_mod.log_head(path) == StreamHead(0, 0, False)
    exported_dir = tmp_path / "full"
    export_history(SID, EVENTS, exported_dir)
    lines = (exported_dir / SID / "events.ndjson").read_bytes().splitlines(keepends=True)
    for n in [1, 2, 3, len(lines) // 2, len(lines) - 1, len(lines)]:
        path.write_bytes(b"".join(lines[:n]) + b'{"seq": 99999, "type": "te')
        prefix = exported[:n]
        sse = [e["seq"] for e in prefix if is_sse(e["type"])]
        assert feed_mod.log_head(path) == StreamHead(
            prefix[-1]["seq"], sse[-1] if sse else 0,
            any(e["type"] in END_TYPES for e in prefix)), n
    assert feed_mod.log_head(path).finished


async def collect(feed: LogFeed, after: int | None = None, markers: bool = False
                  ) -> list[dict]:
    """The lines a stream gets (with ``markers``, the ``llm_call.scheduled`` markers
    too, where they came)."""
    return [e async for e in feed.events(SID, after)
            if markers or e["type"] != LLM_CALL_SCHEDULED]


async def test_a_finished_log_streams_from_disk_and_ends(tmp_path, exported):
    export_history(SID, EVENTS, tmp_path)
    feed = LogFeed(tmp_path)
    want = [e for e in exported if is_sse(e["type"])]
    assert exported[-1]["type"] in END_TYPES
    assert await asyncio.wait_for(collect(feed), 30) == want
    middle = want[len(want) // 2]["seq"]
    assert await asyncio.wait_for(collect(feed, middle), 30) == [
        e for e in want if e["seq"] > middle]
    assert feed.watchers(SID) == 0  # an ended stream leaves nothing behind


async def test_lines_committed_while_streaming_arrive_once_in_order(tmp_path, exported):
    """The exporter writes and commits in a worker thread, page by page, while
    streams subscribe at different points: each gets every SSE line exactly once."""
    feed = LogFeed(tmp_path)
    asked: list[str] = []
    feed.want = asked.append
    pages = [EVENTS[i:i + 7] for i in range(0, len(EVENTS), 7)]
    go = [asyncio.Event() for _ in pages]
    loop = asyncio.get_running_loop()

    def export() -> None:
        with LogWriter(tmp_path / SID, feed.observer(SID)) as w:
            export = SessionExport(w, SID)
            for page, ready in zip(pages, go, strict=True):
                asyncio.run_coroutine_threadsafe(ready.wait(), loop).result()
                export.feed_page(page)
            export.finish()

    streams = [asyncio.create_task(collect(feed, markers=True))]
    writer = asyncio.create_task(asyncio.to_thread(export))
    for n, ready in enumerate(go):
        if n == len(go) // 2:  # one more stream joins mid-way, one resumes mid-way
            streams.append(asyncio.create_task(collect(feed)))
            streams.append(asyncio.create_task(collect(feed, 5)))
        ready.set()
        await asyncio.sleep(0)
    await asyncio.wait_for(writer, 60)
    got = await asyncio.wait_for(asyncio.gather(*streams), 60)
    want = [e for e in exported if is_sse(e["type"])]
    # Each LLM call's marker comes after the lines from before it, before its text.
    calls = [e["payload"]["call_id"] for e in exported if e["type"] == "LLM_CALL_STARTED"]
    marks = [e for e in got[0] if e["type"] == LLM_CALL_SCHEDULED]
    assert [m["payload"]["call_id"] for m in marks] == calls and calls
    for mark in marks:
        at, call = got[0].index(mark), mark["payload"]["call_id"]
        said = next(e for e in exported if e["type"] == "text"
                    and e["payload"]["call_id"] == call)
        assert got[0][at - 1]["seq"] < said["seq"] and said in got[0][at:]
    got[0] = [e for e in got[0] if e not in marks]
    assert got[0] == want and got[1] == want
    assert got[2] == [e for e in want if e["seq"] > 5]
    assert asked == [SID, SID, SID]  # each stream asked the exporter to follow


async def test_a_subscriber_that_falls_behind_reads_the_rest_from_disk(
        tmp_path, exported, monkeypatch):
    monkeypatch.setattr(feed_mod, "QUEUE_BATCHES", 1)
    feed = LogFeed(tmp_path)
    stream = feed.events(SID, None, only=None)
    first = asyncio.create_task(anext(stream))  # subscribed: the log is empty so far
    while feed.watchers(SID) == 0:
        await asyncio.sleep(0)
    with LogWriter(tmp_path / SID, feed.observer(SID)) as w:
        export = SessionExport(w, SID)
        for i in range(0, len(EVENTS), 5):  # many batches, nobody consuming
            export.feed_page(EVENTS[i:i + 5])
            await asyncio.sleep(0)  # let the loop deliver (and overflow the queue)
        export.finish()
    got = [await asyncio.wait_for(first, 30)]

    async def rest() -> None:
        got.extend([e async for e in stream])

    await asyncio.wait_for(rest(), 30)
    assert got == exported
