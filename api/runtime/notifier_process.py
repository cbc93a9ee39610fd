"""``hitlflow up``'s notifier, in a process of its own (when ``HITLFLOW_NOTIFY_CONFIG``
is set): ``hitlflow notifier --stop-on-stdin-eof`` over ``up``'s data directory.

The child stops when its stdin ends, whether ``up`` closed it (stopping) or died.
A notifier that dies (killed, crashed) is started again after a second: everything
it knew is in the read model's database (its position, its outbox, its leases), so
a kill loses nothing (docs/notifications.md). One that exits with 2 (its config
cannot be used) is not: ``up`` checked the config before starting, so that is a
change of the file or the environment while it ran, and it is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from api.runtime.process import say
from api.settings import HitlflowSettings

RESTART_AFTER_S = 1.0
CONFIG_EXIT = 2


class NotifierProcessError(RuntimeError):
    """The notifier cannot run (its config cannot be used)."""


def notifier_argv(settings: HitlflowSettings) -> list[str]:
    argv = [sys.executable, "-m", "api.cli", "notifier", "--data-dir", str(settings.data_dir),
            "--stop-on-stdin-eof"]
    if settings.read_model_url:
        argv += ["--read-model-url", settings.read_model_url]
    return argv


async def run_notifier_process(settings: HitlflowSettings, stop: asyncio.Event) -> None:
    """Keep one notifier child running until ``stop`` is set (then close its stdin and
    wait for it). Raises :class:`NotifierProcessError` when it exits with 2."""
    while not stop.is_set():
        proc = await asyncio.create_subprocess_exec(
            *notifier_argv(settings), stdin=asyncio.subprocess.PIPE,
            start_new_session=True)  # up forwards Ctrl-C: the child never sees it twice
        exited = asyncio.ensure_future(proc.wait())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not exited.done():  # stopping: its stdin ends, it finishes its sends
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(asyncio.shield(exited), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await exited
            return
        code = exited.result()
        if code == CONFIG_EXIT:
            raise NotifierProcessError("the notifier's config cannot be used (its message "
                                       "is above)")
        say(f"the notifier exited (code {code}); starting it again")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RESTART_AFTER_S)
