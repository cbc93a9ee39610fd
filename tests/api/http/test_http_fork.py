"""POST /api/sessions/{id}/fork over HTTP (issue 27) on the real stack (worker,
exporter, read model, API with its doors; people added with ``hitlflow people add``):
who may fork, the fork's owner, and every broken input refused with nothing started."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from api.cli.main import app as cli
from observation.exporter.verify import read_head, verify_dir
from tests.api.http_support import (
    chat_body,
    error_of,
    eventually,
    stack_settings,
    waiting,
)
from tests.api.test_who_decides import people_added_with_the_cli, up_like_stack

pytestmark = pytest.mark.slow


def log_of(data_dir: Path, sid: str) -> list[dict]:
    path = data_dir / "runs" / sid / "events.ndjson"
    return [json.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


def first_wait(log: list[dict]) -> int | None:
    """The last line of the task that began the first wait for a message."""
    for i, x in enumerate(log):
        if x["type"] == "RUN_STATE_CHANGED" and x["payload"]["new_state"] == "waiting_user":
            ref = x["event_id"].rsplit(":", 1)[0]
            while i + 1 < len(log) and log[i + 1]["event_id"].rsplit(":", 1)[0] == ref:
                i += 1
            return log[i]["seq"]
    return None


async def test_who_may_fork_and_what_is_refused(dev_env: WorkflowEnvironment,
                                                free_port: Callable[[], int],
                                                tmp_path: Path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    settings = stack_settings(dev_env.client, data_dir, "fork").model_copy(
        update={"auth_mode": "local"})
    keys = people_added_with_the_cli(data_dir)  # ann, bob: approvers; vic: viewer
    ann, bob, vic = ({"authorization": f"Bearer {keys[w]}"} for w in ("ann", "bob", "vic"))
    async with up_like_stack(dev_env.client, settings, free_port()) as stack:
        http = stack.http
        r = await http.post("/api/sessions", headers=ann,
                            json={**chat_body(), "people": {"viewers": ["vic"]}})
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        at = await eventually(lambda: _first_wait(data_dir, sid), lambda v: v is not None,
                              what="the first wait in the log")
        url = f"/api/sessions/{sid}/fork"
        before = sorted(p.name for p in (data_dir / "runs").iterdir())

        async def refused(status: int, code: str, body: object, who: dict = ann,
                          path: str = url) -> str:
            r = await http.post(path, headers=who, json=body)
            assert r.status_code == status, r.text
            err = error_of(r) if status != 403 else r.json()["error"]
            assert err["code"] == code, err
            return err["message"]

        # bad bodies
        for body in ({}, {"at_seq": 0}, {"at_seq": "x"}, {"at_seq": at, "extra": 1},
                     {"at_seq": at, "message": ""}, [at]):
            await refused(422, "validation_error", body)
        # not a point to fork at
        assert "inside a turn" in await refused(409, "not_a_fork_point", {"at_seq": at - 1})
        assert f"nearest fork points: {at}" in await refused(
            409, "not_a_fork_point", {"at_seq": at - 1})
        assert "past the end of the log" in await refused(
            409, "not_a_fork_point", {"at_seq": 10_000})
        # no right: vic may see it but not start sessions; bob may start but not see it
        await refused(403, "forbidden", {"at_seq": at}, who=vic)
        await refused(403, "forbidden", {"at_seq": at}, who=bob)
        r = await http.post("/api/sessions/s-nosuchsession0/fork", headers=ann,
                            json={"at_seq": 1})
        assert r.status_code == 404 and error_of(r)["code"] == "session_not_found", r.text
        assert sorted(p.name for p in (data_dir / "runs").iterdir()) == before  # nothing

        r = await http.post(url, headers=ann, json={"at_seq": at, "message": "hi again"})
        assert r.status_code == 201, r.text
        made = r.json()
        fork = made["session_id"]
        assert r.headers["location"] == f"/api/sessions/{fork}"
        assert (made["forked_from"], made["at_seq"]) == (sid, at)
        assert made["line_hash"] == log_of(data_dir, sid)[at - 1]["line_hash"]

        async def fork_view() -> dict:
            r = await http.get(f"/api/sessions/{fork}", headers=ann)
            return r.json() if r.status_code == 200 else {}
        done = await eventually(fork_view, lambda v: v.get("status") == "succeeded",
                                what="the fork's end")
        assert done["status"] == "succeeded"
        await eventually(lambda: _lines(data_dir, fork),
                         lambda log: bool(log) and log[-1]["type"] == "RUN_COMPLETED",
                         what="the fork's log")
        flog = log_of(data_dir, fork)
        assert flog[0]["type"] == "SESSION_FORKED"
        assert flog[0]["payload"]["parent_session_id"] == sid
        assert flog[1]["payload"]["config"]["people"]["owner"] == "ann"
        # The last line is durable before the files at rest name it (snapshot.json,
        # then head): verified once they do.
        await eventually(lambda: _head(data_dir, fork),
                         lambda head: head is not None and head[0] == len(flog),
                         what="the fork's head at its last line")
        verify_dir(data_dir / "runs" / fork)
        assert done["forked_from"] == {"session_id": sid, "seq": at,
                                       "line_hash": made["line_hash"]}
        # the parent still waits, untouched
        r = await http.get(f"/api/sessions/{sid}", headers=ann)
        assert waiting("message")(r.json()), r.json()
        assert r.json()["forked_from"] is None

        # the same request twice with one Idempotency-Key: one fork, the same answer
        keyed = {**ann, "idempotency-key": "fork-once-1"}
        body = {"at_seq": at, "message": "hi again"}
        first = await http.post(url, headers=keyed, json=body)
        again = await http.post(url, headers=keyed, json=body)
        assert first.status_code == again.status_code == 201, (first.text, again.text)
        assert again.json() == first.json()
        assert again.headers["location"] == first.headers["location"]
        assert first.headers["idempotency-key"] == again.headers["idempotency-key"] \
            == "fork-once-1"
        once = first.json()["session_id"]
        assert once != fork and first.json()["line_hash"] == made["line_hash"]
        run_id = (await dev_env.client.get_workflow_handle(once).describe()).run_id

        async def view_of(s: str) -> dict:
            r = await http.get(f"/api/sessions/{s}", headers=ann)
            return r.json() if r.status_code == 200 else {}
        await eventually(lambda: view_of(once), lambda v: v.get("status") == "succeeded",
                         what="the keyed fork's end")
        # once that fork ended, the resend still answers it and starts nothing
        third = await http.post(url, headers=keyed, json={"at_seq": at})
        assert third.status_code == 201 and third.json() == first.json(), third.text
        assert (await dev_env.client.get_workflow_handle(once).describe()).run_id == run_id
        flog = log_of(data_dir, once)
        assert [x["type"] for x in flog].count("SESSION_FORKED") == 1
        # a broken key: 422 naming the header, nothing started
        before = sorted(p.name for p in (data_dir / "runs").iterdir())
        for bad in ("bad key", "-x", "k" * 129):
            message = await refused(422, "validation_error", body,
                                    who={**ann, "idempotency-key": bad})
            assert "Idempotency-Key" in message, message
        assert sorted(p.name for p in (data_dir / "runs").iterdir()) == before
        # another key: another fork
        other = await http.post(url, headers={**ann, "idempotency-key": "fork-once-2"},
                                json=body)
        assert other.status_code == 201 and other.json()["session_id"] not in (once, fork)

        # the same through the command line, as Ann
        env = {"HITLFLOW_API_URL": stack.url, "HITLFLOW_API_TOKEN": keys["ann"],
               "NO_COLOR": "1", "HITLFLOW_API_PORT": None, "HITLFLOW_DATA_DIR": None}
        out = await asyncio.to_thread(CliRunner().invoke, cli, [
            "session", "fork", sid, "--at", str(at - 1)], env=env)
        assert out.exit_code == 1 and "not_a_fork_point" in out.output, out.output
        assert f"nearest fork points: {at}" in out.output
        out = await asyncio.to_thread(CliRunner().invoke, cli, [
            "session", "fork", sid, "--at", str(at), "--message", "once more", "--json"],
            env=env)
        assert out.exit_code == 0, out.output
        made = json.loads(out.stdout)
        assert (made["forked_from"], made["at_seq"]) == (sid, at)
        out = await asyncio.to_thread(CliRunner().invoke, cli, [
            "session", "fork", sid, "--at", "0"], env=env)
        assert out.exit_code == 2, out.output

        # the parent lists its forks (the read model's lineage) to those who may see
        # them: Ann (their owner) and Vic (a viewer each keeps); the forks list none
        forks = {fork, once, other.json()["session_id"], made["session_id"]}

        async def listed(who: dict) -> dict:
            r = await http.get(f"/api/sessions/{sid}", headers=who)
            assert r.status_code == 200, r.text
            return r.json()
        for who in (ann, vic):
            seen = await eventually(lambda who=who: listed(who),
                                    lambda v: {f["session_id"] for f in v["forks"]} == forks,
                                    what="the parent's forks")
            assert {f["seq"] for f in seen["forks"]} == {at}
        assert (await view_of(fork))["forks"] == []


async def _first_wait(data_dir: Path, sid: str) -> int | None:
    return first_wait(log_of(data_dir, sid))


async def _lines(data_dir: Path, sid: str) -> list[dict]:
    return log_of(data_dir, sid)


async def _head(data_dir: Path, sid: str) -> tuple[int, str] | None:
    return read_head(data_dir / "runs" / sid)
