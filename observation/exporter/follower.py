"""Following a session's history as it grows (the service is in ``service.py``).

* :func:`history_pages` — a session's history, every run from the first, chained
  across continue-as-new, a page at a time, optionally waiting for new events;
  :func:`history_events`, the same an event at a time.
* :func:`session_events` — the chained log events of a session straight from
  history, live (what the HTTP/SSE layer streams; the same events the log holds);
  :func:`stream_head` — how far that stream goes now, and whether it is complete.
* :func:`export_session` — mirror one session into ``runs/<session_id>/``,
  resuming after the last line already written (re-mapped and checked, not trusted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.deltas import call_scheduled
from observation.event_types import is_sse
from observation.exporter.chain import Chain
from observation.exporter.lane import Lane, file_lane
from observation.exporter.log import LogError, LogObserver, LogWriter
from observation.exporter.mapping import SessionMapper
from observation.exporter.model import StreamHead
from observation.exporter.note import Signer
from observation.exporter.verify import SNAPSHOT_NAME

SESSION_QUERY = 'WorkflowType="SessionWorkflow"'
log = logging.getLogger("hitlflow.exporter")
#: The history events whose log lines may come with an artifact (an LLM call's or a
#: tool's result: ``activities.py``): a page with one is fed in a thread.
_ACTIVITY_COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
T = TypeVar("T")


class LogDivergedError(LogError):
    """The log on disk is not what this history maps to (another history or mapping)."""


async def first_run_id(client: Client, session_id: str) -> str:
    async for event in client.get_workflow_handle(session_id).fetch_history_events(
            page_size=1):
        a = event.workflow_execution_started_event_attributes
        return a.first_execution_run_id or a.original_execution_run_id
    raise LookupError(f"session {session_id} has no history")


@dataclass
class HistoryCursor:
    """How far a follower read a session's history: the run it reads, the token of
    its next page (at a page's end only) and how many events it took. A follower woken
    after a park carries on from the token, instead of fetching the whole history
    again (work per turn, not per session); where the token no longer holds, the
    history comes again from its first run and the events taken are passed over."""

    run_id: str | None = None
    token: bytes | None = None
    taken: int = 0


async def history_events(
    client: Client, session_id: str, *, follow: bool = False,
    cursor: HistoryCursor | None = None,
) -> AsyncIterator[tuple[HistoryEvent, bool]]:
    """``(event, end_of_page)`` for every history event of every run, in order;
    with a ``cursor`` that read some of it before, the events after those
    (:func:`history_pages`, an event at a time)."""
    async for page in history_pages(client, session_id, follow=follow, cursor=cursor):
        last = len(page) - 1
        for i, event in enumerate(page):
            yield event, i == last


async def history_pages(
    client: Client, session_id: str, *, follow: bool = False,
    cursor: HistoryCursor | None = None,
) -> AsyncIterator[list[HistoryEvent]]:
    """Every run's history, a page at a time as Temporal answers (never empty); with
    ``follow``, each fetch a long-poll that answers once new events come. The
    follower takes a page whole: one wake-up per page, not per event."""
    cursor = cursor if cursor is not None else HistoryCursor()
    if cursor.run_id is not None and cursor.token is not None:
        try:
            async for page in _runs(client, session_id, cursor, follow, 0):
                yield page
            return
        except RPCError as err:  # e.g. the run was reset: read again from the start
            log.info("exporter: %s: carrying on from the last page failed (%s); "
                     "reading the history again", session_id, err)
    cursor.run_id, cursor.token = await first_run_id(client, session_id), None
    async for page in _runs(client, session_id, cursor, follow, cursor.taken):
        yield page


async def _runs(client: Client, session_id: str, cursor: HistoryCursor, follow: bool,
                skip: int) -> AsyncIterator[list[HistoryEvent]]:
    while cursor.run_id:
        it = client.get_workflow_handle(session_id, run_id=cursor.run_id) \
            .fetch_history_events(next_page_token=cursor.token, wait_new_event=follow)
        new_run: str | None = None
        while True:
            await it.fetch_next_page()
            page = list(it.current_page or ())
            token = it.next_page_token
            if page:  # a run's continue-as-new is its last event
                last = page[-1]
                if last.HasField("workflow_execution_continued_as_new_event_attributes"):
                    new_run = last.workflow_execution_continued_as_new_event_attributes \
                        .new_execution_run_id
            if skip:
                page, skip = page[skip:], max(0, skip - len(page))
            if page:
                # the next page's token (where a follower parks); until a page comes,
                # the cursor keeps the one this fetch started from
                cursor.token = token
                cursor.taken += len(page)
                yield page
            if token is None:
                break
        cursor.run_id, cursor.token = new_run, None


async def session_events(
    client: Client, session_id: str, after_seq: int | None = None, *, follow: bool = True,
    only: Callable[[str], bool] | None = is_sse, calls: bool = False,
) -> AsyncIterator[Any]:
    """The session's log events with ``seq > after_seq``, mapped from history (the
    same events, ids and hashes as the log), live until the session ends.

    The SSE feed (``api.http.sse.EventProvider``): by default only the SSE types
    (``execution_state``, ``conversation.state.changed``, ``interaction.*``, ``text``,
    ``tool_result``); ``seq`` (the log's line number) is the SSE id, strictly
    increasing, so ``Last-Event-ID`` resumes (:func:`stream_head` says how far it
    goes now). ``only=None``: every event;
    ``follow=False``: stop at the current end of history; ``calls``: with a
    :func:`~observation.exporter.model.call_scheduled` marker where each LLM call
    was scheduled (not a log line; the SSE stream's ``DeltaGate`` takes it)."""
    mapper, chain = SessionMapper(session_id), Chain()
    async for event, _ in history_events(client, session_id, follow=follow):
        for m in mapper.feed(event):
            e = chain.link(m)
            if e.seq > (after_seq or 0) and (only is None or only(e.type)):
                yield e
        if calls and (call_id := mapper.llm_call_scheduled(event)) is not None:
            yield call_scheduled(call_id)


async def stream_head(client: Client, session_id: str,
                      only: Callable[[str], bool] | None = is_sse) -> StreamHead:
    """The head of :func:`session_events`' stream: one pass over the history as it is
    now. The status is read first, so a finished session's pass sees all of it."""
    status = (await client.get_workflow_handle(session_id).describe()).status
    finished = status not in (None, WorkflowExecutionStatus.RUNNING,
                              WorkflowExecutionStatus.CONTINUED_AS_NEW)
    last = last_event = 0
    async for e in session_events(client, session_id, follow=False, only=None):
        last = e.seq
        if only is None or only(e.type):
            last_event = e.seq
    return StreamHead(last, last_event, finished)


@dataclass(frozen=True)
class ExportResult:
    session_id: str
    written: int
    last_seq: int
    finished: bool
    parked: bool = False  # stopped at a wait for the person (``park`` said so)
    #: A parked export's state (writer closed, mapper and chain as they were): given
    #: back to ``export_session(resume=...)`` it carries on without re-reading the log
    #: or re-mapping the history events it saw.
    state: SessionExport | None = field(default=None, compare=False, repr=False)


#: ``park(run_id, last_event_id)``: asked at a page end while the log says the session
#: waits for the person; True stops the follower there (the caller wakes it later).
Park = Callable[[str, int], Awaitable[bool]]


class SessionExport:
    """Feeds history events into an open :class:`LogWriter`. Lines already in the log
    are re-mapped, not rewritten; the re-mapped event at the old head must hash to
    the old head (else :class:`LogDivergedError`). Sync: the async follower and the
    tests drive it alike. ``lock``: held by each step that touches the writer, so a
    :class:`Committer`'s thread commits between two pages, never within one."""

    def __init__(self, writer: LogWriter, session_id: str) -> None:
        self.w, self.start = writer, writer.last_seq
        self.lock = threading.Lock()
        self.mapper, self.dirty = SessionMapper(session_id), False
        self.chain = writer.chain()  # the log's own format version (v1 stays v1)
        self.fed = 0  # history events fed so far
        self.skip = 0  # history events to pass over (fed before a resume)
        self.cursor = HistoryCursor()  # how far the follower read the history

    def carried_on(self) -> SessionExport:
        """Carry on after :meth:`LogWriter.resume` with the history from
        ``cursor`` on (:func:`history_events` passes over what was fed)."""
        self.start = self.w.last_seq
        return self

    def resumed(self) -> SessionExport:
        """Carry on after :meth:`LogWriter.resume`: the history comes again from its
        start, and the events fed before are passed over (not mapped again)."""
        self.skip, self.start = self.fed, self.w.last_seq
        return self

    def feed(self, event: HistoryEvent, page_end: bool = False) -> None:
        if self.skip:  # seen before the park: the history is fetched again from its start
            self.skip -= 1
            return
        self.fed += 1
        w = self.w
        for m in self.mapper.feed(event):
            e = self.chain.link(m)
            if e.seq > w.last_seq:
                w.append(e, m.artifact, self.chain.line, self.chain.exact)
                self.dirty = True
                continue
            if e.seq == w.last_seq and (e.event_hash, e.line_hash) != (
                    w.last_hash, w.last_line_hash):
                raise LogDivergedError(
                    f"{w.run_dir}: line {e.seq} is not what the history maps to; the "
                    "log was written from another history or mapping version")
            if m.artifact is not None:  # already logged: put back a lost artifact file
                w.write_artifact(m.artifact)
        if w.observer is not None and (call_id := self.mapper.llm_call_scheduled(event)):
            told = getattr(w.observer, "call_scheduled", None)
            if told is not None:  # after the lines before it (the SSE feed)
                told(call_id)
        if page_end and self.dirty:
            w.commit()
            self.dirty = False

    def feed_page(self, events: Iterable[HistoryEvent], commit: bool = True) -> None:
        """Feed a page of history; ``commit``: and commit its lines (else the caller
        does, e.g. a :class:`Committer`, with those of the pages that follow)."""
        with self.lock:
            for event in events:
                self.feed(event)
            if commit:
                self._commit()

    def feed_page_now(self, events: list[HistoryEvent]) -> bool:
        """Feed a page in the calling thread (the follower's event loop: no thread's
        wake-up and hand-back per page) when that cannot block: no commit holds the
        lock and no event in it completes an activity (the only ones whose lines come
        with an artifact file, written and fsynced before its line). False: nothing
        was fed (:meth:`feed_page` in a thread, then)."""
        if any(e.event_type == _ACTIVITY_COMPLETED for e in events) \
                or not self.lock.acquire(blocking=False):
            return False
        try:
            for event in events:
                self.feed(event)
        finally:
            self.lock.release()
        return True

    def commit(self) -> None:
        """Commit the lines fed so far (one fsync; nothing when there are none)."""
        with self.lock:
            self._commit()

    def _commit(self) -> None:
        if self.dirty:
            self.w.commit()
            self.dirty = False

    def write_at_rest(self) -> None:
        """Commit what is fed, then bring the files at rest up to it (on idle, at a
        wait)."""
        with self.lock:
            self._commit()
            self.w.write_at_rest()

    def finish(self) -> ExportResult:
        with self.lock:
            w = self.w
            if self.chain.seq < w.last_seq:
                raise LogDivergedError(f"{w.run_dir}: the log has {w.last_seq} events, the "
                                       f"history maps to {self.chain.seq}")
            w.commit(snapshot=True)
            self.dirty = False
            return ExportResult(w.run_dir.name, w.last_seq - self.start, w.last_seq,
                                w.finished)


class Committer:
    """Group commit for many followers: each hands over its session after appending a
    page (:meth:`commit`) and goes on fetching; a few threads of its own make the
    sessions durable (one fsync each, then the observers), apart from the file lane
    (``lane.py``) that maps and appends a page in a thread. A session handed over
    again before its commit started joins that commit: under load one fsync covers
    every page that came meanwhile, when idle a page is committed at once (no timer,
    no added wait)."""

    def __init__(self, threads: int = 4) -> None:
        self._lane = Lane(threads, "exporter-commit")
        self._lock = threading.Lock()
        self._queued: dict[SessionExport, asyncio.Future[None]] = {}

    def commit(self, export: SessionExport) -> asyncio.Future[None]:
        """The commit of everything ``export`` was fed so far: done once it is
        durable and its observers were told (its error, e.g. ``LogWriteError``)."""
        with self._lock:
            job = self._queued.get(export)
            if job is None:
                job = self._queued[export] = self._lane.run(self._run, export)
        return job

    def _run(self, export: SessionExport) -> None:
        with self._lock:  # started: pages fed from now on go to the next commit
            self._queued.pop(export, None)
        export.commit()

    def close(self) -> None:
        self._lane.close()


_committer: Committer | None = None


def default_committer() -> Committer:
    """The process's committer (one for every follower that is not given one)."""
    global _committer
    if _committer is None:
        _committer = Committer()
    return _committer


def export_history(session_id: str, events: Iterable[HistoryEvent], runs_dir: Path,
                   observer: LogObserver | None = None, signer: Signer | None = None
                   ) -> ExportResult:
    """Export a history already at hand (e.g. a saved JSON history) the same way."""
    with LogWriter(runs_dir / session_id, observer, signer) as w:
        export = SessionExport(w, session_id)
        for event in events:
            export.feed(event)
        return export.finish()


async def _in_thread(fn: Callable[..., T], *args: object) -> T:
    """File I/O (fsync!) off the event loop, in the followers' own threads
    (``lane.py``); a cancel waits for the write in flight,
    so the writer is never closed (and its lock released) under a running write."""
    fut = file_lane().run(fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await fut
        raise


async def export_session(
    client: Client, session_id: str, runs_dir: Path, *, follow: bool = False,
    observer: LogObserver | None = None, park: Park | None = None,
    signer: Signer | None = None, resume: SessionExport | None = None,
    committer: Committer | None = None,
) -> ExportResult:
    """Mirror a session's history into ``runs_dir/<session_id>/`` (until its last
    run closes when ``follow``), resuming after the lines already there;
    ``observer`` (telemetry) is told each line and commit. With ``park``, a
    follower stops once everything up to a wait for the person is written and
    ``park`` agrees (the result says ``parked``). With ``signer``, the files at rest
    end with a signed head (``checkpoint``); a finished log without one is re-mapped
    and signed. ``resume``: a parked result's ``state`` whose writer the caller
    resumed (:meth:`LogWriter.resume`), carried on from where it stopped.

    Each page of history is appended as it comes and handed to ``committer`` (the
    process's by default): the follower fetches the next page meanwhile, and pages
    that come while a commit waits share it. Everything is committed before the files
    at rest are written (on idle, at a wait not answered at once, at the end) and
    before parking."""
    export: SessionExport | None = None
    committer = committer or default_committer()
    committing: asyncio.Future[None] | None = None  # the commit of the pages handed over
    nxt: asyncio.Future[Any] | None = None  # the next page of history, being fetched
    first: asyncio.Future[Any] | None = None  # the first page, fetched beside the open

    async def durable() -> None:
        """Wait for the pages handed over to be committed (their error raised here)."""
        nonlocal committing
        if committing is not None:
            fut, committing = committing, None
            await fut

    cursor = resume.cursor if resume is not None else HistoryCursor()
    pages = history_pages(client, session_id, follow=follow, cursor=cursor).__aiter__()
    if resume is not None:
        export, w = resume.carried_on(), resume.w
    else:
        w = LogWriter(runs_dir / session_id, observer, signer)
    try:
        if resume is None:  # the history's first page is fetched while the log opens
            nxt = first = asyncio.ensure_future(pages.__anext__())
            await _in_thread(w.open)
        if w.finished and not w.checkpoint_due:
            return ExportResult(session_id, 0, w.last_seq, True)
        if export is None:
            export = SessionExport(w, session_id)
            export.cursor = cursor
        # The wait (run, last event id) where parking is to be asked while no event
        # comes: first after a quiet moment, again while refused (visibility not there
        # yet, a task pending), or the follower would hold its long-poll until the
        # person answers.
        park_at: tuple[str, int] | None = None
        handed = False  # a page was just handed over (the next event may be far off)
        while True:
            if nxt is None:
                nxt = asyncio.ensure_future(pages.__anext__())
            quiet = 0.0  # how long no page came just now
            if handed and w.at_rest_stale:  # the files at rest once no page comes a while:
                # at a wait for the person AT_WAIT_QUIET_S (a wait answered sooner, by a
                # person at the inbox or a rule, costs no write), else SNAPSHOT_IDLE_S and
                # at most every snapshot_every_s (a burst of pages waits that long)
                at_wait = export.mapper.pending_request is not None
                timeout = AT_WAIT_QUIET_S if at_wait else max(SNAPSHOT_IDLE_S,
                                                              w.at_rest_due_in)
                done, _ = await asyncio.wait({nxt}, timeout=timeout)
                if not done:
                    quiet = timeout
                    await durable()
                    await _in_thread(export.write_at_rest)
            handed = False
            if park_at is not None and park is not None \
                    and await _park_while_quiet(nxt, park, *park_at, quiet=quiet):
                await durable()
                return replace(await _in_thread(export.finish), parked=True, state=export)
            try:
                page = await nxt
            except StopAsyncIteration:
                break
            finally:
                nxt = None
            park_at = None
            # The next page's long-poll starts now, while this one is appended.
            nxt = asyncio.ensure_future(pages.__anext__())
            if committing is not None and committing.done():
                await durable()  # its error, if any, stops the follower now
            if not export.feed_page_now(page):
                await _in_thread(export.feed_page, page, False)
            if export.dirty:
                fut = committer.commit(export)
                if committing is not None:
                    committing.add_done_callback(_retrieved)  # the new one tells
                committing = fut
            handed = True
            run_id = export.mapper.run_id
            if park is not None and export.mapper.pending_request is not None \
                    and run_id is not None:
                # Asked once no event came for PARK_RETRY_S (_park_while_quiet), not
                # at once: a wait answered within it (a person at the inbox, a rule)
                # costs no describe, no park and no wake.
                park_at = (run_id, page[-1].event_id)
        await durable()
        await _in_thread(export.commit)
        return await _in_thread(export.finish)
    finally:
        if nxt is not None and nxt is first:
            await _take_first_page(nxt)
        elif nxt is not None and not await _stop_polling(nxt) and not nxt.cancelled():
            nxt.exception()  # read: the error that ended the follower came first
        if committing is not None and not committing.done():
            # A cancel waits for the commit in flight: the writer is not closed under it.
            with contextlib.suppress(BaseException):
                await asyncio.shield(committing)
        w.close()


#: How long an export that ends before taking its first page waits for that page.
FIRST_PAGE_WAIT_S = 10.0


async def _take_first_page(nxt: asyncio.Future[Any]) -> None:
    """The first page, asked for beside the log's open, is taken, not cancelled, when
    the export ends before it (a finished log, a log another exporter holds, an open
    that failed): it answers at once (no token, no long-poll), and a cancelled call
    of the client's core outlives the export: a CLI's exit then waited on it forever
    (about 1 run in 50). Cancelled after FIRST_PAGE_WAIT_S (a server gone)."""
    done, _ = await asyncio.wait({nxt}, timeout=FIRST_PAGE_WAIT_S)
    if not done:
        await _stop_polling(nxt)
    elif not nxt.cancelled():
        nxt.exception()  # read: not the export's error


async def _stop_polling(nxt: asyncio.Future[Any]) -> bool:
    """Cancel the long-poll for the next page of history; False when a page came
    first (it is taken then, not dropped: the caller goes on)."""
    if nxt.done():
        return False
    nxt.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await nxt
    return True


def _retrieved(fut: asyncio.Future[None]) -> None:
    """A superseded commit's outcome: the next commit of the same writer raises the
    same error (a failed writer stays failed), so this one is only read."""
    if not fut.cancelled():
        fut.exception()


#: A follower writes the files at rest (``snapshot.json``, ``head``, ``checkpoint``)
#: when no history event came for this long after a page that left them behind the
#: log, and they were written ``SNAPSHOT_EVERY_S`` ago or more (``LogWriter``: by a
#: commit at most that often otherwise; at a wait, at the end, on close).
SNAPSHOT_IDLE_S = 2.0

#: A follower at a wait for the person writes the files at rest once no page came for
#: this long after the page that brought the wait (a wait answered sooner costs none:
#: the answer's pages follow at once).
AT_WAIT_QUIET_S = 0.5

#: A follower at a wait for the person first asks to park once no event came for
#: this long, and again after twice as long, doubling up to ``PARK_RETRY_MAX_S``,
#: while no new event comes (parking is refused while visibility lags).
PARK_RETRY_S = 0.5
PARK_RETRY_MAX_S = 30.0


async def _park_while_quiet(nxt: asyncio.Future[Any], park: Park, run_id: str,
                            last_event_id: int, quiet: float = 0.0) -> bool:
    """Ask ``park`` once no page came for PARK_RETRY_S (``quiet`` of it passed
    already), again now and then until ``nxt`` (the next page of history) comes;
    True (``nxt`` cancelled: its long-poll ends) once it agrees."""
    delay, wait = PARK_RETRY_S, PARK_RETRY_S - quiet
    while True:
        if wait > 0:
            await asyncio.wait({nxt}, timeout=wait)
        if nxt.done():
            return False
        if await park(run_id, last_event_id):
            if not nxt.done():
                nxt.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await nxt
                return True
            return False  # a page came meanwhile: it is taken, not dropped
        delay = wait = min(delay * 2, PARK_RETRY_MAX_S)


def finished_on_disk(run_dir: Path) -> bool:
    """The snapshot says the session ended (it is written only after the last line)."""
    try:
        return json.loads((run_dir / SNAPSHOT_NAME).read_bytes()).get("finished_at") is not None
    except (OSError, ValueError, AttributeError):
        return False
