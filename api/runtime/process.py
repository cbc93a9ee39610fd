"""How every long-running process of hitlflow runs (``up``, ``worker``, ``api``,
``exporter`` and ``up``'s worker child): connecting to Temporal, SIGINT/SIGTERM,
stopping its parts in turn, and leaving.

A process runs its main coroutine with :func:`run`, which ends the process with the
coroutine's exit code by :func:`exit_now`: once the Temporal client has been used, the
SDK's Rust runtime threads can crash CPython's finalization (SIGSEGV/SIGABRT at exit,
temporalio/sdk-python#300), which would turn a clean stop into a non-zero exit code.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn

# Connecting to Temporal: one place, which the HTTP service uses too (api.temporal_connection).
from api.temporal_connection import (
    TemporalConnectError,
    connect,
    connect_args,
    describe_connection,
)

__all__ = ["STOP_TIMEOUT_S", "Signals", "TemporalConnectError", "connect", "connect_args",
           "describe_connection", "exit_now", "first", "run", "say", "serve", "stop_task"]

#: How long a part (the worker, the API, the exporter) may take to stop after Ctrl-C.
STOP_TIMEOUT_S = 30.0


def say(message: str) -> None:
    """A line for the person on stderr."""
    print(message, file=sys.stderr, flush=True)


class Signals:
    """SIGINT/SIGTERM set ``stop``; a second one sets ``force`` (do not wait any more).
    ``announce``: say so on stderr (``up`` and ``worker`` do)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, announce: bool = True) -> None:
        self.stop = asyncio.Event()
        self.force = asyncio.Event()
        self._loop, self._announce = loop, announce
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)

    def _on_signal(self) -> None:
        if self.stop.is_set():
            self.force.set()
            if self._announce:
                say("stopping now")
        else:
            self.stop.set()
            if self._announce:
                say("stopping... (Ctrl-C again to force)")

    def close(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)


async def first(*aws: Awaitable[Any]) -> None:
    """Wait until the first of ``aws`` completes; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def stop_task(task: asyncio.Task[None], stop: asyncio.Event, force: asyncio.Event,
                    what: str, timeout: float = STOP_TIMEOUT_S) -> str | None:
    """Set ``stop``, wait for ``task`` (bounded, cut short by ``force``); return its error."""
    stop.set()
    if not task.done():
        await first(asyncio.shield(task), force.wait(), asyncio.sleep(timeout))
    if not task.done():
        say(f"{what} did not stop in time; cancelling it")
        task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return None
    except Exception as e:
        return f"{what} failed: {type(e).__name__}: {e}"
    return None


def exit_now(code: int) -> NoReturn:
    """Leave without interpreter teardown (see the module's doc); everything is
    stopped and flushed by now."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serving_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop of the processes that serve (the API and the exporter: HTTP, SSE,
    history long-polls, a thread's wake-up per page): uvloop's, whose C loop costs less
    CPU per callback and wake-up than asyncio's (issue 28); None (asyncio's own) where
    uvloop is not installed. Not the worker's: its workflows run on Temporal's loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, int], *, serving: bool = False) -> NoReturn:
    """Run a process's main coroutine, then leave with its exit code (``serving``: on
    :func:`serving_loop`)."""
    with asyncio.Runner(loop_factory=serving_loop() if serving else None) as runner:
        code = runner.run(main)
    exit_now(code)


def serve(body: Callable[[asyncio.Event], Awaitable[None]],
          fails_with: tuple[type[Exception], ...] = ()) -> NoReturn:
    """Run ``body(stop)`` (``stop``: set by SIGINT/SIGTERM) until it returns, then leave
    with 0; or with 1 after ``Error: <it>`` on stderr when it raises one of ``fails_with``."""
    async def main() -> int:
        signals = Signals(asyncio.get_running_loop(), announce=False)
        try:
            await body(signals.stop)
        except fails_with as err:
            say(f"Error: {err}")
            return 1
        finally:
            signals.close()
        return 0

    run(main(), serving=True)
