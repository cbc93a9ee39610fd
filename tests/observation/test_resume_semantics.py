"""Seed 003's resume semantics, honoured by the session workflow: the snapshot
replayed from the log alone says where a session stands (a stable state) and which
work is done; a worker that resumes the session redoes none of that work."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from api.demo import demo_config
from observation.exporter import export_session
from observation.exporter.snapshot import Snapshot
from tests.support.sessions import running_worker, start_session, until, until_status
from workflows.messages import ReplyInput
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def replayed(run_dir: Path, session_id: str) -> dict:
    events = [json.loads(line) for line in (run_dir / "events.ndjson").read_text().splitlines()]
    return Snapshot.replay(session_id, events).data


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
    assert (runs / h.id / "snapshot.json").read_bytes() == Snapshot.replay(
        h.id, [json.loads(x) for x in (runs / h.id / "events.ndjson").read_text().splitlines()]
    ).to_bytes()
