"""Threads of the exporter's own for its blocking file work (opening a log, appending
a page with an artifact, fsyncs, the files at rest), apart from the event loop's
default pool.

Why not ``asyncio.to_thread``: that pool is the whole process's (in ``up``, the API's
reads use it too), small (``min(32, cores + 4)``) and each call pays for a context
copy, a concurrent future and its wrapping. Followers' work waits on fsyncs, which
must not hold an API read. A :class:`Lane` hands each call to its own threads through
one ``SimpleQueue`` and settles a future of the caller's loop
(``call_soon_threadsafe``): 0.64x ``to_thread``'s CPU per call
(``bench/lane_bench.py``). It did not change the exporter's lag: a session's first
page waits on the burst of starts, not on these threads
(``bench/first_page_bench.py``, docs/performance.md).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class Lane:
    """``threads`` threads (started at the first call) running the calls handed to
    :meth:`run` in order of arrival. :meth:`close` lets the calls queued so far finish,
    then stops the threads; a call after it raises ``RuntimeError``."""

    def __init__(self, threads: int, name: str) -> None:
        if threads < 1:
            raise ValueError("a lane needs at least one thread")
        self.size, self.name = threads, name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` in one of the lane's threads; its result (or error) in a
        future of the running loop. Cancelling the future does not stop the call."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self.name} lane is closed")
            if not self._threads:
                self._start()
            self._jobs.put((loop, fut, fn, args))
        return fut

    def _start(self) -> None:
        for i in range(self.size):
            t = threading.Thread(target=self._work, name=f"{self.name}_{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def _work(self) -> None:
        get = self._jobs.get
        while (job := get()) is not None:
            loop, fut, fn, args = job
            try:
                result, error = fn(*args), None
            except BaseException as err:  # handed to the caller, as to_thread does
                result, error = None, err
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, fut, result, error)
            del job, fut, result, error  # not kept alive while the thread waits

    def close(self) -> None:
        """Finish the calls queued so far, then stop the threads; returns once they
        stopped (again: waits for that too). From one of its own threads: returns at
        once, and that thread goes on with the calls queued before it stops."""
        with self._lock:
            stop = not self._closed
            self._closed = True
            threads = list(self._threads)
        if stop:
            for _ in threads:
                self._jobs.put(None)
        for t in threads:
            if t is not threading.current_thread():
                t.join()


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # cancelled by its caller meanwhile
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


_files: Lane | None = None


def file_lane() -> Lane:
    """The process's lane for followers' file work (closed at exit, after the calls
    queued: a write is never cut short by the interpreter's end)."""
    global _files
    if _files is None:
        _files = Lane(16, "exporter-files")
        atexit.register(_files.close)
    return _files
