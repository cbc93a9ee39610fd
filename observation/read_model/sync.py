"""Keeping the read model: the exporter's hook, the catch-up at start, the rebuild.

* :class:`ReadModelObserver` — a :class:`~observation.exporter.log.LogObserver`:
  it folds every line the writer has (those on disk when it opens, then each
  appended one) and, at each commit (after the batch's fsync, ``snapshot.json``
  and ``head``: log first, then the read model), hands the rows the batch changed
  to the store: in the exporter service a :class:`~observation.read_model.writer.
  GroupWriter`, which writes every session's batches of a round in one transaction
  (a failed round is kept and written by a later one); given a store itself, one
  transaction per commit on the caller's thread (a failed write is logged and
  kept: the next commit writes everything since what the store holds).
* :class:`AfterReadModel` — an observer told each commit only once the group
  writer has the batch (the SSE feed: a streamed line is in the read model).
* :func:`sync_store` — at the exporter's start: every log whose head the store
  does not reflect is folded and its rows replaced (sessions that ended are no
  longer followed; a store that lost commits, or a new one, catches up here).
* :func:`rebuild` — drop every row and rebuild from ``runs/*/events.ndjson``
  alone, each log verified first (a broken one is reported and skipped).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from observation.exporter.log import LogObserver
from observation.exporter.verify import LOG_NAME, read_head, read_lines, verify_lines
from observation.log_view import SessionLogView
from observation.read_model.access import ACCESS_FOLDS, AccessFold
from observation.read_model.notices import NOTICE_FOLDS, NoticeFold, NoticeRow
from observation.read_model.rows import (
    SessionBatch,
    Suspended,
    TransitionTexts,
    batch,
    full_batch,
)
from observation.read_model.store import ReadModelError, ReadStore
from observation.read_model.writer import GroupWriter

log = logging.getLogger("hitlflow.read_model")


class BatchSink(Protocol):
    """Where an observer's batches go: a :class:`ReadStore` (written at once, may
    raise :class:`ReadModelError`) or a :class:`GroupWriter` (handed over)."""

    def apply(self, batch: SessionBatch) -> Any: ...


#: The line types the access and notice folds read (every other one passes them by).
_NAMING = frozenset(ACCESS_FOLDS) | frozenset(NOTICE_FOLDS)


class ReadModelObserver:
    """One session's log into the read model, batch by batch."""

    def __init__(self, session_id: str, store: BatchSink) -> None:
        self.store = store
        self.view = SessionLogView(session_id)
        self.access = AccessFold()  # who is named: the session's people, the deciders
        self.notice_fold = NoticeFold(session_id)  # what is worth telling people
        self._notices: list[NoticeRow] = []  # not written yet
        self.broken: str | None = None
        self._facts_from = 0  # facts not written yet start here
        self._contracts: set[int] = set()
        self._history: set[int] = set()
        self._stored: int | None = None  # what the store holds, once known
        self._suspended = Suspended()  # has_suspended, kept as contracts change
        self._texts = TransitionTexts()  # the transitions' JSON, each written once

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        if self.broken is not None:
            return
        try:
            self.view.apply(event)
            if event["type"] in _NAMING:  # most lines name no one and tell no one
                self.access.apply(event)
                notice = self.notice_fold.apply(event)
                if notice is not None:
                    self._notices.append(notice)
        except (ValueError, KeyError, TypeError) as err:
            self.broken = f"line {event.get('seq')}: {type(err).__name__}: {err}"
            log.error("read model of session %s stops: %s", self.view.session_id, self.broken)

    def commit(self) -> None:
        view = self.view
        if self.broken is not None or view.last_seq == 0 or view.last_seq == self._stored:
            return
        contracts, history = view.take_touched()
        self._contracts |= contracts
        self._history |= history
        try:
            b = batch(view, self._contracts, self._history, self._facts_from, self.access,
                      self._notices, self._suspended.update(view, contracts), self._texts)
            self.store.apply(b)  # the store skips what it already has
        except ReadModelError as err:  # kept: the next commit writes it
            self.access.changed = True
            self._texts.access = None
            log.warning("read model of session %s: %s", view.session_id, err)
            return
        self._stored = view.last_seq
        self._facts_from = len(view.facts)
        self._notices.clear()
        self._contracts.clear()
        self._history.clear()


