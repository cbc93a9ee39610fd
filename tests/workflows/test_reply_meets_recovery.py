"""A reply that reaches a session in the same workflow task as a worker's recovery
signal (a person answering while a worker restarts, with someone watching): the
session takes the reply once, and its history replays, so running sessions with
such a history keep working after a worker upgrade."""

from __future__ import annotations

import asyncio

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateStage
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from tests.support.sessions import running_worker, start_session, until_status
from workflows.config import SessionConfig
from workflows.journal_carrier import INTERCEPTORS
from workflows.messages import Ack, RecoverInput, ReplyInput
from workflows.session import SessionWorkflow
from workflows.statechart import SessionStatus

W = SessionStatus.WAITING_USER
ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED


def two_confirms() -> SessionConfig:
    return SessionConfig.model_validate({"initial_message": "go", "agent": {"llm": {
        "provider": "scripted", "responses": [
            {"ecs_request": {"kind": "confirm", "prompt": "first?"}},
            {"ecs_request": {"kind": "confirm", "prompt": "second?"}},
            {"text": "done", "end": True}]}}})


async def until_admitted(client: Client, handle: WorkflowHandle, update_id: str,
                         limit_s: float = 30) -> None:
    """Wait until the server holds the update (admitted: it goes to the next workflow
    task), polling its stage: a worker started before that could take the recovery
    signal in a task of its own, and the update in the next."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace, identity="test",
        update_ref=UpdateRef(workflow_execution=WorkflowExecution(workflow_id=handle.id),
                             update_id=update_id),
        wait_policy=WaitPolicy(lifecycle_stage=ADMITTED))
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        try:
            await client.workflow_service.poll_workflow_execution_update(request)
            return
        except RPCError as err:  # not found: the update's call has not reached it yet
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        assert asyncio.get_running_loop().time() < deadline, "the update was never admitted"
        await asyncio.sleep(0.02)


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
        id="reply-1", wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=Ack))
    await until_admitted(client, h, "reply-1")

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
