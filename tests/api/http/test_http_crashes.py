"""Killed workers and the HTTP answers to replies: a client can trust them (issue 29).

The worker runs as its own process (``hitlflow worker``) and is killed with SIGKILL
while the session waits for the person. A second "worker" then takes the session's
workflow task and dies holding it (it polls the task queue through Temporal's own API
and never answers), so the task times out: exactly what a worker killed in the middle
of a task leaves behind. Three clients reply meanwhile, each resending on 503 with
the same ``Idempotency-Key`` and stopping on 202 or 409: the right answer twice (two
people, two keys) and an answer naming another request.

What must hold: a reply sent while the task is being retried after the lost worker is
a 503 with ``Retry-After`` and its key, never a 409 ``session_stuck`` (the bug: the
task's second attempt was taken for a stuck session, and the "refused" reply was
applied a moment later); the session is not shown as stuck; every reply answered 409
is absent from the session's history and its log; every 202 is there exactly once,
and resending it with its key answers the same 202 again, with no second effect.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import httpx
from temporalio.api.enums.v1 import EventType, TaskQueueKind, TimeoutType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import PollWorkflowTaskQueueRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from api.http.app import create_app
from api.http.deps import ApiTuning
from tests.api.http_support import (
    AUTH,
    confirm_body,
    error_of,
    eventually,
    serve,
    session_until,
    stack_settings,
    waiting,
)
from tests.support.sessions import forget_worker, running_exporter, worker_process

_UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
_TASK_TIMED_OUT = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT


async def _take_and_die(client: Client, task_queue: str) -> None:
    """A worker that takes the next workflow task of ``task_queue`` and is lost with
    it: it never completes nor fails it, so Temporal times the task out."""
    while True:  # a long poll may come back empty
        task = await client.workflow_service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(
                namespace=client.namespace, identity="lost-worker",
                task_queue=TaskQueue(name=task_queue,
                                     kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL)))
        if task.task_token:
            return


async def _send_until_sure(http: httpx.AsyncClient, path: str, body: dict, key: str,
                           answers: list[int]) -> httpx.Response:
    """A client that trusts the answers: resend on 503 with the same key, stop on
    anything else (``answers``: every status it got, in order)."""
    while True:
        r = await http.post(path, json=body, headers={"Idempotency-Key": key})
        answers.append(r.status_code)
        assert r.headers.get("idempotency-key") == key, r.headers
        if r.status_code != 503:
            return r
        err = error_of(r)
        assert err["idempotency_key"] == key and int(r.headers["retry-after"]) >= 1, r.text
        assert err["code"] in {"worker_unavailable", "session_recovering"}, r.text
        await asyncio.sleep(0.1)  # a client's pacing of its resends, not a wait


async def _history(client: Client, sid: str) -> list:
    return [e async for e in client.get_workflow_handle(sid).fetch_history_events()]


def _accepted_update_ids(events: list) -> list[str]:
    return [e.workflow_execution_update_accepted_event_attributes.accepted_request.meta
            .update_id for e in events if e.event_type == _UPDATE_ACCEPTED]


def _log_sources_with(log: Path, marker: str) -> set[str]:
    """The history events (``<run>:<event id>`` of the lines' ``event_id``) whose log
    lines carry ``marker`` (one history event becomes several lines)."""
    return {json.loads(line)["event_id"].rsplit(":", 1)[0]
            for line in log.read_text().splitlines() if marker in line}


async def test_replies_across_a_killed_worker_are_answered_truthfully(
        dev_env: WorkflowEnvironment, free_port: Callable[[], int], tmp_path: Path):
    client = dev_env.client
    settings = stack_settings(client, tmp_path, "crash")
    tq = settings.task_queue
    app = create_app(settings, tuning=ApiTuning(query_timeout_s=2.0, update_timeout_s=2.0))
    async with running_exporter(client, tmp_path, tq), \
            serve(app, free_port()) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:
        with worker_process(client, tq):
            r = await http.post("/api/sessions", json=confirm_body(
                {"text": "anything else?"}))
            assert r.status_code == 201, r.text
            sid = r.json()["session_id"]
            view = await session_until(http, sid, waiting("confirm"), consistency="live")
        # The worker is gone (SIGKILL). Another takes the next task and is lost with it
        # (at once: not after the killed worker's sticky queue timed it out first).
        await forget_worker(client, client.get_workflow_handle(sid))
        rid = view["pending"]["request_id"]
        path = f"/api/sessions/{sid}/reply"
        lost = asyncio.create_task(_take_and_die(client, tq))
        answers: dict[str, list[int]] = {"x": [], "y": [], "z": []}
        x = asyncio.create_task(_send_until_sure(
            http, path, {"request_id": rid, "approve": True, "comment": "reply-from-x"},
            "crash-x", answers["x"]))
        await asyncio.wait_for(lost, 90)

        def timed_out(events: list) -> bool:  # the lost worker's task timed out
            return any(e.event_type == _TASK_TIMED_OUT and
                       e.workflow_task_timed_out_event_attributes.timeout_type ==
                       TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE for e in events)
        await eventually(lambda: _history(client, sid), timed_out, limit_s=60,
                         what="the lost worker's workflow task timed out")
        desc = await client.get_workflow_handle(sid).describe()
        assert desc.raw_description.pending_workflow_task.attempt >= 2

        # The task is being retried after a lost worker: not stuck, and a reply now is
        # a 503 that can be resent (before: 409 session_stuck, applied a moment later).
        live = (await http.get(f"/api/sessions/{sid}", params={"consistency": "live"}))
        assert live.status_code == 200 and live.json()["stuck"] is None, live.text
        r = await http.post(path, json={"request_id": rid, "approve": True,
                                        "comment": "reply-from-y"},
                            headers={"Idempotency-Key": "crash-y"})
        assert r.status_code == 503, r.text
        assert error_of(r)["idempotency_key"] == "crash-y" == r.headers["idempotency-key"]
        assert int(r.headers["retry-after"]) >= 1
        answers["y"].append(503)
        y = asyncio.create_task(_send_until_sure(
            http, path, {"request_id": rid, "approve": True, "comment": "reply-from-y"},
            "crash-y", answers["y"]))
        z = asyncio.create_task(_send_until_sure(
            http, path, {"request_id": "not-the-pending-one", "approve": True,
                         "comment": "reply-from-z"}, "crash-z", answers["z"]))

        with worker_process(client, tq):  # a worker comes back
            done = {k: await asyncio.wait_for(t, 120)
                    for k, t in (("x", x), ("y", y), ("z", z))}
            final = await session_until(http, sid, lambda s: s["replies"] == 1 and
                                        s["status"] == "waiting_user", consistency="live",
                                        what="the one reply taken")
            # A 202 resent with its key: the same answer, no second effect.
            won = [k for k in ("x", "y") if done[k].status_code == 202]
            assert len(won) == 1, {k: (r.status_code, r.text) for k, r in done.items()}
            again = await http.post(path, json={"request_id": rid, "approve": True,
                                                "comment": f"reply-from-{won[0]}"},
                                    headers={"Idempotency-Key": f"crash-{won[0]}"})
            assert (again.status_code, again.json()) == (202, done[won[0]].json())

        lost_one = "y" if won == ["x"] else "x"
        assert done[lost_one].status_code == 409, done[lost_one].text
        assert error_of(done[lost_one])["code"] == "reply_refused"
        assert done["z"].status_code == 409 and error_of(done["z"])["code"] == "reply_refused"
        assert 503 in answers["y"]  # the case that mattered was resent, not refused
        assert final["replies"] == 1

        # History: exactly one accepted update, the 202's; none of the 409s.
        ids = _accepted_update_ids(await _history(client, sid))
        assert len(ids) == 1 and ids[0].endswith(f":crash-{won[0]}"), ids
        # The log: the 202's reply once; the refused replies never.
        log = tmp_path / "runs" / sid / "events.ndjson"
        await eventually(lambda: asyncio.to_thread(
            lambda: log.exists() and _log_sources_with(log, f"reply-from-{won[0]}")),
            bool, what="the reply in the session's log")
        assert len(_log_sources_with(log, f"reply-from-{won[0]}")) == 1
        assert _log_sources_with(log, f"reply-from-{lost_one}") == set()
        assert _log_sources_with(log, "reply-from-z") == set()
