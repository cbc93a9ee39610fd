"""The benchmarks (run by hand) still parse their arguments and share their helpers.

Quick: nothing is started; the benchmarks themselves are not tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import exporter_bench
import http_bench
import idle_bench
import kill_bench
import replay_bench
import session_bench
import stack
import steer_bench

from api.runtime.devserver import tuning_args
from api.runtime.worker import SESSION_RUNNER
from workflows.config import SessionConfig


def test_session_bench_arguments() -> None:
    args = session_bench.parse(["-n", "1", "--synchronous", "normal,full"])
    assert (args.n, args.sessions, args.syncs) == (1, 30, ["normal", "full"])
    assert session_bench.parse([]).syncs == [stack.up_synchronous()] == ["full"]
    with pytest.raises(SystemExit):
        session_bench.parse(["--synchronous", "sometimes"])


def test_replay_bench_arguments_and_runners() -> None:
    assert (replay_bench.parse([]).runs, replay_bench.parse(["--reps", "2"]).reps) == (7, 2)
    with pytest.raises(SystemExit):
        replay_bench.parse(["--runs", "0"])
    # The same restrictions as the worker's, so the two differ only in the compiling.
    assert {type(r).__name__ for r in replay_bench.RUNNERS.values()} == {
        "SandboxedWorkflowRunner", "CompiledSandboxRunner"}
    assert all(r.restrictions is SESSION_RUNNER.restrictions
               for r in replay_bench.RUNNERS.values())


def test_reply_segments_from_history_event_times() -> None:
    """Where a reply's time goes: each segment from the events around its acceptance."""
    from temporalio.api.enums.v1 import EventType as T
    from temporalio.api.history.v1 import HistoryEvent

    def ev(kind: int, at_ms: int) -> HistoryEvent:
        e = HistoryEvent(event_type=kind)
        e.event_time.FromMilliseconds(at_ms)
        return e

    history = [ev(T.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, 1_002),
               ev(T.EVENT_TYPE_WORKFLOW_TASK_STARTED, 1_003),
               ev(T.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, 1_008),
               ev(T.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, 1_008),
               ev(T.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 1_008),
               ev(T.EVENT_TYPE_ACTIVITY_TASK_STARTED, 1_009)]
    steps = session_bench.reply_segments(history, [1_000.0])
    assert [steps[k] for k in session_bench.SEGMENTS] == [[2.0], [1.0], [5.0], [1.0]]


def test_http_and_idle_bench_arguments() -> None:
    assert http_bench.parse(["--mode", "read"]).modes == ["read"]
    with pytest.raises(SystemExit):
        http_bench.parse(["--mode", "write"])
    assert idle_bench.parse(["-n", "500"]).n == 500
    with pytest.raises(SystemExit):
        idle_bench.parse(["-n", "50"])  # fewer than --base


def test_shared_helpers() -> None:
    SessionConfig.model_validate(stack.session_body(2))  # a valid session config
    assert stack.pct([3.0], 99) == 3.0 and stack.pct([1.0, 2.0, 3.0], 50) == 2.0
    tuned = stack.sqlite_tuning("full")
    assert "synchronous=full" in tuned and len(tuned) == len(tuning_args())
    merged = http_bench.merge([
        {"lat": {"get": [1.0]}, "requests": 1, "errors": 0, "results": [(1, 1)], "t0": 2, "t1": 3},
        {"lat": {"get": [2.0]}, "requests": 2, "errors": 1, "results": [], "t0": 1, "t1": 4}])
    assert merged["lat"]["get"] == [1.0, 2.0] and (merged["t0"], merged["t1"]) == (1, 4)
    assert merged["requests"] == 3 and merged["errors"] == 1


def test_up_stderr_is_summarised_by_kind() -> None:
    kinds = stack.line_kinds(["exporter: session s-653fa9e4a0e6: limit exceeded",
                              "exporter: session s-0b81769fc18c: limit exceeded", "stopped"])
    assert kinds.most_common(1) == [("exporter: session #: limit exceeded", 2)]


def test_exporter_bench_arguments() -> None:
    args = exporter_bench.parse(["-n", "3", "--turns", "1", "--skip-live"])
    assert (args.n, args.turns, args.skip_live, args.verify_events) == (3, 1, True, 1_000_000)
    assert exporter_bench.parse([]).n == 200
    for bad in (["-n", "0"], ["--poll-ms", "0"], ["--verify-events", "0"], ["--turns", "x"]):
        with pytest.raises(SystemExit):
            exporter_bench.parse(bad)


def test_exporter_bench_synthetic_log_passes_every_check(tmp_path) -> None:
    from observation.exporter.verify import read_lines, verify_lines

    path = tmp_path / "synthetic.ndjson"
    exporter_bench.synthetic_log(path, 250)  # the demo log (89 lines) stretched
    assert [e["seq"] for e in verify_lines(read_lines(path))] == list(range(1, 251))


def test_kill_bench_arguments() -> None:
    assert kill_bench.parse([]).rounds == 5 and kill_bench.parse(["--rounds", "2"]).rounds == 2
    with pytest.raises(SystemExit):
        kill_bench.parse(["--rounds", "0"])


