"""The exporter's own threads for file work (``observation/exporter/lane.py``): calls
come back on the caller's loop with their result or error, run side by side up to
the lane's size, in order of arrival, and ``close`` lets what was queued finish."""

from __future__ import annotations

import asyncio
import threading

import pytest

from observation.exporter.lane import Lane, file_lane


async def test_results_and_errors_come_back_on_the_callers_loop():
    lane = Lane(2, "t")
    try:
        loop = asyncio.get_running_loop()
        assert await lane.run(lambda a, b: a + b, 2, 3) == 5
        value, name = await lane.run(lambda: (7, threading.current_thread().name))
        assert value == 7 and name.startswith("t_") and name != threading.current_thread().name
        with pytest.raises(KeyError, match="missing"):
            await lane.run({}.__getitem__, "missing")
        fut = lane.run(int, "12")
        assert fut.get_loop() is loop and await fut == 12
    finally:
        lane.close()


async def test_calls_run_side_by_side_up_to_the_lanes_size():
    # Three calls that each wait for all three: they can only finish together, which
    # they do on three threads; the lane's threads are started once, at the first call.
    lane = Lane(3, "wide")
    barrier = threading.Barrier(3, timeout=30)
    try:
        names = await asyncio.gather(*(lane.run(lambda: (barrier.wait(),
                                                         threading.current_thread().name)[1])
                                       for _ in range(3)))
        assert sorted(names) == ["wide_0", "wide_1", "wide_2"]
    finally:
        lane.close()


async def test_one_thread_runs_calls_in_order_of_arrival():
    lane, seen = Lane(1, "one"), []
    try:
        await asyncio.gather(*(lane.run(seen.append, i) for i in range(50)))
        assert seen == list(range(50))
    finally:
        lane.close()


async def test_a_cancelled_call_still_runs_and_the_lane_goes_on():
    lane, gate, ran = Lane(1, "c"), threading.Event(), threading.Event()
    try:
        first = lane.run(gate.wait, 30)
        second = lane.run(ran.set)
        second.cancel()  # its caller stopped waiting: the call is not stopped
        gate.set()
        assert await first is True
        assert await asyncio.to_thread(ran.wait, 30)
        assert await lane.run(lambda: "still here") == "still here"
    finally:
        lane.close()


async def test_close_finishes_what_was_queued_then_refuses():
    # The first call closes the lane while five more wait in its queue: they still run.
    lane, done = Lane(1, "q"), []
    futs = [lane.run(lambda: lane.close())] + [lane.run(done.append, i) for i in range(5)]
    await asyncio.gather(*futs)
    assert done == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="the q lane is closed"):
        lane.run(done.append, 5)
    await asyncio.to_thread(lane.close)  # again: waits for the thread to stop
    assert done == [0, 1, 2, 3, 4] and not any(t.is_alive() for t in lane._threads)


def test_a_lane_needs_a_thread():
    with pytest.raises(ValueError, match="at least one thread"):
        Lane(0, "none")


def test_the_followers_lane_is_one_per_process():
    assert file_lane() is file_lane() and file_lane().size >= 4
