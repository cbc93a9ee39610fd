"""Notices in the read model (issue 26): the fold over log lines (pure) and
``rm_notices`` on SQLite and PostgreSQL: written with the batch, the same rows live
and rebuilt, never twice whatever is re-applied, replaced or rebuilt."""

from __future__ import annotations

import json

import pytest

from observation.read_model.notices import NoticeFold
from observation.read_model.sync import rebuild, sync_store
from tests.observation.test_read_model import export, history

SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")


def _kinds(store) -> list[tuple[str, str]]:
    return [(n["notice_id"], n["kind"]) for n in store.notices(0, 1000)]


def test_live_notices_equal_rebuilt_and_never_twice(make_store, tmp_path):
    live, rebuilt = make_store(), make_store()
    runs = tmp_path / "runs"
    for name in SCENARIOS:
        sid, events = history(name)
        export(sid, events, runs, live)
    rebuild(rebuilt, runs)
    found = _kinds(live)
    assert sorted(found) == sorted(_kinds(rebuilt))  # a rebuild goes log by log
    assert sorted((n["notice_id"], json.dumps(n["body"], sort_keys=True))
                  for n in live.notices(0, 1000)) == \
        sorted((n["notice_id"], json.dumps(n["body"], sort_keys=True))
               for n in rebuilt.notices(0, 1000))
    kinds = [k for _, k in found]
    # demo: an approval and a confirm opened, then the end; auto_timeout: decided by its
    # timeout; canceled: ended canceled. A request a rule decided makes none.
    assert kinds.count("opened") == 5 and kinds.count("auto_decided") == 1
    assert kinds.count("ended") == 4
    ended = {n["session_id"]: n["body"]["status"] for n in live.notices(0, 1000)
             if n["kind"] == "ended"}
    assert sorted(ended.values()) == ["canceled", "succeeded", "succeeded", "succeeded"]
    # a rebuild, a full sync and an exporter re-run over the same logs: no new notice
    rebuild(live, runs)
    sync_store(live, runs, every=True)
    sid, events = history("demo")
    export(sid, events, tmp_path / "again", live)
    assert _kinds(live) == found
    ids = [n["id"] for n in live.notices(0, 1000)]
    assert ids == sorted(ids) and live.notices(ids[-1], 10) == []
    assert [n["id"] for n in live.notices(ids[2], 2)] == ids[3:5]  # paged by id


def test_opened_notice_carries_the_request_and_the_session(make_store, tmp_path):
    store = make_store()
    sid, events = history("demo")
    export(sid, events, tmp_path / "runs", store)
    first = store.notices(0, 1)[0]
    body = first["body"]
    assert body["notice_id"] == first["notice_id"] == f"{sid}:{first['seq']}"
    assert body["kind"] == "opened" and body["request_kind"] == "approval"
    assert body["request_id"].startswith(sid) and "delete_note" in body["prompt"]
    assert body["at"] == first["at"] and body["at"].endswith("Z")
    assert body["session_notify"] == [] and body["addressees"] == []


def _line(seq: int, type_: str, **payload) -> dict:
    return {"seq": seq, "type": type_, "ts": f"2026-11-26T10:00:{seq:02d}Z", "payload": payload}


def test_fold_reminder_escalation_expiry_and_what_makes_none():
    fold = NoticeFold("s-1")
    config = {"title": "Deploy", "people": {"owner": "ann", "approvers": ["bob", "group:ops"]},
              "notify": [{"channel": "hook", "on": ["opened", "ended"]}]}
    assert fold.apply(_line(1, "RUN_CREATED", config=config)) is None
    opened = fold.apply(_line(2, "ISSUE_OPENED", issue_id="r1", kind="approval", prompt="go?",
                              digest="sha256:aa", approvers=["bob"], asked={"tool": "x"}))
    assert opened is not None and opened.kind == "opened" and opened.notice_id == "s-1:2"
    reminded = fold.apply(_line(3, "ISSUE_REMINDED", issue_id="r1", kind="approval",
                                approvers=["bob"], reminded_at="t"))
    escalated = fold.apply(_line(4, "ISSUE_ESCALATED", issue_id="r1", kind="approval",
                                 approvers=["bob", "carol@x.org"], escalated_to=["carol@x.org"],
                                 escalated_at="t"))
    assert fold.apply(_line(5, "ISSUE_OPENED", issue_id="r1", kind="approval")) is None
    expired = fold.apply(_line(5, "ISSUE_RESOLVED", issue_id="r1",
                               resolution="interaction.reply.expired"))

    bodies = [json.loads(r.body) for r in (opened, reminded, escalated, expired)]
    assert [b["kind"] for b in bodies] == ["opened", "reminded", "escalated", "expired"]
    assert bodies[0]["title"] == "Deploy" and bodies[0]["owner"] == "ann"
    assert bodies[0]["approvers"] == ["bob", "group:ops"]
    assert bodies[0]["session_notify"] == config["notify"]
    assert bodies[0]["digest"] == "sha256:aa" and bodies[0]["asked"] == {"tool": "x"}
    assert bodies[1]["addressees"] == ["bob"]
    assert bodies[2]["addressees"] == ["bob", "carol@x.org"]
    assert bodies[2]["escalated_to"] == ["carol@x.org"]
    assert bodies[3]["addressees"] == ["bob", "carol@x.org"]  # expired: to whom it was
    # after it is closed, nothing more about it; a rule's decision and a message ask no one
    assert fold.apply(_line(6, "ISSUE_REMINDED", issue_id="r1")) is None
    assert fold.apply(_line(7, "ISSUE_OPENED", issue_id="r2", kind="approval",
                            auto_decision="allow")) is None
    assert fold.apply(_line(8, "ISSUE_OPENED", issue_id="r3", kind="message")) is None
    assert fold.apply(_line(9, "ISSUE_RESOLVED", issue_id="r9", resolution="answered")) is None
    # an answered request makes no notice
    fold.apply(_line(10, "ISSUE_OPENED", issue_id="r4", kind="confirm"))
    assert fold.apply(_line(11, "ISSUE_RESOLVED", issue_id="r4", resolution="answered")) is None
    ended = fold.apply(_line(12, "RUN_FAILED", status="failed", outcome="workflow_failed"))
    assert ended is not None and json.loads(ended.body)["status"] == "failed"


@pytest.mark.parametrize("broken", [
    {"seq": 1, "type": "ISSUE_OPENED", "payload": "not a mapping"},
    {"seq": 2, "type": "ISSUE_OPENED", "payload": {"kind": "approval"}},  # no issue id
    {"seq": 3, "type": "ISSUE_OPENED", "payload": {"issue_id": 7, "kind": "approval"}},
    {"seq": 4, "type": "RUN_CREATED", "payload": {"config": "nonsense"}},
    {"seq": 5, "type": "RUN_CREATED", "payload": {"config": {"people": ["x"], "title": 3}}},
    {"seq": 6, "type": "ISSUE_ESCALATED", "payload": {"issue_id": ["r"]}},
])
def test_fold_broken_lines_make_no_notice_and_change_nothing(broken):
    fold = NoticeFold("s-2")
    assert fold.apply(broken) is None
    assert fold.requests == {} and fold.title == "" and fold.owner is None
