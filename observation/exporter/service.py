"""The exporter service: discovers sessions and runs one follower task each.

``hitlflow up`` runs :func:`run_exporter` next to the worker. A session whose log
another exporter holds is retried later (one writer per log); a write or fsync
error stops the whole service (:class:`LogWriteError` is raised from ``run``).

A session that waits for the person is **parked**: its follower stops once the log
holds everything up to the wait (no task, no history long-poll). It is woken by
what changes it: visibility (its ``SessionStatus`` leaves ``waiting_user``, its
``WaitingSince`` moves, or it closes; seen at the next discovery poll), a
:class:`Wakeups` call from the process that changed it (in ``up``, the API), a
timer at its request's next reminder or escalation (issue 26), or the sweep of
parked sessions (history grew without a status change).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from observation.exporter import follower
from observation.exporter.feed import LogFeed
from observation.exporter.follower import SESSION_QUERY, finished_on_disk
from observation.exporter.keys import publish_verifier
from observation.exporter.log import LogError, LogLockedError, LogObserver, LogWriteError
from observation.exporter.note import Signer
from observation.read_model import ReadModelError, ReadStore, open_store
from observation.read_model.sync import (
    AfterReadModel,
    GroupWriter,
    ReadModelObserver,
    Tee,
    sync_store,
)
from workflows.search_attributes import SESSION_STATUS, WAITING_SINCE

log = logging.getLogger("hitlflow.exporter")

WAITING = "waiting_user"


#: Parked sessions whose export state is kept in memory (the rest reopen their log).
KEEP_PARKED = 1000
#: How far before the last poll each poll looks (visibility shows a change late).
POLL_OVERLAP = timedelta(seconds=5)
#: A parked session is woken this long after its request's next reminder or
#: escalation is due (issue 26); one parked when it was due already is woken again
#: after as long as it has been overdue, at most STEP_WAKE_RETRY_S.
STEP_WAKE_MARGIN_S = 1.0
STEP_WAKE_RETRY_S = 30.0
#: How far before the last rescan a rescan looks (a change visibility showed later).
RESCAN_OVERLAP = timedelta(minutes=1)


@dataclass(frozen=True)
class Parked:
    """What a parked session looked like when its follower stopped."""

    run_id: str
    waiting_since: datetime | None
    history_length: int

    def changed(self, wf: WorkflowExecution) -> bool:
        """Visibility shows another state than the one parked at."""
        sa = wf.typed_search_attributes
        return (wf.status != WorkflowExecutionStatus.RUNNING or wf.run_id != self.run_id
                or sa.get(SESSION_STATUS) != WAITING
                or sa.get(WAITING_SINCE) != self.waiting_since)


class Wakeups:
    """How a process that changed a session tells the exporter at once (in ``up``,
    the API that accepted a reply, message, end or cancel). A no-op until an
    :class:`Exporter` runs with it."""

    def __init__(self) -> None:
        self._to: Callable[[str], None] | None = None

    def __call__(self, session_id: str) -> None:
        if self._to is not None:
            self._to(session_id)


class Exporter:
    """Follows every session (``list_workflows``) into ``runs_dir``; one task each,
    none for a parked session (see the module docstring).

    A session whose log another exporter holds is retried later (one writer per
    log); a write or fsync error stops the whole exporter (:class:`LogWriteError`).
    """

    def __init__(self, client: Client, runs_dir: Path, *, query: str = SESSION_QUERY,
                 discover_every_s: float = 1.0, retry_after_s: float = 5.0,
                 rescan_every: int = 60, sweep_every_s: float = 1800.0, park: bool = True,
                 max_followers: int = 400, keep_parked: int = KEEP_PARKED,
                 observers: Callable[[str], LogObserver | None] | None = None,
                 signer: Signer | None = None) -> None:
        self.client, self.runs_dir, self.query = client, runs_dir, query
        self.signer = signer  # signs each log's head (``checkpoint``)
        self.observers = observers  # session id -> its log's observer (telemetry)
        self.discover_every_s, self.retry_after_s = discover_every_s, retry_after_s
        self.sweep_every_s, self.park = sweep_every_s, park
        self.tasks: dict[str, asyncio.Task[None]] = {}
        # Followers holding a history long-poll at once (Temporal caps long-polls per
        # namespace; past the cap every poll fails, SSE and workers' included).
        self._slots = asyncio.Semaphore(max_followers)
        # Every follower's pages are committed by one group committer (a few threads
        # of its own): under load one fsync per session covers the pages that came
        # meanwhile, and fsyncs do not hold the file lane that maps and appends.
        self.committer = follower.Committer()
        self.parked: dict[str, Parked] = {}
        # The state of the last `keep_parked` parked sessions (closed writer, mapper,
        # chain, observer): a wake carries on from it instead of re-reading the log and
        # re-mapping the history (work per session, not per batch).
        self.keep_parked = keep_parked
        self.kept: OrderedDict[str, follower.SessionExport] = OrderedDict()
        self.done: set[str] = set()
        self.errors: dict[str, str] = {}
        self.fatal: BaseException | None = None
        self._woken: set[str] = set()  # woken while its follower was still running
        self._stop = asyncio.Event()
        self._since: datetime | None = None  # when the last poll started
        # Every poll lists the running sessions that do not wait, and what started,
        # closed or began a wait since the last poll (POLL_OVERLAP earlier); every
        # `rescan_every`-th one looks back to the previous rescan (RESCAN_OVERLAP
        # earlier): a change visibility showed late is caught within a minute, while a
        # burst of new sessions is listed about once, not for a minute every second.
        self.rescan_every, self._polls = rescan_every, 0
        self._rescanned: datetime | None = None  # when the last rescan started
        self._sweep: asyncio.Task[None] | None = None
        self._swept = 0.0
        # Parked sessions whose request has a reminder or escalation to come: woken then
        # (the step changes nothing visibility shows); one timer each, none otherwise.
        self._step_timers: dict[str, asyncio.TimerHandle] = {}

    async def run(self, stop: asyncio.Event | None = None,
                  wakeups: Wakeups | None = None) -> None:
        """Run until ``stop`` is set (or a fatal write error, which is raised)."""
        watcher = asyncio.ensure_future((stop or asyncio.Event()).wait())
        stopping = asyncio.ensure_future(self._stop.wait())  # one task, not one per loop
        loop = asyncio.get_running_loop()
        self._swept = loop.time()
        if wakeups is not None:
            wakeups._to = self.wake
        try:
            while not self._stop.is_set() and not watcher.done():
                try:
                    await self.discover()
                except Exception as err:  # Temporal unreachable for a moment
                    log.warning("exporter: listing sessions failed: %s", err)
                if loop.time() - self._swept >= self.sweep_every_s and (
                        self._sweep is None or self._sweep.done()):
                    self._swept = loop.time()
                    self._sweep = asyncio.create_task(self.sweep(
                        pace_s=self.sweep_every_s / max(1, len(self.parked))),
                        name="exporter sweep")
                await asyncio.wait({stopping, watcher}, timeout=self.discover_every_s,
                                   return_when=asyncio.FIRST_COMPLETED)
        finally:
            if wakeups is not None:
                wakeups._to = None
            for timer in self._step_timers.values():
                timer.cancel()
            self._step_timers.clear()
            watcher.cancel()
            stopping.cancel()
            for t in [*self.tasks.values(), *([self._sweep] if self._sweep else [])]:
                t.cancel()
            await asyncio.gather(*self.tasks.values(), watcher, stopping,
                                 *([self._sweep] if self._sweep else []),
                                 return_exceptions=True)
            await asyncio.to_thread(self.committer.close)
        if self.fatal is not None:
            raise self.fatal

    async def discover(self) -> None:
        query, now = self.query, datetime.now(UTC)
        rescan = self._polls % self.rescan_every == 0
        if self._since is not None:
            after = (self._rescanned - RESCAN_OVERLAP if rescan and self._rescanned
                     else self._since - POLL_OVERLAP).strftime("%Y-%m-%dT%H:%M:%SZ")
            query += (f' AND (StartTime > "{after}" OR CloseTime > "{after}" OR '
                      f'(ExecutionStatus="Running" AND (SessionStatus != "{WAITING}" '
                      f'OR WaitingSince > "{after}")))')
        self._since, self._polls = now, self._polls + 1
        if rescan:
            self._rescanned = now
        async for wf in self.client.list_workflows(query):
            parked = self.parked.get(wf.id)
            if parked is None:
                self.follow(wf.id)
            elif parked.changed(wf):
                self.wake(wf.id)

    async def sweep(self, pace_s: float = 0.0) -> None:
        """Wake the parked sessions whose history grew without a change visibility
        shows (e.g. ``restart.preserve_waiting``): one describe each, one at a time,
        ``pace_s`` apart (the run loop spreads a sweep over its period: a steady
        trickle, not a burst every period that other reads would queue behind)."""
        loop = asyncio.get_running_loop()
        for session_id, parked in list(self.parked.items()):
            started = loop.time()
            if self.parked.get(session_id) is not parked:
                continue
            try:
                desc = await self.client.get_workflow_handle(session_id).describe()
            except Exception as err:
                log.warning("exporter: describing parked %s failed: %s", session_id, err)
                continue
            if desc.run_id != parked.run_id or desc.history_length != parked.history_length:
                self.wake(session_id)
            if (rest := pace_s - (loop.time() - started)) > 0:
                await asyncio.sleep(rest)

    def follow(self, session_id: str) -> None:
        if session_id not in self.tasks and session_id not in self.done \
                and session_id not in self.parked:
            self.tasks[session_id] = asyncio.create_task(
                self._follow(session_id), name=f"export {session_id}")

    def wake(self, session_id: str) -> None:
        """Something may have changed the session (or started it): follow it now,
        again if it was parked, at once if discovery has not seen it yet."""
        timer = self._step_timers.pop(session_id, None)
        if timer is not None:
            timer.cancel()
        if session_id in self.tasks:
            self._woken.add(session_id)  # its follower must not park on what it saw
        else:
            self.parked.pop(session_id, None)
            self.follow(session_id)

    def _wake_at_next_step(self, session_id: str,
                           state: follower.SessionExport | None) -> None:
        """A parked session whose request will be reminded or escalated (issue 26) is
        woken just after that is due: it writes into history only, and a wake then
        finds it there, or the workflow task that writes it still pending (a follower
        does not park on one). Due already (its timer fires late): tried again later."""
        at = state.mapper.next_wait_step() if state is not None else None
        if at is None:
            return
        delay = (at - datetime.now(UTC)).total_seconds()
        # overdue (its timer fires late, e.g. a loaded server): again after as long as
        # it has been overdue, between the margin and STEP_WAKE_RETRY_S
        delay = delay + STEP_WAKE_MARGIN_S if delay > 0 else \
            min(max(-delay, STEP_WAKE_MARGIN_S), STEP_WAKE_RETRY_S)
        loop = asyncio.get_running_loop()
        old = self._step_timers.pop(session_id, None)
        if old is not None:
            old.cancel()
        self._step_timers[session_id] = loop.call_later(delay, self._step_due, session_id)

    def _step_due(self, session_id: str) -> None:
        self._step_timers.pop(session_id, None)
        if session_id in self.parked:
            self.wake(session_id)

    async def _may_park(self, session_id: str, run_id: str, last_event_id: int) -> bool:
        """Park only at the very end of history, with no workflow task pending (a
        cancel request, a reply being handled) and visibility saying it waits."""
        if session_id in self._woken:
            self._woken.discard(session_id)
            return False
        try:
            desc = await self.client.get_workflow_handle(session_id).describe()
        except Exception as err:  # cannot tell: keep following
            log.warning("exporter: describing %s failed: %s", session_id, err)
            return False
        sa = desc.typed_search_attributes
        if (desc.run_id != run_id or desc.history_length != last_event_id
                or desc.status != WorkflowExecutionStatus.RUNNING
                or desc.raw_description.HasField("pending_workflow_task")
                or sa.get(SESSION_STATUS) != WAITING or session_id in self._woken):
            return False
        self.parked[session_id] = Parked(run_id, sa.get(WAITING_SINCE), last_event_id)
        return True

    async def _follow(self, session_id: str) -> None:
        delay = self.retry_after_s
        park = (lambda run_id, last: self._may_park(session_id, run_id, last)) \
            if self.park else None
        try:
            while True:
                if finished_on_disk(self.runs_dir / session_id):
                    self.done.add(session_id)
                    return
                try:
                    resume = self.kept.pop(session_id, None)
                    if resume is not None:
                        try:
                            await follower._in_thread(resume.w.resume)
                        except LogLockedError:
                            raise
                        except LogError as err:  # changed meanwhile: read and checked anew
                            log.info("exporter: %s", err)
                            resume = None
                    hook = {"observer": self.observers(session_id)} \
                        if self.observers and resume is None else {}
                    async with self._slots:
                        result = await follower.export_session(
                            self.client, session_id, self.runs_dir, follow=True, park=park,
                            signer=self.signer, resume=resume, committer=self.committer,
                            **hook)
                    self.errors.pop(session_id, None)
                    if not result.parked:
                        self.done.add(session_id)
                        return
                    if result.state is not None and self.keep_parked > 0:
                        self.kept[session_id] = result.state  # its next wake resumes it
                        while len(self.kept) > self.keep_parked:
                            self.kept.popitem(last=False)
                    if session_id not in self._woken:
                        self._wake_at_next_step(session_id, result.state)
                        return  # parked: this task ends, wake() starts another
                    self._woken.discard(session_id)
                    self.parked.pop(session_id, None)
                    continue
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


async def run_exporter(client: Client, data_dir: Path, stop: asyncio.Event, *,
                       wakeups: Wakeups | None = None, read_model_url: str | None = None,
                       feed: LogFeed | None = None, signer: Signer | None = None,
                       **options: object) -> None:
    """The exporter as a service (``hitlflow up``, ``hitlflow exporter``):
    ``<data_dir>/runs/<session_id>/``, telemetry runs in ``<data_dir>/telemetry.sqlite``
    (and OTLP when configured), and the read model (SQLite in ``data_dir``, or
    PostgreSQL at ``read_model_url``); ``feed`` hears every committed batch (SSE in
    ``up``); ``signer`` signs each log's head (``checkpoint``; its verifier key goes
    to ``<data_dir>/checkpoint.pub``). The entry point builds the client and loads
    the key; ``options`` go to :class:`Exporter`."""
    from observation.telemetry.hook import start_telemetry

    runs = data_dir / "runs"
    if signer is not None:
        await asyncio.to_thread(publish_verifier, data_dir, signer.verifier())
    telemetry = await asyncio.to_thread(start_telemetry, data_dir)
    store = await asyncio.to_thread(start_read_model, data_dir, runs, read_model_url)
    # One writer thread for the read model: a round's batches in one transaction; the
    # feed hears a batch after it (``read_model/writer.py``).
    writer = GroupWriter(store) if store is not None else None

    def observers(session_id: str) -> LogObserver | None:
        sse = feed.observer(session_id) if feed is not None else None
        found = [telemetry.observer(session_id),
                 ReadModelObserver(session_id, writer) if writer is not None else None,
                 AfterReadModel(sse, writer) if sse is not None and writer is not None
                 else sse]
        return Tee(found) if any(found) else None

    exporter = Exporter(client, runs, observers=observers, signer=signer,
                        **options)  # type: ignore[arg-type]
    if feed is not None:
        feed.want = exporter.wake
    try:
        await exporter.run(stop, wakeups)
    finally:
        if feed is not None:
            feed.want = LogFeed.nobody
        await asyncio.to_thread(telemetry.close)
        if writer is not None:
            await asyncio.to_thread(writer.close)  # what is pending, written
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
