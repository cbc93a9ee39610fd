"""The exporter service: discovers sessions and runs one follower task each.

``hitlflow up`` runs :func:`run_exporter` next to the worker. A session whose log
another exporter holds is retried later (one writer per log); a write or fsync
error stops the whole service (:class:`LogWriteError` is raised from ``run``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client

from observation.exporter import follower
from observation.exporter.follower import SESSION_QUERY, finished_on_disk
from observation.exporter.log import LogLockedError, LogObserver, LogWriteError
from observation.read_model import ReadModelError, ReadStore, open_store
from observation.read_model.sync import ReadModelObserver, Tee, sync_store

if TYPE_CHECKING:
    from api.settings import HitlflowSettings

log = logging.getLogger("hitlflow.exporter")


class Exporter:
    """Follows every session (``list_workflows``) into ``runs_dir``; one task each.

    A session whose log another exporter holds is retried later (one writer per
    log); a write or fsync error stops the whole exporter (:class:`LogWriteError`).
    """

    def __init__(self, client: Client, runs_dir: Path, *, query: str = SESSION_QUERY,
                 discover_every_s: float = 1.0, retry_after_s: float = 5.0,
                 rescan_every: int = 60,
                 observers: Callable[[str], LogObserver | None] | None = None) -> None:
        self.client, self.runs_dir, self.query = client, runs_dir, query
        self.observers = observers  # session id -> its log's observer (telemetry)
        self.discover_every_s, self.retry_after_s = discover_every_s, retry_after_s
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.done: set[str] = set()
        self.errors: dict[str, str] = {}
        self.fatal: BaseException | None = None
        self._stop = asyncio.Event()
        self._since: datetime | None = None
        # Every poll lists what started or closed lately; every `rescan_every`-th one
        # lists every running session too (one visibility missed for a minute).
        self.rescan_every, self._polls = rescan_every, 0

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set (or a fatal write error, which is raised)."""
        watcher = asyncio.ensure_future((stop or asyncio.Event()).wait())
        stopping = asyncio.ensure_future(self._stop.wait())  # one task, not one per loop
        try:
            while not self._stop.is_set() and not watcher.done():
                try:
                    await self.discover()
                except Exception as err:  # Temporal unreachable for a moment
                    log.warning("exporter: listing sessions failed: %s", err)
                await asyncio.wait({stopping, watcher}, timeout=self.discover_every_s,
                                   return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            stopping.cancel()
            for t in self.tasks.values():
                t.cancel()
            await asyncio.gather(*self.tasks.values(), watcher, stopping,
                                 return_exceptions=True)
        if self.fatal is not None:
            raise self.fatal

    async def discover(self) -> None:
        query = self.query
        if self._since is not None:
            since = (self._since - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            recent = "ExecutionStatus=\"Running\"" if self._polls % self.rescan_every == 0 \
                else f'StartTime > "{since}"'
            query += f' AND ({recent} OR CloseTime > "{since}")'
        self._since = datetime.now(UTC)
        self._polls += 1
        async for wf in self.client.list_workflows(query):
            self.follow(wf.id)

    def follow(self, session_id: str) -> None:
        if session_id not in self.tasks and session_id not in self.done:
            self.tasks[session_id] = asyncio.create_task(
                self._follow(session_id), name=f"export {session_id}")

    async def _follow(self, session_id: str) -> None:
        delay = self.retry_after_s
        try:
            while True:
                if finished_on_disk(self.runs_dir / session_id):
                    self.done.add(session_id)
                    return
                try:
                    hook = {"observer": self.observers(session_id)} if self.observers else {}
                    await follower.export_session(self.client, session_id, self.runs_dir,
                                                  follow=True, **hook)
                    self.done.add(session_id)
                    self.errors.pop(session_id, None)
                    return
                except LogWriteError as err:
                    self.fatal = err
                    log.error("exporter stops: %s", err)
                    self._stop.set()
                    return
                except LogLockedError as err:
                    self.errors[session_id] = str(err)
                except Exception as err:
                    self.errors[session_id] = f"{type(err).__name__}: {err}"
                    log.error("exporter: session %s: %s", session_id, self.errors[session_id])
                    delay = min(delay * 2, 300.0)
                await asyncio.sleep(delay)
        finally:
            self.tasks.pop(session_id, None)


async def run_exporter(settings: HitlflowSettings, stop: asyncio.Event,
                       client: Client | None = None) -> None:
    """The exporter as a service of ``hitlflow up``: ``<data_dir>/runs/<session_id>/``,
    and telemetry runs in ``<data_dir>/telemetry.sqlite`` (and OTLP when configured)."""
    from api.worker import connect
    from observation.telemetry.hook import start_telemetry

    client = client or await connect(settings)
    runs = settings.data_dir / "runs"
    telemetry = await asyncio.to_thread(start_telemetry, settings.data_dir)
    store = await asyncio.to_thread(start_read_model, settings.data_dir, runs,
                                    settings.read_model_url)

    def observers(session_id: str) -> LogObserver | None:
        found = [telemetry.observer(session_id),
                 ReadModelObserver(session_id, store) if store is not None else None]
        return Tee(found) if any(found) else None

    try:
        await Exporter(client, runs, observers=observers).run(stop)
    finally:
        await asyncio.to_thread(telemetry.close)
        if store is not None:
            await asyncio.to_thread(store.close)


def start_read_model(data_dir: Path, runs_dir: Path, url: str | None = None
                     ) -> ReadStore | None:
    """The exporter's read model (SQLite in ``data_dir``, or PostgreSQL at ``url``),
    brought up to the logs' heads. One that cannot be opened is logged and left
    out: the logs are exported all the same (the API then says it is stale)."""
    try:
        store = open_store(data_dir, url)
    except ReadModelError as err:
        log.error("read model left out: %s", err)
        return None
    try:
        result = sync_store(store, runs_dir)
    except ReadModelError as err:
        log.error("read model: catching up with the logs failed: %s", err)
        return store
    for sid, err in result.errors.items():
        log.error("read model: the log of session %s is left out: %s", sid, err)
    if result.synced:
        log.info("read model: %d session logs brought up to date in %s", len(result.synced),
                 store.where)
    return store