def test_steer_bench_arguments() -> None:
    args = steer_bench.parse(["--rounds", "2", "--hold-s", "5"])
    assert (args.rounds, args.hold_s) == (2, 5.0)
    assert (steer_bench.parse([]).rounds, steer_bench.parse([]).hold_s) == (5, 10.0)
    for bad in (["--rounds", "0"], ["--hold-s", "0"], ["--hold-s", "soon"]):
        with pytest.raises(SystemExit):
            steer_bench.parse(bad)


def test_cold_map_bench_feeds_every_event_once_and_refuses_bad_arguments() -> None:
    import cold_map_bench

    hists = [cold_map_bench.load_history(f.read_text())
             for f in sorted(cold_map_bench.HISTORIES.glob("*.json"))[:3]] * 2
    events = sum(len(e) for _, e in hists)
    assert cold_map_bench.serial(hists)[1] == events
    for page in (1, 3, 1000):  # round-robin pages, a touch between or not: all, once
        assert cold_map_bench.paged(hists, page, bytearray(4096))[1] == events
    assert cold_map_bench.parse(["--page", "5", "--touch-mb", "0"]).page == 5
    for bad in (["--page", "0"], ["--rounds", "0"], ["--touch-mb", "-1"], ["--copies", "x"]):
        with pytest.raises(SystemExit):
            cold_map_bench.parse(bad)


def test_thread_cpu_s_tells_the_main_thread_and_the_core_threads_apart() -> None:
    """up_bench's split of up's CPU: the main thread, the threads named as the Temporal
    core's, and the rest (counted in neither). Here the core's prefix is one only this
    test's busy thread has (this process may hold real Temporal clients' threads)."""
    import ctypes
    import os
    import threading
    import time

    libc = ctypes.CDLL(None)
    stop = threading.Event()

    def spin(name: bytes) -> None:
        libc.prctl(15, name)  # PR_SET_NAME: this thread's comm
        while not stop.is_set():
            sum(range(1000))

    prefix = "hf-test-core"
    pid, before = os.getpid(), stack.thread_cpu_s(os.getpid(), prefix)
    core = threading.Thread(target=spin, args=(prefix.encode(),))
    other = threading.Thread(target=spin, args=(b"not-the-core",))
    try:
        core.start()
        other.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until both threads used some CPU
            after = stack.thread_cpu_s(pid, prefix)
            own = {t.name: stack.cpu_s(pid, t.native_id) for t in (core, other)}
            if after["core"] > before["core"] and own[other.name] > 0:
                break
            stop.wait(0.01)
    finally:
        stop.set()
        core.join()
        other.join()
    assert after["core"] > before["core"] == 0  # the named thread counted as the core's
    assert after["core"] <= own[core.name]  # ... and it alone: not the other one
    assert own[other.name] > 0 and after["main"] >= before["main"]
    assert after["main"] + after["core"] <= stack.cpu_s(pid)


def test_up_bench_compiles_each_trees_packages(tmp_path: Path) -> None:
    """up_bench compiles a tree's packages before its rounds (a fresh baseline worktree
    would otherwise compile lazily imported modules inside its first measured round);
    what is not one of them is left alone."""
    import up_bench

    for name in (*up_bench.PACKAGES, "tests"):
        (tmp_path / name / "inner").mkdir(parents=True)
        (tmp_path / name / "inner" / "mod.py").write_text("X = 1\n")
    up_bench.compile_tree(tmp_path)
    compiled = {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*.pyc")}
    assert compiled == set(up_bench.PACKAGES)


def test_thread_switches_counts_each_threads_sleeps_in_its_group() -> None:
    """up_bench's context switches by thread: a thread named as the core's that goes to
    sleep again and again is counted in ``core``, another one in ``other``, and the
    main thread's own waits in ``main``."""
    import ctypes
    import os
    import queue
    import threading

    libc = ctypes.CDLL(None)
    prefix, pid, rounds = "hf-test-sleep", os.getpid(), 50
    asks: list[queue.SimpleQueue[bool]] = [queue.SimpleQueue(), queue.SimpleQueue()]
    answers: queue.SimpleQueue[bool] = queue.SimpleQueue()

    def sleeper(name: bytes, ask: queue.SimpleQueue[bool]) -> None:
        libc.prctl(15, name)  # PR_SET_NAME
        while ask.get():  # asleep until asked: ping-pong with the main thread
            answers.put(True)

    before = stack.thread_switches(pid, prefix)
    threads = [threading.Thread(target=sleeper, args=(prefix.encode(), asks[0])),
               threading.Thread(target=sleeper, args=(b"not-the-core", asks[1]))]
    for t in threads:
        t.start()
    try:
        for _ in range(rounds):
            for ask in asks:
                ask.put(True)
                answers.get()  # the main thread sleeps until the answer
        during = stack.thread_switches(pid, prefix)  # both threads alive, asleep
    finally:
        for ask in asks:
            ask.put(False)
        for t in threads:
            t.join()
    assert before["core"] == 0  # no thread of this process is named so yet
    assert during["core"] >= rounds // 2  # woken and asleep again each round
    assert during["other"] >= before["other"] + rounds // 2
    assert during["main"] >= before["main"] + rounds // 2
