"""The read model written in groups: one writer thread per store, one transaction
per round for every session that committed meanwhile.

The exporter commits each session's log once per history page, a few lines at a
time, from many threads. Instead of one transaction per session per page, each
session's :class:`~observation.read_model.sync.ReadModelObserver` hands its batch to
:meth:`GroupWriter.apply` and goes on with its log; the writer thread takes whatever
was handed over since its last round and writes it in ONE transaction
(:meth:`~observation.read_model.store.SqlStore.apply_many`), round after round while
there is work: no delay when idle (a batch handed to a writer idle for
``MIN_ROUND_S`` is written at once); under load a round begins at most every
``MIN_ROUND_S`` and takes everything that queued up meanwhile (a round's
transaction costs about what one batch's did: the more it holds, the less each
batch costs).

* **Order per session**: the batches of one session are merged in the order they
  were handed over (``rows.MergedBatch``: its latest row, each contract and status change
  at its latest, every fact and notice), so a round writes each session once.
* **Notices** are written in the same transaction as the rows of the batch they come
  from (``INSERT ... ON CONFLICT DO NOTHING``, as before).
* **A failed round is kept**: its merged batches stay and are written by a later
  round (tried again after ``retry_after_s``; the batches handed over meanwhile are
  merged into them), as before "kept: the next commit writes it".
* **After a round**, the callbacks handed over with its batches run, in order
  (:meth:`after`: the SSE feed hears a batch once the read model has it, as when the
  read model was written on the exporter's thread; also when the round failed: the
  feed does not wait for a broken database).
* :meth:`flush` waits until everything handed over is written; :meth:`close`
  writes what is pending (a last round) and stops. What a failed last round could
  not write is logged: the exporter's next start writes it from the logs
  (``sync.sync_store``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from observation.read_model.rows import MergedBatch, SessionBatch
from observation.read_model.store import ReadModelError, ReadStore

log = logging.getLogger("hitlflow.read_model")
RETRY_AFTER_S = 1.0
#: Rounds begin at most this often: a batch handed to a writer idle for longer is
#: written at once; under load, what comes within this of the last round's start
#: waits for the next one (a round is cheaper per batch the more it holds).
MIN_ROUND_S = 0.01


class GroupWriter:
    """Has ``apply(batch)`` like a :class:`ReadStore`, but returns at once."""

    def __init__(self, store: ReadStore, *, retry_after_s: float = RETRY_AFTER_S,
                 min_round_s: float = MIN_ROUND_S, name: str = "read-model-writer") -> None:
        self.store, self.retry_after_s, self.min_round_s = store, retry_after_s, min_round_s
        self._last_round = -min_round_s  # when the last round began (monotonic)
        self.batches = 0  # batches handed over and taken by a round (for the bench)
        self._cond = threading.Condition(threading.Lock())  # never taken twice
        self._items: list[tuple[SessionBatch | None, Callable[[], None] | None]] = []
        self._handed = 0  # items handed over so far
        self._done = 0  # items whose round ran (written, or kept after a failure)
        self._pending: dict[str, SessionBatch | MergedBatch] = {}  # kept: not written yet
        self._stop = False
        self.rounds = 0  # transactions that wrote (for tests and the bench)
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- the exporter's side ------------------------------------------------------------

    def apply(self, batch: SessionBatch) -> None:
        """Hand one session's batch over (written by the next round)."""
        self._hand(batch, None)

    def after(self, then: Callable[[], None]) -> None:
        """Run ``then`` on the writer's thread once everything handed over before it
        went through a round (written, or kept after a failure)."""
        self._hand(None, then)

    def _hand(self, batch: SessionBatch | None, then: Callable[[], None] | None) -> None:
        with self._cond:
            if self._stop:  # closed: no round will come
                closed = True
            else:
                closed = False
                items = self._items
                items.append((batch, then))
                self._handed += 1
                if len(items) == 1:  # else the writer knows: its round or its wait for
                    self._cond.notify()  # the next one is under way (no wake-up each)
        if closed:
            self._late(batch, then)

    def _late(self, batch: SessionBatch | None, then: Callable[[], None] | None) -> None:
        if batch is not None:
            try:
                self.store.apply(batch)
            except ReadModelError as err:
                log.warning("read model of session %s (after close): %s",
                            batch.session_id, err)
        if then is not None:
            _call(then)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything handed over so far is written; False when that did
        not happen within ``timeout`` (e.g. the database is down)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._handed
            while self._done < target or self._pending:
                if not self._thread.is_alive():
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self) -> None:
        """Write what is pending (one last round) and stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()

    # -- the writer's thread ------------------------------------------------------------

    def _run(self) -> None:
        retry_at = 0.0
        while True:
            with self._cond:
                while not self._stop:
                    now = time.monotonic()
                    if self._items:  # under load, at most one round per min_round_s
                        left = self._last_round + self.min_round_s - now
                    elif self._pending:  # a failed round's, tried again later
                        left = retry_at - now
                    else:
                        self._cond.wait()
                        continue
                    if left <= 0:
                        break
                    self._cond.wait(left)
                items, self._items = self._items, []
                stop = self._stop
            self._last_round = time.monotonic()
            self.batches += sum(1 for b, _ in items if b is not None)
            wrote = self._round(items, write=stop or time.monotonic() >= retry_at)
            if wrote is False:  # tried and failed: the next try waits a moment
                retry_at = time.monotonic() + self.retry_after_s
            with self._cond:
                self._done += len(items)
                self._cond.notify_all()
                if stop and not self._items:
                    break
        if self._pending:
            log.error("read model: %d sessions' rows not written at close (the exporter's "
                      "next start writes them from the logs)", len(self._pending))

    def _round(self, items: list[tuple[SessionBatch | None, Any]], write: bool
               ) -> bool | None:
        """Merge ``items`` into what is pending, write it in one transaction (unless
        a failed round asked to wait: ``write`` False), then run their callbacks.
        True: written; False: the write failed (kept); None: nothing tried."""
        pending = self._pending
        for batch, _ in items:
            if batch is not None:
                old = pending.get(batch.session_id)
                if old is None:
                    pending[batch.session_id] = batch  # merged only when another comes
                elif isinstance(old, MergedBatch):
                    old.add(batch)
                else:
                    pending[batch.session_id] = MergedBatch(old).add(batch)
        ok: bool | None = None
        if pending and write:
            ok = False
            try:
                self.store.apply_many([m.batch() if isinstance(m, MergedBatch) else m
                                       for m in pending.values()])
            except ReadModelError as err:  # kept: a later round writes it
                self.failures += 1
                log.warning("read model: %s (%d sessions kept, tried again in %g s)",
                            err, len(pending), self.retry_after_s)
            except Exception:  # a bug must not stop the writer: kept, logged
                self.failures += 1
                log.exception("read model: a round failed (%d sessions kept)", len(pending))
            else:
                self.rounds += 1
                pending.clear()
                ok = True
        for _, then in items:
            if then is not None:
                _call(then)
        return ok


def _call(then: Callable[[], None]) -> None:
    try:
        then()
    except Exception:  # an observer's bug must not stop the writer (nor the log)
        log.exception("read model: a callback after a round failed")
