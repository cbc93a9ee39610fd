"""The writer: byte-identical re-exports, kill-and-restart anywhere, the lock, torn
lines, a corrupt log refused, an fsync error that stops everything, replay."""

from __future__ import annotations

import errno
import json
import re
import shutil
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observation.exporter import (
    Exporter,
    LogCorruptError,
    LogDivergedError,
    LogLockedError,
    LogSnapshot,
    LogWriteError,
    LogWriter,
    SessionExport,
    export_history,
    follower,
    verify_dir,
)
from observation.exporter import files as files_mod
from observation.exporter.checkpoint import verify_checkpoint
from observation.exporter.decode import load_history
from observation.exporter.note import Signer
from observation.exporter.verify import read_lines, verify_lines

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@contextmanager
def no_fsync():
    """The kill simulations do not depend on fsync; skipping it keeps them fast."""
    with mock.patch.object(files_mod, "fsync", lambda fd: None):
        yield


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, bytes]:
    runs = tmp_path_factory.mktemp("ref")
    export_history(SID, EVENTS, runs)
    return tree(runs / SID)


class Killed(Exception):
    pass


def run_until_killed(runs: Path, lines: int | None, page_every: int) -> None:
    """Export the demo history; 'kill' the exporter once the log has ``lines`` lines
    (no finish, no final commit: whatever the last batch commit left)."""
    w = LogWriter(runs / SID).open()
    real_append = w.append

    def append(event, artifact=None, *line):
        if lines is not None and w.last_seq >= lines:
            raise Killed
        real_append(event, artifact, *line)

    w.append = append  # type: ignore[method-assign]
    try:
        export = SessionExport(w, SID)
        for i, event in enumerate(EVENTS):
            export.feed(event, page_end=i % page_every == page_every - 1)
        export.finish()
    except Killed:
        pass
    finally:
        w.close()


def test_exporting_the_same_history_twice_gives_the_same_bytes(tmp_path, reference):
    export_history(SID, EVENTS, tmp_path / "a")
    assert tree(tmp_path / "a" / SID) == reference
    again = export_history(SID, EVENTS, tmp_path / "a")  # the same directory: nothing new
    assert again.written == 0 and again.finished
    assert tree(tmp_path / "a" / SID) == reference
    verify_dir(tmp_path / "a" / SID)
    assert set(reference) >= {"events.ndjson", "head", "snapshot.json", ".lock"}
    assert not [p for p in reference if p.endswith(".tmp")]


kill = st.tuples(st.integers(0, 95), st.sampled_from(["none", "tear", "garbage", "tmp"]),
                 st.floats(0.05, 0.95))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kills=st.lists(kill, min_size=1, max_size=3), page_every=st.integers(1, 12))
def test_killed_anywhere_and_restarted_gives_the_same_files(tmp_path_factory, reference,
                                                            kills, page_every):
    runs = tmp_path_factory.mktemp("killed")
    d = runs / SID
    with no_fsync():
        for lines, damage, where in sorted(kills):
            run_until_killed(runs, lines, page_every)
            log = d / "events.ndjson"
            data = log.read_bytes() if log.exists() else b""
            if damage == "tear" and data:  # the last write was torn mid-line
                start = data.rfind(b"\n", 0, len(data) - 1) + 1
                log.write_bytes(data[: start + max(1, int((len(data) - start) * where))])
            elif damage == "garbage":  # a partial next line
                log.write_bytes(data + b'{"event_hash":"ab')
            elif damage == "tmp":  # killed between writing snapshot.tmp and the rename
                (d / ".snapshot.json.tmp").write_bytes(b"partial")
        run_until_killed(runs, None, page_every)
    assert tree(d) == reference


def test_the_lock_refuses_a_second_writer(tmp_path):
    first = LogWriter(tmp_path / SID).open()
    try:
        with pytest.raises(LogLockedError, match="being written by another exporter"):
            LogWriter(tmp_path / SID).open()
        with pytest.raises(LogLockedError):
            export_history(SID, EVENTS, tmp_path)
    finally:
        first.close()
    export_history(SID, EVENTS, tmp_path)  # free again
    verify_dir(tmp_path / SID)


def test_a_torn_last_line_is_cut_and_re_exported(tmp_path, reference):
    d = tmp_path / SID
    d.mkdir()
    lines = reference["events.ndjson"].splitlines(keepends=True)
    (d / "events.ndjson").write_bytes(b"".join(lines[:30]) + lines[30][:25])
    w = LogWriter(d).open()
    assert w.last_seq == 30
    assert (d / "events.ndjson").read_bytes() == b"".join(lines[:30])
    w.close()
    export_history(SID, EVENTS, tmp_path)
    assert tree(d) == reference


