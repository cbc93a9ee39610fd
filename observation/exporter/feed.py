"""The exporter's log as a live feed: SSE streams share the exporter's follower.

In ``hitlflow up`` the exporter already follows each session's history into its
log; an SSE stream that followed history again would hold a second long-poll per
watcher (and one per parked session the exporter no longer follows). Instead each
stream reads the session's log from disk after its ``Last-Event-ID`` and then takes
the lines the exporter appends, as each batch is committed (after its fsync): the
same events, ids and order as the log, because they are the log.

Lines reach a subscriber after their batch's commit, i.e. after the read model
took them (the exporter tells its observers in order): a read with ``min_seq`` set
to a streamed id is fresh at once.

A subscriber that falls behind (its queue is full) is not held in memory: it goes
back to the disk from the last line it yielded. A session the exporter does not
follow yet is asked for (``want``), so a new session's stream starts at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from activities.deltas import LLM_CALL_SCHEDULED, call_scheduled
from observation.event_types import END_TYPES, is_sse
from observation.exporter.chain import read_json
from observation.exporter.model import StreamHead
from observation.exporter.verify import LOG_NAME

#: Batches a subscriber may have queued before it goes back to the disk.
QUEUE_BATCHES = 64


class _Lagged(Exception):
    """The subscriber's queue overflowed: read the rest from the disk."""


class _Subscriber:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue(QUEUE_BATCHES)
        self.lagged = False

    def put(self, batch: list[dict[str, Any]]) -> None:
        if self.lagged:
            return
        try:
            self.queue.put_nowait(batch)
        except asyncio.QueueFull:
            self.lagged = True


class _FeedObserver:
    """A :class:`~observation.exporter.log.LogObserver`: the appended lines of a
    batch go to the session's subscribers at the batch's commit."""

    def __init__(self, feed: LogFeed, session_id: str) -> None:
        self.feed, self.session_id = feed, session_id
        self.batch: list[dict[str, Any]] = []

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        if not replayed:
            self.batch.append(event)

    def commit(self) -> None:
        if self.batch:
            batch, self.batch = self.batch, []
            self.feed.publish(self.session_id, batch)

    def call_scheduled(self, call_id: str) -> None:
        """After the lines of this batch: at its commit; with none pending, now."""
        self.batch.append(call_scheduled(call_id))
        if len(self.batch) == 1:
            self.commit()