class AfterReadModel:
    """An observer (the SSE feed) told everything in the same order, but each commit
    only once the group writer has written the batches handed over before it (on the
    writer's thread): a line it streams is in the read model, a read with ``min_seq``
    set to it is fresh at once (unless that round failed: the feed does not wait for
    a broken database). Lines before a commit are held with it; a
    ``call_scheduled`` with no line held goes on at once (behind the same writer)."""

    HOLD = 256  # lines held at most before they go on (lines replayed at open)

    def __init__(self, inner: LogObserver, writer: GroupWriter) -> None:
        self.inner, self.writer = inner, writer
        self._held: list[tuple[str, Any, bool]] = []

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        self._held.append(("event", event, replayed))
        if len(self._held) >= self.HOLD:
            self._pass()

    def commit(self) -> None:
        self._held.append(("commit", None, False))
        self._pass()

    def call_scheduled(self, call_id: str) -> None:
        if getattr(self.inner, "call_scheduled", None) is None:
            return
        self._held.append(("call", call_id, False))
        if not any(kind == "event" for kind, _, _ in self._held):
            self._pass()

    def _pass(self) -> None:
        held, self._held = self._held, []
        inner = self.inner

        def then() -> None:  # on the writer's thread, in the order handed over
            for kind, value, replayed in held:
                if kind == "event":
                    inner.event(value, replayed)
                elif kind == "commit":
                    inner.commit()
                else:
                    inner.call_scheduled(value)  # type: ignore[attr-defined]
        self.writer.after(then)


class Tee:
    """Several observers as one (telemetry and the read model)."""

    def __init__(self, observers: Iterable[LogObserver | None]) -> None:
        self.observers = [o for o in observers if o is not None]

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        for o in self.observers:
            o.event(event, replayed)

    def commit(self) -> None:
        for o in self.observers:
            o.commit()

    def call_scheduled(self, call_id: str) -> None:
        for o in self.observers:
            if (told := getattr(o, "call_scheduled", None)) is not None:
                told(call_id)


def fold_log(run_dir: Path, access: AccessFold | None = None,
             notices: list[NoticeRow] | None = None) -> SessionLogView:
    """A log verified line by line and folded (raises ``ChainBrokenError`` or the
    fold's ``ValueError``), and into ``access`` when given, its notices appended to
    ``notices`` when given. Its head, when there is one, must name one of its lines:
    the last, or one before it whose ``event_hash`` it is (the exporter writes the head
    every few seconds, not per batch: it may lag the log, never pass it)."""
    view = SessionLogView(run_dir.name)
    notice_fold = NoticeFold(run_dir.name) if notices is not None else None
    head = read_head(run_dir)  # before the lines: a head written meanwhile is behind them
    at_head: str | None = None
    for event in verify_lines(read_lines(run_dir / LOG_NAME)):
        view.apply(event)
        if head is not None and event["seq"] == head[0]:
            at_head = event["event_hash"]
        if access is not None:
            access.apply(event)
        if notice_fold is not None and (n := notice_fold.apply(event)) is not None:
            notices.append(n)
    if head is not None and head[0] > view.last_seq:
        raise ValueError(f"the log ends at line {view.last_seq}, its head says "
                         f"{head[0]}: lines are missing")
    if head is not None and head[0] > 0 and at_head != head[1]:
        raise ValueError(f"its head names line {head[0]}, whose event_hash is another: "
                         "the head or the log was changed")
    return view


@dataclass
class SyncResult:
    synced: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def _logs(runs_dir: Path) -> list[Path]:
    if not runs_dir.is_dir():
        return []
    return [d for d in sorted(runs_dir.iterdir()) if (d / LOG_NAME).is_file()]


def sync_store(store: ReadStore, runs_dir: Path, *, every: bool = False) -> SyncResult:
    """Replace the rows of every session whose log's head the store does not
    reflect (``every``: of all of them)."""
    result = SyncResult()
    heads = {} if every else store.heads()
    for run_dir in _logs(runs_dir):
        sid = run_dir.name
        if not every and sid in heads and heads[sid] == read_head(run_dir):
            continue
        access = AccessFold()
        notices: list[NoticeRow] = []
        try:
            view = fold_log(run_dir, access, notices)
        except (ValueError, KeyError, TypeError, OSError) as err:  # ChainBroken included
            result.errors[sid] = f"{type(err).__name__}: {err}"
            continue
        if view.last_seq == 0:
            continue
        store.replace(full_batch(view, access, notices))
        result.synced.append(sid)
    return result


def rebuild(store: ReadStore, runs_dir: Path) -> SyncResult:
    """Drop every row, then fold every log under ``runs_dir`` into the store. Run
    it while no exporter writes the store (or restart the exporter after it)."""
    store.reset()
    return sync_store(store, runs_dir, every=True)
