"""The read model's rows made for less (issue 28, the read model's CPU per line) are
the rows made the reference way: each shortcut is held to its reference over every
line of every saved history and over generated values.

* a contract's snapshot and transitions laid out from parts kept per session
  (``TransitionTexts``) against ``execution_snapshot(...).model_dump`` and the
  transitions' ``model_dump``;
* a status change's JSON assembled from its fields' and FCMP events' JSON against
  ``canonical_json(change.model_dump(mode="json"))``, its FCMP events kept as the
  lines have them (not made into models) until the view's ``history`` is read;
* the status counts kept until a contract changes, who is named handed over only
  when it differs from what was handed over last;
* a round's ``updated_at`` stamped without ``datetime``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observation.exporter import Chain, line_bytes, map_history
from observation.exporter.decode import load_history
from observation.log_view import SessionLogView, fold
from observation.read_model.access import AccessFold
from observation.read_model.rows import (
    TransitionTexts,
    _change_text,
    _fcmp_text,
    batch,
    contract_row,
    status_counts,
)
from observation.read_model.store import ReadModelError, _stamp, now_text
from observation.read_model.sync import ReadModelObserver
from workflows.canonical import canonical_json
from workflows.statechart import FcmpEvent

HISTORIES = sorted((Path(__file__).parents[1] / "workflows" / "histories").glob("*.json"))


@cache
def log_lines(path: Path) -> tuple[str, tuple[dict, ...]]:
    sid, events = load_history(path.read_text())
    lines = [json.loads(line_bytes(e)) for e in Chain().link_all(map_history(sid, events))]
    return sid, tuple(lines)


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_rows_from_kept_parts_equal_the_reference_at_every_line(path):
    """After every line, every contract's and status change's row made from the parts
    kept (as the observer makes them, the kept parts reused from line to line) equals
    the row made from the view's models, and a batch of everything equals the
    reference batch (the view's ``history`` read only by the reference)."""
    sid, lines = log_lines(path)
    fast, ref = SessionLogView(sid), SessionLogView(sid)
    texts = TransitionTexts()
    checked_contracts = checked_changes = 0
    for line in lines:
        fast.apply(line)
        ref.apply(line)
        for i in range(len(fast.contracts)):
            assert contract_row(fast, i, texts) == contract_row(ref, i)
            checked_contracts += 1
        for i in range(fast.history_total):
            assert texts.change(i, *fast.change(i)) == \
                _change_text(ref.history[i].model_dump(mode="json"))
            checked_changes += 1
        assert status_counts(fast) == status_counts(ref)
    everything = range(len(fast.contracts)), range(fast.history_total)
    assert batch(fast, *everything, 0, None, None, None, texts) == \
        batch(ref, *everything, 0)
    assert fast._fcmp_raw or not any(h.fcmp for h in ref.history)  # the fast view
    # never made its FCMP events into models; once read, its history is the reference's
    assert fast.history == ref.history and not fast._fcmp_raw
    assert checked_changes > 0
    assert checked_contracts > 0 or not ref.contracts


def test_the_observer_writes_what_a_fold_from_scratch_writes():
    """Commits after every line (the kept parts reused the most) make the batches
    that a new fold of the same lines makes without kept parts."""
    sid, lines = log_lines(HISTORIES[0])

    class Caught:
        def __init__(self):
            self.batches = []

        def apply(self, b):
            self.batches.append(b)

    caught = Caught()
    observer = ReadModelObserver(sid, caught)
    for n, line in enumerate(lines, 1):
        observer.event(line, False)
        observer.commit()
        ref, access = fold(sid, lines[:n]), AccessFold()
        for e in lines[:n]:
            access.apply(e)
        got = caught.batches[-1]
        want = batch(ref, range(len(ref.contracts)), range(ref.history_total), 0, access)
        assert got.session == want.session
        assert all(c in want.contracts for c in got.contracts)
        assert all(h in want.history for h in got.history)
    assert observer.broken is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


@given(type_=st.text(), payload=st.dictionaries(st.text(), json_values, max_size=5))
def test_an_fcmp_event_written_from_the_line_is_the_models_json(type_, payload):
    assert _fcmp_text(type_, payload) == \
        canonical_json(FcmpEvent(type=type_, payload=payload).model_dump(mode="json"))


def test_an_fcmp_line_the_model_would_refuse_is_refused_by_the_fold():
    """Kept as the line has it, an FCMP event whose payload is not an object still
    stops the fold at that line (the model would have refused it there), and the
    read model writes nothing of it."""
    sid, lines = log_lines(HISTORIES[0])
    at = next(i for i, e in enumerate(lines) if e["type"].startswith("conversation."))
    broken = {**lines[at], "payload": ["not", "an", "object"]}
    view = fold(sid, lines[:at])
    with pytest.raises(ValueError, match="not a JSON object"):
        view.apply(broken)

    class Store:
        applied = 0

        def apply(self, b):
            self.applied += 1

    store = Store()
    observer = ReadModelObserver(sid, store)
    for e in lines[:at]:
        observer.event(e, False)
    observer.event(broken, False)
    observer.commit()
    assert observer.broken is not None and "not a JSON object" in observer.broken
    assert store.applied == 0


def test_who_is_named_is_handed_over_when_it_differs_and_again_after_a_failure():
    sid, lines = log_lines(HISTORIES[0])

    class Flaky:
        def __init__(self):
            self.batches, self.fail = [], False

        def apply(self, b):
            if self.fail:
                raise ReadModelError("down")
            self.batches.append(b)

    store = Flaky()
    observer = ReadModelObserver(sid, store)
    observer.event(lines[0], False)
    observer.commit()
    assert store.batches[-1].access is not None  # the first batch says who
    handed = store.batches[-1].access
    for e in lines[1:]:
        observer.event(e, False)
        observer.commit()
        if store.batches[-1].access is not None:
            assert store.batches[-1].access != handed  # only when it differs
            handed = store.batches[-1].access
    assert handed == observer.access.rows()
    store.fail = True  # a failed write: who is named goes again with the next batch
    observer.access.changed = True
    observer.view.last_seq += 1
    observer.commit()
    store.fail = False
    observer.view.last_seq += 1
    observer.commit()
    assert store.batches[-1].access == observer.access.rows()


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@given(st.integers(0, 253402300799_999999))
def test_a_rounds_stamp_is_the_datetime_text(us):
    assert _stamp(us) == now_text(EPOCH + timedelta(microseconds=us))