class LogFeed:
    """Sessions' committed log lines, pushed to whoever streams them (one process:
    the exporter and the API of ``hitlflow up``; both run on one event loop)."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        self._subscribers: dict[str, set[_Subscriber]] = {}
        self._calls: dict[str, dict[str, Any]] = {}  # session -> its latest call's marker
        self._loop: asyncio.AbstractEventLoop | None = None  # the subscribers'
        #: ``want(session_id)``: ask the exporter to follow the session now (set by
        #: the entry point, e.g. the exporter's wake-ups).
        self.want: Callable[[str], None] = LogFeed.nobody

    @staticmethod
    def nobody(session_id: str) -> None:
        """``want`` while no exporter runs with this feed."""

    def observer(self, session_id: str) -> _FeedObserver:
        return _FeedObserver(self, session_id)

    def publish(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        """From any thread (the exporter commits in worker threads): the batch is
        handed to the subscribers on their event loop, batches in commit order."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._deliver, session_id, batch)

    def _deliver(self, session_id: str, batch: list[dict[str, Any]]) -> None:
        for line in batch:  # the latest call, for streams that start from the disk
            if line["type"] == LLM_CALL_SCHEDULED:
                self._calls[session_id] = line
            elif line["type"] in END_TYPES:
                self._calls.pop(session_id, None)
        for sub in self._subscribers.get(session_id, ()):
            sub.put(batch)

    async def head(self, session_id: str) -> StreamHead:
        """How far :meth:`events` goes now: the log on disk (its ids are the log's
        seqs, and a stream yields only lines already committed there)."""
        return await asyncio.to_thread(log_head, self.runs_dir / session_id / LOG_NAME)

    def watchers(self, session_id: str) -> int:
        return len(self._subscribers.get(session_id, ()))

    async def events(self, session_id: str, after_seq: int | None = None, *,
                     only: Callable[[str], bool] | None = is_sse, calls: bool = True
                     ) -> AsyncIterator[dict[str, Any]]:
        """The session's log lines with ``seq > after_seq`` (the SSE types only, by
        default), in order, live; ends after the line that ends the session. With
        ``calls``, a ``call_scheduled`` marker where each LLM call was scheduled (the
        SSE stream's ``DeltaGate``; a stream from the disk gets the latest one)."""
        self._loop = asyncio.get_running_loop()
        sub = _Subscriber()
        self._subscribers.setdefault(session_id, set()).add(sub)
        last = after_seq or 0
        try:
            self.want(session_id)
            while True:
                # The disk first (subscribed before reading, so nothing falls between).
                lines = await asyncio.to_thread(read_after, self.runs_dir / session_id / LOG_NAME,
                                                last)
                for line in lines:
                    last = line["seq"]
                    if only is None or only(line["type"]):
                        yield line
                    if line["type"] in END_TYPES:
                        return
                if calls and session_id in self._calls:  # its lines are on the disk
                    yield self._calls[session_id]
                # Then what the exporter commits, until the subscriber falls behind.
                try:
                    async for line in self._live(sub, last):
                        if line["type"] == LLM_CALL_SCHEDULED:
                            if calls:
                                yield line
                            continue
                        last = line["seq"]
                        if only is None or only(line["type"]):
                            yield line
                        if line["type"] in END_TYPES:
                            return
                except _Lagged:
                    sub.lagged = False
                    sub.queue = asyncio.Queue(QUEUE_BATCHES)
        finally:
            subs = self._subscribers.get(session_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subscribers[session_id]

    @staticmethod
    async def _live(sub: _Subscriber, last: int) -> AsyncIterator[dict[str, Any]]:
        while True:
            if sub.lagged and sub.queue.empty():
                raise _Lagged
            batch = await sub.queue.get()
            for line in batch:
                if line["type"] == LLM_CALL_SCHEDULED:
                    yield line
                elif line["seq"] > last:  # already read from the disk
                    last = line["seq"]
                    yield line


def read_after(path: Path, after_seq: int) -> list[dict[str, Any]]:
    """The complete lines of a log with ``seq > after_seq`` (none for a missing log).
    Lines are in ``seq`` order, so the start is found by bisecting byte offsets."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return []
    with f:
        data = f.read() if after_seq <= 0 else _tail_after(f, after_seq)
    out = []
    for raw in data.split(b"\n")[:-1]:  # a last piece without "\n" is still being written
        line = read_json(raw)  # as the writer hands its lines on: numbers as doubles
        if line["seq"] > after_seq:
            out.append(line)
    return out


#: The tail :func:`log_head` reads first (grown until it holds an SSE line).
HEAD_TAIL_BYTES = 16384


def log_head(path: Path, only: Callable[[str], bool] = is_sse) -> StreamHead:
    """The :class:`StreamHead` of a log's feed (a missing log: nothing yet), from its
    tail: the last complete line, the last ``only`` line, and an end line."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return StreamHead(0, 0, False)
    with f:
        end, size = f.seek(0, 2), HEAD_TAIL_BYTES
        while True:
            start = max(0, end - size)
            f.seek(start)
            pieces = f.read(end - start).split(b"\n")[:-1]  # without a line being written
            lines = [json.loads(raw) for raw in (pieces[1:] if start else pieces)]
            events = [line["seq"] for line in lines if only(line["type"])]
            if events or start == 0:
                return StreamHead(lines[-1]["seq"] if lines else 0,
                                  events[-1] if events else 0,
                                  any(line["type"] in END_TYPES for line in lines))
            size *= 4


def _seq_at(f: Any, offset: int) -> tuple[int, int] | None:
    """(start, seq) of the first complete line starting at or after ``offset``."""
    f.seek(offset)
    if offset:
        f.readline()  # the rest of the line the offset falls in
    start = f.tell()
    raw = f.readline()
    if not raw.endswith(b"\n"):
        return None
    return start, json.loads(raw)["seq"]


def _tail_after(f: Any, after_seq: int) -> bytes:
    lo, hi = 0, f.seek(0, 2)
    # Invariant: every line starting before `lo` has seq <= after_seq.
    while hi - lo > 4096:
        mid = (lo + hi) // 2
        found = _seq_at(f, mid)
        if found is None or found[1] > after_seq:
            hi = mid
        else:
            lo = found[0]
    f.seek(lo)
    return f.read()
