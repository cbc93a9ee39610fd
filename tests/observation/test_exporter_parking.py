"""A session that waits for a person is parked by the exporter (no follower task,
no history long-poll) and woken by what changes it: visibility, an in-process
wake from the API, or the sweep of parked sessions. A parked-and-woken log is
byte-identical to a one-shot export from history."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from observation.exporter import Exporter, Wakeups, export_session, follower, verify_dir
from tests.support.sessions import running_worker, start_session, until
from workflows.config import SessionConfig
from workflows.messages import RecoverInput, ReplyInput
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def two_questions() -> SessionConfig:
    return SessionConfig.model_validate({"initial_message": "go", "agent": {"llm": {
        "provider": "scripted", "responses": [
            {"ecs_request": {"kind": "confirm", "prompt": "first?"}},
            {"ecs_request": {"kind": "confirm", "prompt": "second?"}},
            {"text": "done", "end": True}]}}})


async def eventually(check: Callable[[], bool | Awaitable[bool]], what: str,
                     limit_s: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        ok = check()
        if not isinstance(ok, bool):
            ok = await ok
        if ok:
            return
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


def types(run_dir: Path) -> list[str]:
    log = run_dir / "events.ndjson"
    return [json.loads(x)["type"] for x in log.read_text().splitlines()] if log.exists() else []


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def parked(exporter: Exporter, session_id: str, resolved: int) -> Callable[[], bool]:
    """Parked with ``resolved`` questions answered in its log, and no task left."""
    def check() -> bool:
        return (session_id in exporter.parked and session_id not in exporter.tasks
                and types(exporter.runs_dir / session_id).count("ISSUE_RESOLVED") == resolved)
    return check


async def reply(h: WorkflowHandle, replies: int) -> None:
    snap = await until(h, lambda s: s.status == W and s.replies == replies)
    await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                               approve=True))


@pytest.fixture
async def worker(dev_env) -> AsyncIterator[tuple[Client, str]]:
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(dev_env.client, tq):
        yield dev_env.client, tq


async def running(exporter: Exporter, **kw) -> tuple[asyncio.Task[None], asyncio.Event]:
    stop = asyncio.Event()
    return asyncio.create_task(exporter.run(stop, **kw)), stop


async def same_as_one_shot(client: Client, exporter: Exporter, session_id: str,
                           tmp_path: Path) -> None:
    d = exporter.runs_dir / session_id
    await eventually(lambda: session_id in exporter.done, "never finished")
    again = await export_session(client, session_id, tmp_path / "again")
    assert again.finished and tree(tmp_path / "again" / session_id) == tree(d)
    verify_dir(d)


async def test_parked_while_waiting_and_woken_by_visibility(worker, tmp_path):
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    exporter = Exporter(client, tmp_path / "runs", discover_every_s=0.05,
                        query=f'WorkflowType="SessionWorkflow" AND WorkflowId="{h.id}"')
    task, stop = await running(exporter)
    try:
        await eventually(parked(exporter, h.id, 0), "not parked at the first question")
        await reply(h, 0)  # straight to Temporal: only visibility can tell the exporter
        await eventually(parked(exporter, h.id, 1), "not parked at the second question")
        await reply(h, 1)
        await h.result()
        await same_as_one_shot(client, exporter, h.id, tmp_path)
        assert h.id not in exporter.parked and exporter.fatal is None
    finally:
        stop.set()
        await task


async def test_the_api_wakes_a_parked_session_at_once(worker, tmp_path):
    """Discovery polls once (at start) and never again: only the wake can tell it."""
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    await until(h, lambda s: s.status == W)
    exporter = Exporter(client, tmp_path / "runs", discover_every_s=3600,
                        query=f'WorkflowType="SessionWorkflow" AND WorkflowId="{h.id}"')
    wakeups = Wakeups()
    task, stop = await running(exporter, wakeups=wakeups)
    try:
        await eventually(parked(exporter, h.id, 0), "not parked at the first question")
        await reply(h, 0)
        wakeups(h.id)
        await eventually(parked(exporter, h.id, 1), "not woken by the API")
        await reply(h, 1)
        wakeups(h.id)
        await same_as_one_shot(client, exporter, h.id, tmp_path)
    finally:
        stop.set()
        await task


async def test_the_sweep_catches_what_leaves_the_status_alone(worker, tmp_path):
    """A recover signal (restart.preserve_waiting) keeps the session waiting: no
    visibility change; the sweep of parked sessions finds its history grew."""
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    exporter = Exporter(client, tmp_path / "runs", discover_every_s=0.05,
                        query=f'WorkflowType="SessionWorkflow" AND WorkflowId="{h.id}"')
    task, stop = await running(exporter)
    try:
        await eventually(parked(exporter, h.id, 0), "not parked")
        before = exporter.parked[h.id].history_length
        await h.signal("recover", RecoverInput(worker_identity="test"))
        await eventually(lambda: _grew(h, before), "the recover signal was not handled")
        await exporter.discover()  # visibility shows nothing new: it stays parked
        assert parked(exporter, h.id, 0)()
        assert "restart.preserve_waiting" not in (exporter.runs_dir / h.id /
                                                   "events.ndjson").read_text()
        await exporter.sweep()

        def preserved() -> bool:
            log = (exporter.runs_dir / h.id / "events.ndjson").read_text()
            return "restart.preserve_waiting" in log and parked(exporter, h.id, 0)()

        await eventually(preserved, "the sweep did not wake it")
        await reply(h, 0)
        await reply(h, 1)
        await same_as_one_shot(client, exporter, h.id, tmp_path)
    finally:
        stop.set()
        await task


async def _grew(h: WorkflowHandle, before: int) -> bool:
    desc = await h.describe()
    return desc.history_length > before and not desc.raw_description.HasField(
        "pending_workflow_task")


async def test_a_refused_park_is_asked_again_without_new_history(worker, tmp_path):
    """Visibility lags under load: parking refused at the wait's page end is asked
    again while nothing happens, so a waiting session does not keep its history
    long-poll until the person answers."""
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    await until(h, lambda s: s.status == W)
    asked: list[int] = []

    async def park(run_id: str, last_event_id: int) -> bool:
        asked.append(last_event_id)
        return len(asked) >= 3  # refused twice (as if visibility were behind)

    result = await asyncio.wait_for(export_session(
        client, h.id, tmp_path / "runs", follow=True, park=park), 60)
    assert result.parked and not result.finished
    assert len(asked) == 3 and len(set(asked)) == 1  # no new event: the same wait
    assert types(tmp_path / "runs" / h.id)[-1] == "conversation.state.changed"
    await reply(h, 0)
    await reply(h, 1)
    await h.result()


async def test_a_wait_answered_within_the_quiet_moment_is_not_parked(worker, tmp_path,
                                                                      monkeypatch):
    """Parking is first asked once no event came for PARK_RETRY_S after a wait (here
    made long): waits answered before that cost no describe, no park and no wake; the
    follower goes on to the end and its log is the one-shot export's."""
    monkeypatch.setattr(follower, "PARK_RETRY_S", 3600.0)
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    asked: list[int] = []

    async def park(run_id: str, last_event_id: int) -> bool:
        asked.append(last_event_id)
        return True

    following = asyncio.create_task(export_session(
        client, h.id, tmp_path / "runs", follow=True, park=park))
    for answered in (0, 1):
        await eventually(lambda n=answered: types(tmp_path / "runs" / h.id).count(
            "ISSUE_OPENED") == n + 1, "the wait is not in the log")
        await reply(h, answered)
    result = await asyncio.wait_for(following, 60)
    assert result.finished and not result.parked and asked == []
    await export_session(client, h.id, tmp_path / "again")
    assert tree(tmp_path / "again" / h.id) == tree(tmp_path / "runs" / h.id)


