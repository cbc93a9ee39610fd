"""Store writes off the log's path: one thread upserts for every session.

The exporter's writer threads hand their changed runs over (as rows, made at once,
so later changes cannot leak in) and go on with the log; this thread writes
whatever has queued up in one transaction. A failed write is kept and tried again
(rows are idempotent: a row is never replaced by an older state). ``flush`` waits
until everything handed over is written; ``close`` flushes and stops.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable
from typing import Any

from observation.telemetry.model import TelemetryRun
from observation.telemetry.store import TelemetryStore, TelemetryStoreError, to_row

log = logging.getLogger("hitlflow.telemetry")
Item = tuple[list[tuple[Any, ...]], tuple[str, int, str] | None]
RETRY_AFTER_S = 1.0


class BackgroundWriter:
    """Has ``upsert(runs, progress)`` like :class:`TelemetryStore`, but returns at once."""

    def __init__(self, store: TelemetryStore, *, max_batch: int = 1000,
                 retry_after_s: float = RETRY_AFTER_S) -> None:
        self.store, self.max_batch, self.retry_after_s = store, max_batch, retry_after_s
        self._queue: queue.SimpleQueue[Item | threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="telemetry-store",
                                        daemon=True)
        self._thread.start()

    def upsert(self, runs: Iterable[TelemetryRun],
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
                    self.store.upsert_rows(batch)
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
