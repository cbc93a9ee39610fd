"""Grouped commits (issue 28): pages handed to the :class:`Committer` while a commit
waits share one fsync; the observers hear a line only after that fsync; a failed
fsync reaches the follower that handed the page over; the files at rest are not
written per commit."""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from temporalio.api.enums.v1 import EventType

from observation.exporter import (
    LogWriteError,
    LogWriter,
    SessionExport,
    export_history,
    verify_dir,
)
from observation.exporter import files as files_mod
from observation.exporter.decode import load_history
from observation.exporter.follower import Committer

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())


class Heard:
    """An observer: the lines of each commit, as told."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.commits: list[list[int]] = []

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        if not replayed:
            self.pending.append(event["seq"])

    def commit(self) -> None:
        if self.pending:
            self.commits.append(self.pending)
            self.pending = []


class Disk:
    """``files.fsync``, recording the log files it made durable; the log of the
    directory ``hold`` names blocks until ``release`` is set."""

    def __init__(self, hold: Path | None = None, fail: Path | None = None) -> None:
        self.hold, self.fail = hold, fail
        self.held, self.release = threading.Event(), threading.Event()
        self.synced: list[tuple[Path, int]] = []  # (log, its size when made durable)

    def __call__(self, fd: int) -> None:
        path = Path(f"/proc/self/fd/{fd}").readlink()
        if path.name != "events.ndjson":
            return
        if path.parent == self.fail:
            raise OSError(errno.EIO, "I/O error")
        if path.parent == self.hold:
            self.held.set()
            assert self.release.wait(30), "never released"
        self.synced.append((path.parent, path.stat().st_size))


def writer(runs: Path, sid: str, heard: Heard) -> tuple[LogWriter, SessionExport]:
    w = LogWriter(runs / sid, heard).open()
    w.snapshot_every_s = float("inf")  # the files at rest only when asked
    return w, SessionExport(w, sid)


async def test_pages_handed_over_while_a_commit_waits_share_one_fsync(tmp_path):
    # One commit thread, busy with another session's fsync: what B hands over waits.
    a_heard, b_heard = Heard(), Heard()
    a_w, a = writer(tmp_path / "a", SID, a_heard)
    b_w, b = writer(tmp_path / "b", SID, b_heard)
    disk, committer = Disk(hold=a_w.run_dir), Committer(threads=1)
    try:
        with mock.patch.object(files_mod, "fsync", disk):
            a.feed_page(EVENTS[:10], commit=False)
            a_done = committer.commit(a)
            assert await asyncio.to_thread(disk.held.wait, 30)
            assert a_heard.commits == [] and a_heard.pending  # A's fsync is under way

            b.feed_page(EVENTS[:20], commit=False)
            first = committer.commit(b)
            b.feed_page(EVENTS[20:40], commit=False)
            second = committer.commit(b)
            lines = b_w.last_seq
            assert lines > 0 and b_heard.pending == list(range(1, lines + 1))
            # Nothing is durable yet: no observer has heard a line.
            assert b_heard.commits == [] and not first.done() and not second.done()

            disk.release.set()
            await asyncio.gather(a_done, first, second)
        # B's two pages: one fsync, after which its observer heard all their lines.
        b_syncs = [size for d, size in disk.synced if d == b_w.run_dir]
        assert b_syncs == [(b_w.run_dir / "events.ndjson").stat().st_size]
        assert b_heard.commits == [list(range(1, lines + 1))]
        assert len(a_heard.commits) == 1
        # A commit writes no file at rest (a new log's come with the first write).
        assert not (b_w.run_dir / "head").exists() and b_w.at_rest_stale
        b.write_at_rest()
        assert not b_w.at_rest_stale and (b_w.run_dir / "head").is_file()
    finally:
        disk.release.set()  # a failed assertion must not leave the thread waiting
        committer.close()
        a_w.close()
        b_w.close()
    verify_dir(b_w.run_dir)


async def test_a_failed_fsync_reaches_the_follower_and_stops_the_writer(tmp_path):
    heard = Heard()
    w, export = writer(tmp_path, SID, heard)
    committer = Committer(threads=1)
    try:
        with mock.patch.object(files_mod, "fsync", Disk(fail=w.run_dir)):
            export.feed_page(EVENTS[:20], commit=False)
            with pytest.raises(LogWriteError, match="I/O error"):
                await committer.commit(export)
            # The writer stopped for good: the next page is refused, nothing was heard.
            with pytest.raises(LogWriteError, match="stopped after a write error"):
                export.feed_page(EVENTS[20:40], commit=False)
            assert heard.commits == []
    finally:
        committer.close()
        w.close()
    # Lines written but never made durable are not named by any head: a new writer
    # takes the log as it is (the lines are whole here) and the head follows.
    again = LogWriter(tmp_path / SID).open()
    assert again.last_seq > 0
    again.close()
    verify_dir(tmp_path / SID)


def test_a_page_is_fed_in_the_callers_thread_only_when_that_cannot_block(tmp_path):
    """``feed_page_now`` (the follower's loop, no thread hop): refused while a commit
    holds the session's lock and for a page that completes an activity (its lines may
    come with an artifact file, fsynced before them); what it feeds is what
    ``feed_page`` would: the same log."""
    completes = [i for i, e in enumerate(EVENTS)
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
    assert completes, "the demo history completes activities"
    heard = Heard()
    w, export = writer(tmp_path, SID, heard)
    with export.lock:  # a commit under way
        assert not export.feed_page_now(EVENTS[:1])
    assert w.last_seq == 0
    inline = 0
    for i, event in enumerate(EVENTS):
        if export.feed_page_now([event]):
            inline += 1
            assert i not in completes
        else:
            assert i in completes
            export.feed_page([event], commit=False)
    export.finish()
    w.close()
    assert inline == len(EVENTS) - len(completes)
    one_shot = tmp_path / "one-shot"
    export_history(SID, EVENTS, one_shot)
    assert (tmp_path / SID / "events.ndjson").read_bytes() == \
        (one_shot / SID / "events.ndjson").read_bytes()
    verify_dir(tmp_path / SID)