def test_a_corrupt_log_is_refused_and_left_as_it_is(tmp_path, reference):
    d = tmp_path / SID
    d.mkdir()
    lines = reference["events.ndjson"].splitlines(keepends=True)
    lines[10] = lines[10].replace(b'"seq":11', b'"seq":12')
    (d / "events.ndjson").write_bytes(b"".join(lines))
    before = tree(d)
    with pytest.raises(LogCorruptError, match="line 11"):
        export_history(SID, EVENTS, tmp_path)
    assert {k: v for k, v in tree(d).items() if k != ".lock"} == before


def test_a_log_from_another_history_is_refused(tmp_path):
    export_history(SID, EVENTS[:40], tmp_path)
    other = list(EVENTS)
    changed = type(EVENTS[0])()
    changed.CopyFrom(EVENTS[0])
    changed.event_time.seconds += 1
    other[0] = changed
    with pytest.raises(LogDivergedError, match="not what the history maps to"):
        export_history(SID, other, tmp_path)
    with pytest.raises(LogDivergedError, match="the log has"):
        export_history(SID, EVENTS[:5], tmp_path)


def test_a_batch_is_fsynced_once_and_before_the_head_names_it(tmp_path):
    """Issue 28: the files at rest are not rewritten per batch. Within their period
    each batch makes the log durable once and nothing else; snapshot.json and the head
    come at the end, after the lines they name."""
    synced: list[str] = []  # what each fsync made durable, in order

    def record(fd):
        synced.append(Path(f"/proc/self/fd/{fd}").readlink().name)

    with LogWriter(tmp_path / SID) as w, mock.patch.object(files_mod, "fsync", record):
        w.snapshot_every_s = float("inf")  # every batch within the snapshot's period
        export = SessionExport(w, SID)
        pages = [EVENTS[:len(EVENTS) // 2], EVENTS[len(EVENTS) // 2:]]
        for page in pages:
            export.feed_page(page)
            assert w.snapshot_stale and w.at_rest_stale
            assert not (tmp_path / SID / "head").exists()  # a new log's: at rest
        export.finish()
        assert not w.snapshot_stale
    assert w.last_seq > 2 * len(pages)  # several lines per batch
    files = [n for n in synced if n in ("events.ndjson", ".snapshot.json.tmp", ".head.tmp")]
    assert files == ["events.ndjson"] * len(pages) + [".snapshot.json.tmp", ".head.tmp"]
    verify_dir(tmp_path / SID)


def test_the_snapshot_is_written_when_its_period_passed(tmp_path):
    """A commit writes snapshot.json when it was last written snapshot_every_s ago
    (0: at every commit, as before issue 28)."""
    with LogWriter(tmp_path / SID) as w:
        w.snapshot_every_s = 0.0
        export = SessionExport(w, SID)
        export.feed_page(EVENTS[:30])
        assert not w.snapshot_stale
        assert (tmp_path / SID / "snapshot.json").read_bytes() == w.snapshot.to_bytes()


def test_closing_brings_a_lagging_snapshot_up_to_the_head(tmp_path, reference):
    with LogWriter(tmp_path / SID) as w:
        w.snapshot_every_s = float("inf")
        export = SessionExport(w, SID)
        export.feed_page(EVENTS)
        assert w.snapshot_stale
    assert tree(tmp_path / SID) == reference  # the same bytes at rest


def test_an_fsync_error_stops_the_writer_for_good(tmp_path):
    calls = 0

    def failing(fd):
        nonlocal calls
        calls += 1
        if calls > 20:
            raise OSError(errno.EIO, "I/O error")

    with mock.patch.object(files_mod, "fsync", failing), \
            pytest.raises(LogWriteError, match="I/O error"):
        export_history(SID, EVENTS, tmp_path)
    w = LogWriter(tmp_path / SID).open()  # the disk is fine again: it resumes
    w.close()
    export_history(SID, EVENTS, tmp_path)
    verify_dir(tmp_path / SID)


async def test_an_fsync_error_stops_the_whole_exporter(tmp_path, monkeypatch):
    class Listing:
        id = "s-one"

    class FakeClient:
        async def list_workflows(self, query):
            yield Listing()

    async def failing_export(client, session_id, runs_dir, **options):
        raise LogWriteError("fsync failed: I/O error")

    monkeypatch.setattr(follower, "export_session", failing_export)
    exporter = Exporter(FakeClient(), tmp_path, discover_every_s=0.01)  # type: ignore[arg-type]
    with pytest.raises(LogWriteError, match="fsync failed"):
        await exporter.run()
    assert not exporter.tasks


async def test_discovery_lists_new_sessions_and_rescans_running_ones_now_and_then(tmp_path):
    queries: list[str] = []

    class FakeClient:
        async def list_workflows(self, query):
            queries.append(query)
            if len(queries) == 5:
                exporter._stop.set()
            return
            yield

    exporter = Exporter(FakeClient(), tmp_path, discover_every_s=0.001,  # type: ignore[arg-type]
                        rescan_every=3)
    await exporter.run()
    first, *later = queries
    assert "StartTime" not in first and "Running" not in first  # everything, once
    # Every poll lists the running sessions that do not wait, and what started,
    # closed or began a wait lately; "lately" is since the last poll (5 s before it),
    # and for every third poll (the rescan) since the previous rescan, a minute before
    # it: a change visibility shows late is still caught, and a burst of new sessions
    # is not listed again every second for a minute.
    assert all('ExecutionStatus="Running" AND (SessionStatus != "waiting_user"' in q
               for q in later)
    after = [datetime.strptime(re.search(r'StartTime > "([^"]+)"', q)[1],
                               "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) for q in later]
    assert all(f'CloseTime > "{a:%Y-%m-%dT%H:%M:%SZ}"' in q and f'WaitingSince > '
               f'"{a:%Y-%m-%dT%H:%M:%SZ}"' in q for a, q in zip(after, later, strict=True))
    now = datetime.now(UTC)
    regular = [a for i, a in enumerate(after) if i != 2]
    assert all(timedelta(seconds=4) <= now - a <= timedelta(seconds=10) for a in regular)
    assert timedelta(seconds=59) <= now - after[2] <= timedelta(seconds=65)


async def test_the_sweep_describes_each_parked_session_once_paced(tmp_path):
    """A sweep is a steady trickle of describes (one per parked session, ``pace_s``
    apart), not a burst; a session whose history grew is woken."""
    from types import SimpleNamespace

    from observation.exporter.service import Parked
    described: list[str] = []

    class FakeClient:
        def get_workflow_handle(self, session_id):
            async def describe():
                described.append(session_id)
                return SimpleNamespace(run_id="r", history_length=12 if session_id == "s1" else 10)
            return SimpleNamespace(describe=describe)

    exporter = Exporter(FakeClient(), tmp_path)  # type: ignore[arg-type]
    for sid in ("s0", "s1", "s2"):
        exporter.parked[sid] = Parked(run_id="r", waiting_since=None, history_length=10)
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    with mock.patch("observation.exporter.service.asyncio.sleep", no_wait), \
            mock.patch.object(Exporter, "follow", lambda self, sid: None):
        await exporter.sweep(pace_s=100.0)
    assert described == ["s0", "s1", "s2"]
    assert len(waits) == 3 and all(90 < w <= 100 for w in waits)
    assert "s1" not in exporter.parked and {"s0", "s2"} <= set(exporter.parked)


def test_replay_rebuilds_snapshot_json_byte_for_byte(reference, tmp_path):
    d = tmp_path / SID
    d.mkdir()
    for name, data in reference.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    rebuilt = LogSnapshot.replay(SID, verify_lines(read_lines(d / "events.ndjson"))).to_bytes()
    assert rebuilt == reference["snapshot.json"]
    snap = json.loads(rebuilt)
    assert snap["run_state"] == "succeeded" and snap["finished_at"]
    assert [w["status"] for w in snap["work_items"]] == ["completed"] * 5
    assert [i["status"] for i in snap["issues"]] == ["RESOLVED"] * 2
    assert snap["head"]["last_seq"] == reference["events.ndjson"].count(b"\n")


def test_a_stale_snapshot_and_head_are_rewritten_on_open(tmp_path, reference):
    export_history(SID, EVENTS[:50], tmp_path)
    d = tmp_path / SID
    partial = tree(d)
    shutil.rmtree(d)
    d.mkdir()
    (d / "events.ndjson").write_bytes(reference["events.ndjson"])  # lines beyond the head
    (d / "head").write_bytes(partial["head"])
    (d / "snapshot.json").write_bytes(partial["snapshot.json"])
    LogWriter(d).open().close()
    assert (d / "head").read_bytes() == reference["head"]
    assert (d / "snapshot.json").read_bytes() == reference["snapshot.json"]


@pytest.mark.parametrize("damage", ["empty", "torn"])
def test_torn_or_empty_files_at_rest_of_a_running_log_are_rebuilt_on_open(tmp_path, damage):
    """Damaged files at rest (a full disk, a hand's edit): open rewrites head and
    snapshot.json from the log, and the next commit after history signs the log
    again; the directory verifies at rest with the key."""
    signer = Signer.generate("test.example/hitlflow")
    half = len(EVENTS) // 2
    with LogWriter(tmp_path / SID, signer=signer) as w:
        SessionExport(w, SID).feed_page(EVENTS[:half])
    d = tmp_path / SID
    good = tree(d)
    for name in ("head", "snapshot.json", "checkpoint"):
        data = (d / name).read_bytes()
        (d / name).write_bytes(b"" if damage == "empty" else data[:len(data) // 2])
    with LogWriter(d, signer=signer) as w:
        assert {n: (d / n).read_bytes() for n in ("head", "snapshot.json")} == \
            {n: good[n] for n in ("head", "snapshot.json")}
        export = SessionExport(w, SID)
        export.feed_page(EVENTS[:half])  # the history again: re-mapped, checked
        export.finish()  # as a follower does at a wait or its end: signed again
    assert (d / "checkpoint").read_bytes() == good["checkpoint"]
    verify_checkpoint(d, verify_dir(d), signer.verifier())


def test_a_lost_tail_is_re_exported_and_checked_against_the_old_head(tmp_path, reference):
    d = tmp_path / SID
    d.mkdir()
    for name in ("head", "snapshot.json"):
        (d / name).write_bytes(reference[name])
    lines = reference["events.ndjson"].splitlines(keepends=True)
    (d / "events.ndjson").write_bytes(b"".join(lines[:60]))
    w = LogWriter(d).open()
    assert w.lost_head is not None and w.lost_head[0] == len(lines)
    w.close()
    with no_fsync():
        export_history(SID, EVENTS, tmp_path)
    assert tree(d) == {**reference}
    # a head that no re-export can reach: refused when the line is rewritten
    (d / "events.ndjson").write_bytes(b"".join(lines[:60]))
    head = json.loads(reference["head"])
    (d / "head").write_text(json.dumps({**head, "last_hash": "f" * 64}))
    with no_fsync(), pytest.raises(LogCorruptError, match="does not hash to the head"):
        export_history(SID, EVENTS, tmp_path)


def test_the_snapshot_is_folded_from_the_bytes_on_disk(tmp_path):
    """JCS writes 1.0 as 1: the writer's snapshot must fold what replay will read."""
    from observation.exporter import Chain, MappedEvent, ids

    def ev(i: int, type: str, payload: dict) -> MappedEvent:
        return MappedEvent(event_id=f"r:{i}:0", run_id="s-f", ts="2026-01-01T00:00:00.000000Z",
                           type=type, payload=payload, trace_id=ids.trace_id("s-f"),
                           span_id=ids.session_span("s-f"))

    chain = Chain()
    events = [
        ev(1, "RUN_CREATED", {"session_id": "s-f", "created_at": "2026-01-01T00:00:00Z",
                              "run_state": "queued"}),
        ev(2, "ISSUE_OPENED", {"issue_id": "q", "kind": "form", "prompt": "n?",
                               "opened_at": "2026-01-01T00:00:00Z"}),
        ev(3, "ISSUE_RESOLVED", {"issue_id": "q", "resolution": "answered", "by": "u",
                                 "answer": {"values": {"n": 1.0, "x": 0.5}},
                                 "resolved_at": "2026-01-01T00:00:01Z"}),
    ]
    with LogWriter(tmp_path / "s-f") as w:
        for m in events:
            w.append(chain.link(m))
        w.commit()
    d = tmp_path / "s-f"
    rebuilt = LogSnapshot.replay("s-f", verify_lines(read_lines(d / "events.ndjson"))).to_bytes()
    assert rebuilt == (d / "snapshot.json").read_bytes()
    assert json.loads(rebuilt)["issues"][0]["answer"] == {"values": {"n": 1, "x": 0.5}}


def test_the_demo_log_has_a_known_head(reference):
    """A change to the mapping changes every existing log's bytes (an exporter then
    refuses to continue those logs): make such a change on purpose, and update this.
    Re-recording tests/workflows/histories/ changes it too (new run and event ids).
    Log format v2 changed it on purpose (event_hash is seed 003's formula now; the
    v1 head of this history was 702ecb05...4292d)."""
    head = json.loads(reference["head"])
    assert head == {"last_seq": 89, "last_hash":
                    "ba9b3c97d4c2f98585cfb03d0b72eed433d18a024e4f97a1fc5dcbf5e1fbb62b"}
