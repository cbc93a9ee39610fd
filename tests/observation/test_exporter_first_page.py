"""An export that ends before it takes the history's first page (fetched beside the
log's open) takes that page rather than cancelling its fetch: a cancelled call of the
Temporal client's core outlives the export, and a CLI's exit then waited on it forever
(`hitlflow log export` of a log another exporter holds, or of a finished log, hung at
exit about 1 run in 50)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from observation.exporter import LogWriter, export_session, follower
from observation.exporter.log import LogLockedError


class FirstPage:
    """``history_pages`` whose first page comes when ``release`` is set; records
    whether its fetch was cancelled or completed."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked = asyncio.Event()
        self.outcome: str | None = None

    def __call__(self, client: Any, session_id: str, **kw: Any) -> FirstPage:
        return self

    def __aiter__(self) -> FirstPage:
        return self

    async def __anext__(self) -> list[Any]:
        self.asked.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.outcome = "cancelled"
            raise
        self.outcome = "taken"
        raise StopAsyncIteration  # no page: nothing of it is needed here


async def test_a_log_another_exporter_holds_takes_the_first_page_not_cancels_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fetch = FirstPage()
    monkeypatch.setattr(follower, "history_pages", fetch)
    held = LogWriter(tmp_path / "s-held").open()  # the lock a live exporter holds
    try:
        export = asyncio.create_task(export_session(None, "s-held", tmp_path))  # type: ignore[arg-type]
        await fetch.asked.wait()
        # the open failed (locked); the export waits for the page it asked for
        done, _ = await asyncio.wait({export}, timeout=0)
        assert not done and fetch.outcome is None
        fetch.release.set()
        with pytest.raises(LogLockedError):
            await export
    finally:
        held.close()
    assert fetch.outcome == "taken"


async def test_a_first_page_that_never_comes_is_cancelled_after_a_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fetch = FirstPage()
    monkeypatch.setattr(follower, "history_pages", fetch)
    monkeypatch.setattr(follower, "FIRST_PAGE_WAIT_S", 0.0)  # a server gone
    held = LogWriter(tmp_path / "s-held").open()
    try:
        with pytest.raises(LogLockedError):
            await export_session(None, "s-held", tmp_path)  # type: ignore[arg-type]
    finally:
        held.close()
    assert fetch.outcome == "cancelled"
