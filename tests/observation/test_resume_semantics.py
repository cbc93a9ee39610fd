"""Seed 003's resume semantics, honoured by the session workflow: the snapshot
replayed from the log alone says where a session stands (a stable state) and which
work is done; a worker that resumes the session redoes none of that work."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from api.cli.demo_config import demo_config
from observation.exporter import export_session
from observation.exporter.snapshot import LogSnapshot
from observation.exporter.verify import read_lines, verify_lines
from tests.support.sessions import running_worker, start_session, until, until_status
from workflows.journal_carrier import INTERCEPTORS
from workflows.messages import ReplyInput
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def replayed(run_dir: Path, session_id: str) -> dict:
    events = [json.loads(line) for line in (run_dir / "events.ndjson").read_text().splitlines()]
    return LogSnapshot.replay(session_id, events).data


async def test_log_replay_then_resume_redoes_no_completed_work(dev_env, tmp_path):
    client, runs = dev_env.client, tmp_path / "runs"
    notes = tmp_path / "notes"
    notes.mkdir()
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, task_queue):
        h = await start_session(client, demo_config(notes), task_queue)
        snap = await until_status(h, W)
        await export_session(client, h.id, runs)
    # The log alone: a stable state, two completed work items, one waiting for approval.
    before = replayed(runs / h.id, h.id)
    assert before["run_state"] == "waiting_user"
    done = {w["work_item_id"]: w for w in before["work_items"] if w["status"] == "completed"}
    assert [w["action_summary"].split("(")[0] for w in done.values()] == [
        "Call tool write_note", "Call tool write_note"]
    assert [w["contract_status"] for w in before["work_items"]] == [
        "completed", "completed", "waiting"]
    # Resume (a new worker): only the pending work is queued and run.
    async with running_worker(client, task_queue):
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        snap = await until(h, lambda s: s.status == W and s.pending.kind == "confirm")
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        await h.result()
        await export_session(client, h.id, runs)
    after = replayed(runs / h.id, h.id)
    assert after["run_state"] == "succeeded"
    for wid, item in done.items():  # completed before: untouched, not queued again
        assert next(w for w in after["work_items"] if w["work_item_id"] == wid) == item
    keys = [w["idempotency_key"] for w in after["work_items"] if w["idempotency_key"]]
    assert len(keys) == len(set(keys))
    calls = [json.loads(x)["tool"] for x in (notes / ".calls.log").read_text().splitlines()]
    assert calls == ["write_note", "write_note", "delete_note"]
    assert (runs / h.id / "snapshot.json").read_bytes() == LogSnapshot.replay(
        h.id, [json.loads(x) for x in (runs / h.id / "events.ndjson").read_text().splitlines()]
    ).to_bytes()


async def test_forced_full_replay_reexecutes_nothing_cached(dev_env, tmp_path):
    """Seed 003's forced full replay, both ways: (1) the workflow replayed from the
    first history event (what a worker does after a restart or a cache eviction; here
    with Temporal's Replayer and no worker at all) reaches the same end and runs no
    activity again: every tool and LLM result comes from history, the cache; (2) the
    snapshot deleted and rebuilt from the log alone, byte for byte."""
    client, runs = dev_env.client, tmp_path / "runs"
    notes = tmp_path / "notes"
    notes.mkdir()
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, task_queue):
        h = await start_session(client, demo_config(notes), task_queue)
        snap = await until_status(h, W)
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        snap = await until(h, lambda s: s.status == W and s.pending.kind == "confirm")
        await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                   approve=True))
        await h.result()
        await export_session(client, h.id, runs)
    calls = (notes / ".calls.log").read_bytes()
    assert [json.loads(x)["tool"] for x in calls.splitlines()] == [
        "write_note", "write_note", "delete_note"]
    history = await h.fetch_history()
    replayer = Replayer(workflows=[SessionWorkflow], interceptors=INTERCEPTORS,
                        data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
    assert (notes / ".calls.log").read_bytes() == calls  # no tool ran again
    d = runs / h.id
    saved = (d / "snapshot.json").read_bytes()
    (d / "snapshot.json").unlink()
    assert LogSnapshot.replay(h.id, verify_lines(read_lines(d / "events.ndjson"))).to_bytes() \
        == saved