def _writes_at_rest(monkeypatch) -> list[int]:
    """The follower's own writes of the files at rest (on idle, at a wait): the head
    each wrote, in order."""
    written: list[int] = []
    real = follower.SessionExport.write_at_rest

    def counted(self: follower.SessionExport) -> None:
        real(self)
        written.append(self.w.last_seq)

    monkeypatch.setattr(follower.SessionExport, "write_at_rest", counted)
    return written


def head_seq(run_dir: Path) -> int | None:
    try:
        return json.loads((run_dir / "head").read_bytes())["last_seq"]
    except (OSError, ValueError):
        return None


async def _never() -> bool:
    raise AssertionError("parking was asked")


async def test_a_wait_answered_at_once_costs_no_write_at_rest(worker, tmp_path,
                                                              monkeypatch):
    """The files at rest are written at a wait once it is not answered within
    AT_WAIT_QUIET_S (here made long, as the idle delay): waits answered sooner cost no
    snapshot, head or signature; the end writes them, the same as a one-shot export."""
    for name in ("AT_WAIT_QUIET_S", "SNAPSHOT_IDLE_S", "PARK_RETRY_S"):
        monkeypatch.setattr(follower, name, 3600.0)
    written = _writes_at_rest(monkeypatch)
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    following = asyncio.create_task(export_session(
        client, h.id, tmp_path / "runs", follow=True, park=lambda *_: _never()))
    for answered in (0, 1):
        await eventually(lambda n=answered: types(tmp_path / "runs" / h.id).count(
            "ISSUE_OPENED") == n + 1, "the wait is not in the log")
        await reply(h, answered)
    result = await asyncio.wait_for(following, 60)
    assert result.finished and written == []
    assert head_seq(tmp_path / "runs" / h.id) == result.last_seq
    await export_session(client, h.id, tmp_path / "again")
    assert tree(tmp_path / "again" / h.id) == tree(tmp_path / "runs" / h.id)


