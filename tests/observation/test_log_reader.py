"""The incremental log reader: appends are folded once, a torn last line waits for
its newline, a rewritten log is folded again from its first line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observation.exporter import Chain, line_bytes, map_history
from observation.exporter.decode import load_history
from observation.log_reader import LogUnreadableError, LogViews, SessionLogReader
from observation.log_view import fold
from tests.observation.test_log_view import HISTORIES, log_lines


def log_bytes(name: str) -> tuple[str, bytes, list[int]]:
    """The session id, its log's bytes, and the offset where each line ends."""
    sid, events = load_history((HISTORIES / f"{name}.json").read_text())
    lines = [line_bytes(e) for e in Chain().link_all(map_history(sid, events))]
    ends, pos = [], 0
    for line in lines:
        pos += len(line)
        ends.append(pos)
    return sid, b"".join(lines), ends


def contract_ids(view) -> list[str]:
    return [c.execution_id for c in view.contracts]


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_appends_in_any_pieces_fold_like_the_whole(tmp_path: Path, cuts: list[int]):
    sid, data, ends = log_bytes("demo")
    path = tmp_path / f"{len(cuts)}-{sum(cuts)}" / "events.ndjson"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"")
    reader = SessionLogReader(path, sid)
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        path.write_bytes(data[:cut])  # the exporter appends: same bytes, longer
        view = reader.refresh()
        whole = sum(1 for end in ends if end <= cut)  # a torn line is not a line
        assert view is not None and view.last_seq == whole
        assert reader.offset == (ends[whole - 1] if whole else 0)
    assert reader.refolds == 0
    _, lines = log_lines("demo")
    assert view.facts == fold(sid, lines).facts and view.history == fold(sid, lines).history


def test_a_rewritten_or_shrunk_log_is_folded_again(tmp_path: Path):
    sid, data, ends = log_bytes("demo")
    path = tmp_path / "events.ndjson"
    path.write_bytes(data[:ends[40]])
    reader = SessionLogReader(path, sid)
    assert reader.refresh().last_seq == 41
    # Shrunk (an exporter cut the tail and will write it again).
    path.write_bytes(data[:ends[10]])
    assert reader.refresh().last_seq == 11 and reader.refolds == 1
    # Rewritten with other bytes of the same length: another session's log.
    other_sid, other, other_ends = log_bytes("rejected")
    path.write_bytes(other)
    reader.session_id = other_sid  # (the reader is per session; only the bytes matter)
    view = reader.refresh()
    assert view.last_seq == len(other_ends) and reader.refolds == 2
    assert contract_ids(view) == contract_ids(fold(other_sid, log_lines("rejected")[1]))


def test_a_line_that_does_not_chain_on_starts_the_fold_again(tmp_path: Path):
    sid, data, ends = log_bytes("demo")
    path = tmp_path / "events.ndjson"
    path.write_bytes(data[:ends[5]])
    reader = SessionLogReader(path, sid)
    reader.refresh()
    # Lines 7.. appended without line 6: they do not chain on, and from the top
    # the log does not chain either.
    path.write_bytes(data[:ends[5]] + data[ends[6]:ends[9]])
    with pytest.raises(LogUnreadableError):
        reader.refresh()
    path.write_bytes(data)
    assert reader.refresh().last_seq == len(ends)


def test_a_whole_line_that_is_not_json_is_unreadable(tmp_path: Path):
    sid, data, ends = log_bytes("canceled")
    path = tmp_path / "events.ndjson"
    path.write_bytes(data[:ends[3]] + b"{not json\n")
    with pytest.raises(LogUnreadableError):
        SessionLogReader(path, sid).refresh()


def test_views_are_per_session_bounded_and_none_without_a_log(tmp_path: Path):
    views = LogViews(tmp_path, capacity=2)
    sessions = {}
    for name in ("demo", "rejected", "canceled"):
        sid, data, _ = log_bytes(name)
        (tmp_path / sid).mkdir()
        (tmp_path / sid / "events.ndjson").write_bytes(data)
        sessions[name] = sid
    assert views.read("s-nothing-here", lambda v: v) is None
    for name, sid in sessions.items():
        assert views.read(sid, contract_ids) == contract_ids(fold(sid, log_lines(name)[1]))
    assert len(views._readers) == 2 and sessions["demo"] not in views._readers
