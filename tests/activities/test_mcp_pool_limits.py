"""The pool's bounds against real stdio servers: idle close, the cap, and races.

Idleness is driven by an injected clock and explicit ``close_idle`` sweeps, so
no test waits for the idle time to pass; only the reaper test waits (about a
second) for the real sweep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from activities.mcp.pool import McpClientPool, McpPoolFullError, McpTransportError
from tests.support.mcp_servers import executions, gone, hanging_server, notes_server, server_pid


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def eventually(check: Callable[[], bool], limit_s: float = 20) -> None:
    """Wait (bounded) until ``check`` holds, e.g. a hanging call reached its server."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not check():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def write(pool: McpClientPool, folder: Path, name: str = "n", key: str | None = None):
    return pool.call_tool(notes_server(folder), "write_note", {"name": name, "content": name}, key)


async def test_idle_server_closes_its_process_and_restarts_on_the_next_call(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hitlflow.mcp")
    clock = Clock()
    async with McpClientPool(idle_s=300, clock=clock) as pool:
        await write(pool, tmp_path, "before")
        pid = server_pid(tmp_path)

        clock.now += 299
        assert await pool.close_idle() == 0
        assert not gone(pid)

        clock.now += 1
        assert await pool.close_idle() == 1
        assert gone(pid)
        assert pool.live_servers == 0
        assert "MCP server 'notes' closed after 300 s idle" in caplog.text

        result = await pool.call_tool(notes_server(tmp_path), "read_note", {"name": "before"})
        assert result.text == "before"
        assert pool.sessions_started == 2
        assert server_pid(tmp_path) != pid
        assert caplog.text.count("MCP server 'notes' starting (python") == 2


async def test_a_server_with_a_call_in_flight_is_not_idle(tmp_path):
    clock = Clock()
    async with McpClientPool(idle_s=300, clock=clock) as pool:
        call = asyncio.create_task(
            pool.call_tool(hanging_server(tmp_path), "launch", {"name": "x"})
        )
        await eventually(lambda: (tmp_path / "launches.log").exists())

        clock.now += 10_000
        assert await pool.close_idle() == 0
        assert pool.live_servers == 1

        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # Idle time counts from the end of the last call, not its start.
        assert await pool.close_idle() == 0
        clock.now += 300
        assert await pool.close_idle() == 1
        assert pool.live_servers == 0


async def test_at_the_cap_the_least_recently_used_idle_server_is_evicted(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hitlflow.mcp")
    clock = Clock()
    a, b, c = (tmp_path / d for d in "abc")
    for d in (a, b, c):
        d.mkdir()
    async with McpClientPool(max_servers=2, clock=clock) as pool:
        await write(pool, a)
        clock.now += 1
        await write(pool, b)
        clock.now += 1
        await write(pool, a, "again")  # a is now the most recently used
        pid_a, pid_b = server_pid(a), server_pid(b)

        clock.now += 1
        await write(pool, c)

        assert gone(pid_b) and not gone(pid_a) and not gone(server_pid(c))
        assert (pool.evicted, pool.live_servers, pool.sessions_started) == (1, 2, 3)
        assert "evicted: the pool is at its cap of 2 live servers" in caplog.text
        assert "HITLFLOW_MCP_MAX_SERVERS" in caplog.text


async def test_a_busy_pool_at_the_cap_fails_after_a_bounded_wait_without_sending(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    async with McpClientPool(max_servers=1, slot_wait_s=0.3) as pool:
        hang = asyncio.create_task(
            pool.call_tool(hanging_server(tmp_path), "launch", {"name": "x"})
        )
        await eventually(lambda: (tmp_path / "launches.log").exists())

        with pytest.raises(McpPoolFullError) as caught:
            await write(pool, notes, key="k1")

        assert isinstance(caught.value, McpTransportError)  # so the activity retries
        message = str(caught.value)
        assert "cap of 1 MCP servers" in message and "HITLFLOW_MCP_MAX_SERVERS" in message
        assert "not sent" in message
        assert pool.sessions_started == 1  # the notes server was never started
        assert executions(notes) == []
        hang.cancel()
        await asyncio.gather(hang, return_exceptions=True)


async def test_a_busy_pool_at_the_cap_waits_for_a_server_to_go_idle(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    async with McpClientPool(max_servers=1, slot_wait_s=60) as pool:
        hang = asyncio.create_task(
            pool.call_tool(hanging_server(tmp_path), "launch", {"name": "x"})
        )
        await eventually(lambda: (tmp_path / "launches.log").exists())
        waiter = asyncio.create_task(write(pool, notes, key="k1"))
        await eventually(lambda: pool.waiting == 1)
        assert not waiter.done()

        hang.cancel()  # the hanging server goes idle: the waiter evicts it
        await asyncio.gather(hang, return_exceptions=True)
        result = await waiter

        assert not result.is_error
        assert [c["key"] for c in executions(notes)] == ["k1"]
        assert (pool.evicted, pool.live_servers, pool.sessions_started) == (1, 1, 2)


async def test_calls_racing_an_idle_close_each_run_exactly_once(tmp_path):
    """Each round starts an at-most-once call and an idle sweep in the same tick,
    alternating which runs first: sweep first closes the idle server (the call
    starts a fresh one); call first counts itself in flight (the sweep spares it)."""
    async with McpClientPool(idle_s=0) as pool:
        server = notes_server(tmp_path)
        results, closed = [], []
        for i in range(10):
            call = pool.call_tool(server, "append_note", {"name": "log", "text": f"{i}\n"}, f"k{i}")
            if i % 2 == 0:  # tasks start in creation order
                sweep, task = asyncio.create_task(pool.close_idle()), asyncio.create_task(call)
            else:
                task, sweep = asyncio.create_task(call), asyncio.create_task(pool.close_idle())
            results.append(await task)
            closed.append(await sweep)

        assert [r.is_error for r in results] == [False] * 10
        assert [c["key"] for c in executions(tmp_path)] == [f"k{i}" for i in range(10)]
        assert (tmp_path / "log.note").read_text() == "".join(f"{i}\n" for i in range(10))
        # Rounds 2, 4, 6 and 8 closed the server the round before had used.
        assert closed == [0, 0, 1, 0, 1, 0, 1, 0, 1, 0]
        assert pool.sessions_started == 5


async def test_sessions_with_distinct_dirs_never_run_more_than_the_cap(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hitlflow.mcp")
    folders = [tmp_path / f"s{i}" for i in range(8)]
    for d in folders:
        d.mkdir()
    async with McpClientPool(max_servers=2) as pool:
        results = await asyncio.gather(*(write(pool, d, key=d.name) for d in folders))

        assert [r.is_error for r in results] == [False] * 8
        assert all([c["key"] for c in executions(d)] == [d.name] for d in folders)
        assert pool.sessions_started == 8 and pool.live_servers <= 2
        assert pool.evicted == 6  # one per start beyond the cap, none to spare
        assert sum(not gone(server_pid(d)) for d in folders) <= 2
        starts = [r.getMessage() for r in caplog.records if "starting" in r.getMessage()]
        assert len(starts) == 8
        assert all(m.endswith(("1 of at most 2 live", "2 of at most 2 live")) for m in starts)
    assert all(gone(server_pid(d)) for d in folders)


async def test_the_reaper_closes_idle_servers_and_stops_with_the_pool(tmp_path):
    pool = McpClientPool(idle_s=0)  # swept every second
    await write(pool, tmp_path)
    pid = server_pid(tmp_path)
    reaper = pool._reaper
    assert reaper is not None and not reaper.done()

    await eventually(lambda: pool.closed_idle == 1, limit_s=10)
    await eventually(lambda: gone(pid), limit_s=10)
    await eventually(reaper.done, limit_s=5)  # nothing left to watch

    await write(pool, tmp_path)
    assert pool._reaper is not None and not pool._reaper.done()
    await pool.aclose()
    assert pool._reaper is None and gone(server_pid(tmp_path))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"max_servers": 0}, "max_servers"), ({"idle_s": -1}, "idle_s"),
     ({"slot_wait_s": -1}, "slot_wait_s")],
)
def test_nonsense_limits_are_refused(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        McpClientPool(**kwargs)
