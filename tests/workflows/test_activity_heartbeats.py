"""Every activity heartbeats, with a heartbeat timeout short enough that a lost worker
costs seconds (issue 29, part 3).

The one that did not was ``list_tools``: a worker killed while it listed a session's
tools (or started their servers) stalled the session for the listing's whole 2-minute
timeout. Here the worker is a real process, killed with SIGKILL while its tool server
hangs at start-up (tests/fakes/recording_mcp_server.py, ``hang-start``); the session
goes on on a new worker once the heartbeat timeout fires. How long that takes is a
bench figure (bench/), not an assertion here: the test checks that the timeout is set
and that it is what fired.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType, TimeoutType

from tests.support.mcp_servers import recording_server
from tests.support.sessions import running_worker, start_session, until_file, worker_process
from workflows.activity_calls import LIST_TOOLS_HEARTBEAT
from workflows.config import SessionConfig
from workflows.messages import SessionResult
from workflows.statechart import SessionStatus

_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
_STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED


def tools_then_end(folder: Path) -> SessionConfig:
    return SessionConfig.model_validate({"initial_message": "list them", "agent": {
        "llm": {"provider": "scripted", "responses": [{"text": "finished", "end": True}]},
        "tools": [recording_server(folder).model_dump()]}})


async def test_a_worker_lost_while_listing_tools_costs_the_heartbeat_timeout(
        dev_env, tmp_path):
    client = dev_env.client
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "hang-start").touch()  # the first start of the server hangs
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    with worker_process(client, task_queue):
        h = await start_session(client, tools_then_end(folder), task_queue)
        await until_file(folder / "start-hung")  # inside list_tools, starting the server
    # The worker is gone (SIGKILL) holding the list_tools attempt.
    async with running_worker(client, task_queue):
        # Bounded well below the listing's 2-minute timeout, which a missing heartbeat
        # timeout would wait out.
        result: SessionResult = await asyncio.wait_for(h.result(), 90)
    assert result.status is SessionStatus.SUCCEEDED

    events = [e async for e in h.fetch_history_events()]
    scheduled = [e for e in events if e.event_type == _SCHEDULED and
                 e.activity_task_scheduled_event_attributes.activity_type.name == "list_tools"]
    assert len(scheduled) == 1
    attrs = scheduled[0].activity_task_scheduled_event_attributes
    assert attrs.heartbeat_timeout.ToTimedelta() == LIST_TOOLS_HEARTBEAT
    assert attrs.start_to_close_timeout.ToTimedelta() > LIST_TOOLS_HEARTBEAT
    # The attempt that ran was the second; the first ended by its heartbeat timeout.
    started = next(e.activity_task_started_event_attributes for e in events
                   if e.event_type == _STARTED and
                   e.activity_task_started_event_attributes.scheduled_event_id ==
                   scheduled[0].event_id)
    assert started.attempt == 2
    timeout = started.last_failure.timeout_failure_info
    assert timeout.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT, started.last_failure