async def test_a_wait_not_answered_gets_its_files_at_rest_before_any_park(
        worker, tmp_path, monkeypatch):
    """A wait not answered within AT_WAIT_QUIET_S: the files at rest are brought up
    to its last line then, with no park asked yet (here never: PARK_RETRY_S made
    long), so a waiting session's snapshot, head and checkpoint are its whole log."""
    monkeypatch.setattr(follower, "AT_WAIT_QUIET_S", 0.05)
    monkeypatch.setattr(follower, "PARK_RETRY_S", 3600.0)
    written = _writes_at_rest(monkeypatch)
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    run_dir = tmp_path / "runs" / h.id
    following = asyncio.create_task(export_session(
        client, h.id, tmp_path / "runs", follow=True, park=lambda *_: _never()))
    try:
        await eventually(lambda: types(run_dir).count("ISSUE_OPENED") == 1,
                         "the wait is not in the log")
        lines = len(types(run_dir))
        await eventually(lambda: head_seq(run_dir) == lines, "no files at rest at the wait")
        assert written and written[-1] == lines
        snapshot = json.loads((run_dir / "snapshot.json").read_bytes())
        assert snapshot["head"]["last_seq"] == lines
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
    await reply(h, 0)
    await reply(h, 1)
    await h.result()


async def test_followers_at_once_are_bounded(worker, tmp_path, monkeypatch):
    """Each follower holds a history long-poll and Temporal caps them per namespace:
    at most `max_followers` run at once; the others wait for a slot and are exported
    all the same (here each parks at its wait, freeing its slot)."""
    from observation.exporter import follower

    client, tq = worker
    hs = [await start_session(client, two_questions(), tq) for _ in range(3)]
    for h in hs:
        await until(h, lambda s: s.status == W)
    now, most = 0, 0
    real = follower.export_session

    async def counted(*args, **kw):
        nonlocal now, most
        now += 1
        most = max(most, now)
        try:
            return await real(*args, **kw)
        finally:
            now -= 1

    monkeypatch.setattr(follower, "export_session", counted)
    ids = " OR ".join(f'WorkflowId="{h.id}"' for h in hs)
    exporter = Exporter(client, tmp_path / "runs", discover_every_s=0.05, max_followers=1,
                        query=f'WorkflowType="SessionWorkflow" AND ({ids})')
    task, stop = await running(exporter)
    try:
        for h in hs:
            await eventually(parked(exporter, h.id, 0), f"{h.id} not parked")
        assert most == 1
    finally:
        stop.set()
        await task
    for h in hs:
        await reply(h, 0)
        await reply(h, 1)
        await h.result()


class Fetches:
    """Every history page a client asks Temporal for: (workflow id, first event id)."""

    def __init__(self, client: Client) -> None:
        self.pages: list[tuple[str, int]] = []
        service = client.workflow_service
        real = service.get_workflow_execution_history

        async def counted(req, **kw):
            resp = await real(req, **kw)
            if resp.history.events:
                self.pages.append((req.execution.workflow_id, resp.history.events[0].event_id))
            return resp
        self.restore = lambda: setattr(service, "get_workflow_execution_history", real)
        service.get_workflow_execution_history = counted


async def test_a_woken_session_reads_only_the_history_after_its_park(worker, tmp_path):
    """A parked follower keeps its place in the history (the next page's token): woken,
    it asks for the events after those it took, not for the whole history again (the
    work of a wake is the turn's, not the session's)."""
    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    await until(h, lambda s: s.status == W)
    exporter = Exporter(client, tmp_path / "runs", discover_every_s=3600,
                        query=f'WorkflowType="SessionWorkflow" AND WorkflowId="{h.id}"')
    wakeups, fetches = Wakeups(), Fetches(client)
    task, stop = await running(exporter, wakeups=wakeups)
    try:
        await eventually(parked(exporter, h.id, 0), "not parked at the first question")
        for answered in (0, 1):
            await reply(h, answered)
            wakeups(h.id)
            if answered == 0:
                await eventually(parked(exporter, h.id, 1), "not parked again")
        await eventually(lambda: h.id in exporter.done, "never finished")
        firsts = [first for sid, first in fetches.pages if sid == h.id]
        await same_as_one_shot(client, exporter, h.id, tmp_path)
    finally:
        stop.set()
        await task
        fetches.restore()
    # From event 1 twice (the first-run lookup, then the follower's first page), and
    # never again: each wake asks for the events after those it took.
    assert firsts.count(1) == 2, firsts
    assert firsts == sorted(firsts), firsts


async def test_a_token_that_no_longer_holds_reads_the_history_again(worker, tmp_path):
    """A cursor whose token the server refuses falls back to the first run and passes
    over the events it took: the same events, once each."""
    from observation.exporter.follower import HistoryCursor, history_events

    client, tq = worker
    h = await start_session(client, two_questions(), tq)
    await until(h, lambda s: s.status == W)
    cursor = HistoryCursor()
    taken = []
    async for e, end in history_events(client, h.id, follow=True, cursor=cursor):
        taken.append(e.event_id)
        if len(taken) >= 3 and end:
            break  # where a follower parks: at a page's end, the next page's token kept
    assert cursor.token is not None and cursor.taken == len(taken)
    await reply(h, 0)  # history grows past what the cursor took
    await until(h, lambda s: s.status == W and s.replies == 1)
    every = [e.event_id async for e, _ in history_events(client, h.id)]
    cursor.token = b"not a token"
    rest = [e.event_id async for e, _ in history_events(client, h.id, cursor=cursor)]
    assert rest and taken + rest == every
