"""Escalation end to end over HTTP (issue 26) on a stack wired like ``hitlflow up``
(worker, exporter with parking, read model, API with local keys): Ann starts a session
whose question is for her; Carol (an approver, not named) may not answer it nor see it
until the escalation adds her; then the API lists it as waiting for her, says she may
answer, takes her answer, and the log names her. The timers are one and three seconds on
the real dev server: the test waits for what the API shows, never for time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from api.cli.main import app as cli
from tests.api.http_support import HttpStack, confirm_body, eventually, stack_settings
from tests.api.test_who_decides import up_like_stack

TOKEN = "wait-escalation-api-token"


def keys_of(data_dir: Path) -> dict[str, str]:
    keys = {}
    for name in ("ann", "carol"):
        out = CliRunner().invoke(cli, ["people", "add", name, "--role", "approver",
                                       "--data-dir", str(data_dir)])
        assert out.exit_code == 0, out.output
        keys[name] = out.stdout.strip().splitlines()[-1]
    return keys


@pytest.fixture(scope="module")
async def stack(dev_env: WorkflowEnvironment, free_port: Callable[[], int],
                tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[tuple[HttpStack, dict[str, dict[str, str]]]]:
    data_dir = tmp_path_factory.mktemp("wait-escalation")
    settings = stack_settings(dev_env.client, data_dir, "wait-esc", TOKEN).model_copy(
        update={"auth_mode": "local"})
    keys = keys_of(data_dir)
    async with up_like_stack(dev_env.client, settings, free_port()) as s:
        yield s, {who: {"authorization": f"Bearer {k}"} for who, k in keys.items()}


async def test_the_escalated_person_sees_and_answers_only_after_escalation(stack):
    s, as_ = stack
    http = s.http
    r = await http.post("/api/sessions", headers=as_["ann"], json={
        **confirm_body(), "remind_after_s": 1, "escalate_after_s": 3,
        "escalate_to": ["carol"]})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]

    async def as_ann() -> dict:
        got = await http.get(f"/api/sessions/{sid}", headers=as_["ann"])
        assert got.status_code == 200, got.text
        return got.json()

    async def waiting_for_carol() -> set[str]:
        got = await http.get("/api/sessions", headers=as_["carol"],
                             params={"waiting_for": "me", "limit": "1000"})
        assert got.status_code == 200, got.text
        return {x["session_id"] for x in got.json()["sessions"]}

    first = await eventually(as_ann, lambda v: v["status"] == "waiting_user"
                             and v["pending"] is not None, what="the question")
    rid, digest = first["pending"]["request_id"], first["pending"]["digest"]
    if first["pending"].get("escalated_at") is None:  # before T2: not hers
        r = await http.get(f"/api/sessions/{sid}", headers=as_["carol"])
        assert r.status_code == 403 or r.json()["pending"].get("escalated_at"), r.text

    after = await eventually(as_ann, lambda v: (v["pending"] or {}).get("escalated_at")
                             is not None, what="the escalation")
    p = after["pending"]
    assert (p["approvers"], p["escalated_to"]) == (["ann", "carol"], ["carol"])
    assert p["reminded_at"] is not None and p["request_id"] == rid
    assert sid in await eventually(waiting_for_carol, lambda ids: sid in ids,
                                   what="listed for carol")
    r = await http.get(f"/api/sessions/{sid}", headers=as_["carol"])
    assert r.status_code == 200, r.text
    assert r.json()["you"]["may_answer"] is True

    r = await http.post(f"/api/sessions/{sid}/reply", headers=as_["carol"],
                        json={"request_id": rid, "approve": True, "digest": digest})
    assert r.status_code == 202, r.text
    done = await eventually(as_ann, lambda v: v["status"] == "succeeded" or (
        v["status"] == "waiting_user" and v["replies"] == 1), what="the answer taken")
    assert done["replies"] == 1
    log = (await http.get(f"/api/sessions/{sid}/log", headers=as_["ann"])).text
    assert log.count('"type":"ISSUE_REMINDED"') == 1
    assert log.count('"type":"ISSUE_ESCALATED"') == 1
    resolved = [line for line in log.splitlines() if '"type":"ISSUE_RESOLVED"' in line]
    assert len(resolved) == 1 and '"subject":"carol"' in resolved[0]
    # the escalation was for that request only: answered, Carol is no one here again
    r = await http.post(f"/api/sessions/{sid}/reply", headers=as_["carol"],
                        json={"request_id": rid, "approve": True})
    assert r.status_code == 403, r.text
    assert r.json()["error"]["rule"] == "people.approvers"
