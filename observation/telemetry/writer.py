"""Store writes off the log's path: one thread upserts for every session.

The exporter's writer threads hand their changed runs over (as rows, made at once,
so later changes cannot leak in; a projector's run keeps its JSON texts until they
change, so making a row encodes only what changed) and go on with the log; this
thread writes whatever has queued up in one transaction per round (round after
round while there is work, at most one per ``MIN_ROUND_S``; at once when idle, and
at once for ``flush``/``close``), each run once (its
latest row: a row is never replaced by an older state, so writing only the latest
is the same) and each session's progress once (its furthest). A failed write is
kept and tried again. ``flush`` waits until everything handed over is written;
``close`` flushes and stops.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from typing import Any

from observation.telemetry.model import Run, TelemetryRun
from observation.telemetry.store import COLUMNS, TelemetryStore, TelemetryStoreError, to_row

log = logging.getLogger("hitlflow.telemetry")
Item = tuple[list[tuple[Any, ...]], tuple[str, int, str] | None]
RETRY_AFTER_S = 1.0
#: Rounds begin at most this often. A transaction costs far more than the rows in
#: it, and nothing waits for telemetry rows (the SSE feed and the lag follow the read
#: model, ``read_model/writer.py``, whose rounds are 10 ms apart), so a busy
#: exporter's commits are gathered for up to this long: the store lags the log by at
#: most about this much.
MIN_ROUND_S = 0.2
_LAST_SEQ = COLUMNS.index("last_seq")


class BackgroundWriter:
    """Has ``upsert(runs, progress)`` like :class:`TelemetryStore`, but returns at once."""

    def __init__(self, store: TelemetryStore, *, max_batch: int = 1000,
                 retry_after_s: float = RETRY_AFTER_S,
                 min_round_s: float = MIN_ROUND_S) -> None:
        self.store, self.max_batch, self.retry_after_s = store, max_batch, retry_after_s
        self.rounds = 0  # transactions written (for tests and the bench)
        self.written = 0  # upserts handed over and written by them
        self.min_round_s = min_round_s
        self._last_round = -min_round_s  # when the last round began (monotonic)
        self._queue: queue.SimpleQueue[Item | threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="telemetry-store",
                                        daemon=True)
        self._thread.start()

    def upsert(self, runs: Iterable[TelemetryRun | Run],
               progress: tuple[str, int, str] | None = None) -> None:
        self._queue.put(([to_row(r) for r in runs], progress))

    def flush(self, timeout: float | None = None) -> bool:
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        pending: list[Item] = []
        waiting: list[threading.Event] = []
        stop = False
        while not stop:
            first = self._queue.get() if not pending else self._get(self.retry_after_s)
            # under load, at most one round per min_round_s (idle, flush, close: at once)
            if isinstance(first, tuple) and (left := self._last_round + self.min_round_s
                                      - time.monotonic()) > 0:
                time.sleep(left)
            self._last_round = time.monotonic()
            for item in [first, *self._drain()]:
                if item is None:
                    stop = True
                elif isinstance(item, threading.Event):
                    waiting.append(item)
                elif item is not False:
                    pending.append(item)
            while pending:
                batch = pending[: self.max_batch]
                try:
                    self._round(batch)
                except TelemetryStoreError as err:  # kept: tried again
                    log.warning("telemetry store: %s (retrying)", err)
                    break
                del pending[: len(batch)]
            if stop and pending:
                log.error("telemetry store: %d updates not written at close (`hitlflow "
                          "telemetry rebuild` makes them from the logs)", len(pending))
            if not pending or stop:
                for event in waiting:
                    event.set()
                waiting.clear()

    def _round(self, items: list[Item]) -> None:
        """``items`` in one transaction: each run's latest row, each session's
        furthest progress (what writing them all in order would leave)."""
        rows: dict[str, tuple[Any, ...]] = {}
        progress: dict[str, tuple[str, int, str]] = {}
        for item_rows, item_progress in items:
            for row in item_rows:
                old = rows.get(row[0])
                if old is None or row[_LAST_SEQ] >= old[_LAST_SEQ]:
                    rows[row[0]] = row
            if item_progress is not None:
                old_p = progress.get(item_progress[0])
                if old_p is None or item_progress[1] >= old_p[1]:
                    progress[item_progress[0]] = item_progress
        self.store.upsert_rows([(list(rows.values()), None),
                                *(([], p) for p in progress.values())])
        self.rounds += 1
        self.written += len(items)

    def _get(self, timeout: float) -> Any:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return False

    def _drain(self) -> list[Any]:
        items = []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                return items
