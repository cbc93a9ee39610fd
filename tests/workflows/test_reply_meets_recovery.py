"""A reply that reaches a session in the same workflow task as a worker's recovery
signal (a person answering while a worker restarts, with someone watching): the
session takes the reply once, and its history replays, so running sessions with
such a history keep working after a worker upgrade."""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowUpdateStage
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.support.sessions import running_worker, start_session, until_status
from workflows.config import SessionConfig
from workflows.journal_carrier import INTERCEPTORS
from workflows.messages import Ack, RecoverInput, ReplyInput
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER


def two_confirms() -> SessionConfig:
    return SessionConfig.model_validate({"initial_message": "go", "agent": {"llm": {
        "provider": "scripted", "responses": [
            {"ecs_request": {"kind": "confirm", "prompt": "first?"}},
            {"ecs_request": {"kind": "confirm", "prompt": "second?"}},
            {"text": "done", "end": True}]}}})


async def test_a_reply_in_the_same_task_as_recovery_is_taken_once_and_replays(
        dev_env, task_queue):
    client = dev_env.client
    async with running_worker(client, task_queue):
        h = await start_session(client, two_confirms(), task_queue)
        snap = await until_status(h, W)
    # No worker now: the signal (in history) and the update wait for the next worker.
    await h.signal("recover", RecoverInput(worker_identity="restarted"))
    update = asyncio.create_task(h.start_update(
        "reply", ReplyInput(request_id=snap.pending.request_id, approve=True),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=Ack))

    async def watch() -> None:  # someone querying the session all along
        while True:
            await h.query("snapshot")

    watcher = asyncio.create_task(watch())
    try:
        async with running_worker(client, task_queue):
            await (await update).result()
            snap = await until_status(h, W)
            assert snap.pending.prompt == "second?"  # the reply was taken, once
            await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id,
                                                       approve=True), result_type=Ack)
            result = await h.result()
    finally:
        watcher.cancel()
    assert result.status == SessionStatus.SUCCEEDED and result.turns == 3
    history = await h.fetch_history()
    kinds = [e.WhichOneof("attributes") for e in history.events]
    signaled = kinds.index("workflow_execution_signaled_event_attributes")
    accepted = kinds.index("workflow_execution_update_accepted_event_attributes")
    # The recovery signal and the reply were handled in one workflow task.
    assert kinds[signaled:accepted].count("workflow_task_completed_event_attributes") == 1
    replayer = Replayer(workflows=[SessionWorkflow], interceptors=INTERCEPTORS,
                        data_converter=pydantic_data_converter)
    replay = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None, replay.replay_failure
