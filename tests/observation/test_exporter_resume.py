"""A parked session's export resumed from memory (issue 28): no re-read of the log,
no re-mapping of the history it saw, the observer told each line once; the same
bytes as an export that never parked. A log changed while parked is refused (the
exporter then opens and checks it anew)."""

from __future__ import annotations

from pathlib import Path

import pytest

from observation.exporter import LogError, LogLockedError, LogWriter, SessionExport, export_history
from observation.exporter.decode import load_history

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[int, bool]] = []

    def event(self, event, replayed):
        self.seen.append((event["seq"], replayed))

    def commit(self) -> None:
        pass


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, bytes]:
    runs = tmp_path_factory.mktemp("ref")
    export_history(SID, EVENTS, runs)
    return tree(runs / SID)


def parked(d: Path, upto: int, observer=None) -> SessionExport:
    """An export that fed the first ``upto`` history events, then parked (closed)."""
    w = LogWriter(d, observer).open()
    export = SessionExport(w, SID)
    export.feed_page(EVENTS[:upto])
    export.finish()
    w.close()
    return export


@pytest.mark.parametrize("upto", [1, 20, 47])
def test_a_resumed_export_carries_on_to_the_same_bytes(tmp_path, reference, upto):
    seen = Recorder()
    export = parked(tmp_path / SID, upto, seen)
    before = export.w.last_seq
    export.w.resume()
    export.resumed()
    mapped = []
    real = export.mapper.feed
    export.mapper.feed = lambda e: mapped.append(e) or real(e)  # what is mapped again
    for page in (EVENTS[:30], EVENTS[30:]):  # the history again, from its start
        export.feed_page(page)
    result = export.finish()
    export.w.close()
    assert mapped == EVENTS[upto:]  # only the events it had not seen
    assert result.written == result.last_seq - before
    assert tree(tmp_path / SID) == reference
    # The observer heard every line once, as appended (none replayed from disk).
    assert seen.seen == [(n, False) for n in range(1, result.last_seq + 1)]


@pytest.mark.parametrize("change", ["append", "truncate", "head", "snapshot"])
def test_a_log_changed_while_parked_is_not_resumed(tmp_path, change):
    d = tmp_path / SID
    export = parked(d, 20)
    log = d / "events.ndjson"
    if change == "append":
        with log.open("ab") as f:
            f.write(b"{}\n")
    elif change == "truncate":
        log.write_bytes(log.read_bytes()[:-10])
    elif change == "head":
        (d / "head").write_text("{}")
    else:
        (d / "snapshot.json").unlink()
    with pytest.raises(LogError, match="changed since this writer closed it"):
        export.w.resume()
    other = LogWriter(d)
    try:
        other._lock()
    finally:
        other.close()


def test_a_writer_resumes_only_after_a_close_and_not_under_another(tmp_path):
    d = tmp_path / SID
    export = parked(d, 20)
    with LogWriter(d) as holder:  # another exporter took the log meanwhile
        assert holder.last_seq == export.w.last_seq
        with pytest.raises(LogLockedError):
            export.w.resume()
    w = LogWriter(d).open()
    with pytest.raises(LogError, match="cannot resume"):
        w.resume()  # open: nothing to resume
    w.close()
