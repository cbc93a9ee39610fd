"""The outbox (SQLite, and PostgreSQL once): routing in one transaction, stable ids,
the window, leases, backoff, dead letters and resending, against a real receiver."""

from __future__ import annotations

import asyncio
import json

import pytest

from api.notify.outbox import PositionMoved, message_id
from api.notify.service import Notifier
from observation.read_model import open_store
from observation.read_model.notices import NoticeRow
from tests.api.notify.conftest import (
    fast_settings,
    hook_config,
    now_iso,
    session_notices,
    write_notices,
)
from tests.support.postgres import postgres_url


def notifier(store, tmp_path, config=None, **settings) -> Notifier:
    return Notifier(store, config or hook_config(), fast_settings(**settings), data_dir=tmp_path,
                    base_url="http://127.0.0.1:8000")


async def run_until(n: Notifier, done, limit_s: float = 30) -> None:
    """Run the notifier's loop until ``done()`` holds after a round (bounded)."""
    stop = asyncio.Event()

    def check() -> None:
        if done():
            stop.set()

    await asyncio.wait_for(n.run(stop, on_round=check), limit_s)


def test_message_ids_are_stable_and_distinct():
    a = message_id("s-1:5", "hook", None)
    assert a == message_id("s-1:5", "hook", None) and a.startswith("msg_") and len(a) == 36
    assert len({a, message_id("s-1:5", "hook", "x@y"), message_id("s-1:6", "hook", None),
                message_id("s-1:5", "mail", None)}) == 4


async def test_route_and_deliver_each_notice_once(hook_env, store, tmp_path):
    write_notices(store, session_notices("s-a", 3, end=True))
    n = notifier(store, tmp_path)
    assert n.route_once() == 4 and n.route_once() == 0
    assert n.outbox.counts() == {"pending": 4, "delivered": 0, "dead": 0}
    await run_until(n, lambda: n.outbox.counts()["pending"] == 0)
    assert sorted(hook_env.ids()) == sorted(m["message_id"] for m in n.outbox.messages())
    assert [json.loads(r.body)["type"] for r in hook_env.received] == \
        ["hitlflow.request.opened"] * 3 + ["hitlflow.session.ended"]
    # the same notices again (a rebuild's re-insert) and a second router: nothing new
    write_notices(store, session_notices("s-a", 3, end=True))
    assert notifier(store, tmp_path).route_once() == 0
    assert n.outbox.counts() == {"pending": 0, "delivered": 4, "dead": 0}


def test_notices_older_than_the_window_are_skipped(store, tmp_path, hook_env):
    write_notices(store, session_notices("s-old", 2, at=now_iso(-2 * 86400)))
    write_notices(store, session_notices("s-new", 1))
    n = notifier(store, tmp_path)
    assert n.route_once() == 3
    assert [m["notice_id"].split(":")[0] for m in n.outbox.messages()] == ["s-new"]


def test_a_notice_that_cannot_be_routed_is_skipped_and_the_rest_go(store, tmp_path, hook_env,
                                                                   caplog):
    good = session_notices("s-ok", 1)
    broken = NoticeRow("s-bad:2", "s-bad", 2, "opened", now_iso(),
                       json.dumps({"notice_id": "s-bad:2", "kind": "nonsense"}))
    write_notices(store, [broken, *good])
    n = notifier(store, tmp_path)
    assert n.route_once() == 2
    assert [m["notice_id"] for m in n.outbox.messages()] == [good[0].notice_id]
    assert "notice s-bad:2 cannot be routed" in caplog.text
    assert n.outbox.position() == store.notices(0, 10)[-1]["id"]


def test_two_routers_never_route_a_notice_twice(store, tmp_path, hook_env):
    write_notices(store, session_notices("s-r", 2))
    a, b = notifier(store, tmp_path), notifier(store, tmp_path)
    a.outbox.position(), b.outbox.position()
    b.outbox._position = 0  # b read the position before a moved it
    assert a.route_once() == 2
    with pytest.raises(PositionMoved):
        b.outbox.route(lambda body: b.expand(body), window_s=3600)
    assert b.route_once() == 0  # it reads the position again: nothing left
    assert len(a.outbox.messages()) == 2


def test_a_claim_holds_its_rows_for_the_lease(store, tmp_path, hook_env):
    write_notices(store, session_notices("s-l", 3))
    outbox = notifier(store, tmp_path).outbox
    notifier(store, tmp_path).route_once()
    t = 2_000_000_000.0
    first = outbox.claim("a", 2, 10, now=t)
    assert len(first) == 2
    second = outbox.claim("b", 5, 10, now=t)
    assert len(second) == 1 and second[0][0].message_id not in {m.message_id for m, _ in first}
    assert outbox.claim("c", 5, 10, now=t + 9) == []
    # the lease ran out (its notifier was killed): due again, the same messages
    again = outbox.claim("c", 5, 10, now=t + 10)
    assert sorted(m.message_id for m, _ in again) == sorted(m["message_id"]
                                                           for m in outbox.messages())


def test_backoff_grows_and_stays_inside_the_window(store, tmp_path, hook_env):
    write_notices(store, session_notices("s-b", 1))
    n = notifier(store, tmp_path)
    n.route_once()
    mid = n.outbox.messages()[0]["message_id"]
    t0 = n.outbox.store.query("SELECT created_at, window_until FROM notify_outbox")[0]
    created, until = float(t0[0]), float(t0[1])
    waits = []
    t = created
    for _ in range(6):
        assert n.outbox.failed(mid, "HTTP 500", permanent=False, backoff_s=10,
                               max_backoff_s=100, now=t) == "pending"
        nxt = float(n.outbox.store.query("SELECT next_at FROM notify_outbox")[0][0])
        waits.append(nxt - t)
        t = nxt
    assert 8 <= waits[0] <= 12 and 16 <= waits[1] <= 24 and all(w <= 120 for w in waits)
    # at the window's end: a dead letter, with the last error and the attempts
    assert n.outbox.failed(mid, "HTTP 500", permanent=False, backoff_s=10, max_backoff_s=100,
                           now=until) == "dead"
    (dead,) = n.outbox.dead_letters()
    assert dead["message_id"] == mid and dead["attempts"] == 7
    assert dead["last_error"] == "HTTP 500" and dead["kind"] == "opened"
    assert dead["session_id"] == "s-b" and dead["request_id"] == "s-b.r0"
    assert dead["created_at"].endswith("Z") and dead["dead_at"].endswith("Z")


async def test_a_receiver_that_always_fails_ends_in_dead_letters_then_resend(
        hook_env, store, tmp_path):
    hook_env.mode = "500"
    write_notices(store, session_notices("s-d", 2))
    n = notifier(store, tmp_path, hook_config(window_s=1.0))
    await run_until(n, lambda: n.outbox.counts()["dead"] == 2)
    assert n.outbox.counts() == {"pending": 0, "delivered": 0, "dead": 2}
    assert len(hook_env.received) >= 4  # tried again until the window closed
    ids = {d["message_id"] for d in n.outbox.dead_letters()}
    assert n.outbox.resend("msg_" + "f" * 32) is False
    hook_env.mode = "ok"
    one = sorted(ids)[0]
    assert n.outbox.resend(one) is True and n.outbox.resend(one) is False
    await run_until(n, lambda: n.outbox.counts()["delivered"] == 1)
    assert hook_env.ids()[-1] == one  # the same id as every earlier attempt
    assert n.outbox.resend_dead() == 1
    await run_until(n, lambda: n.outbox.counts()["delivered"] == 2)
    assert n.outbox.dead_letters() == [] and set(hook_env.ids()) == ids
    bodies = {r.webhook_id: set() for r in hook_env.received}
    for r in hook_env.received:
        bodies[r.webhook_id].add(r.body)
    assert all(len(b) == 1 for b in bodies.values())  # every attempt: the same bytes


async def test_a_permanent_failure_is_dead_at_once(hook_env, store, tmp_path):
    hook_env.mode = "400"
    write_notices(store, session_notices("s-p", 1))
    n = notifier(store, tmp_path)
    await run_until(n, lambda: n.outbox.counts()["dead"] == 1)
    assert len(hook_env.received) == 1 and n.outbox.dead_letters()[0]["attempts"] == 1


async def test_a_receiver_down_then_back_gets_every_message(hook_env, store, tmp_path):
    port = hook_env.port
    hook_env.stop()
    write_notices(store, session_notices("s-down", 3))
    n = notifier(store, tmp_path)
    await run_until(n, lambda: n.failures >= 6)  # each tried at least twice
    assert n.outbox.counts()["pending"] == 3
    hook_env.port = port
    hook_env.start()
    await run_until(n, lambda: n.outbox.counts()["delivered"] == 3)
    assert sorted(hook_env.ids()) == sorted(m["message_id"] for m in n.outbox.messages())


async def test_postgres_outbox_routes_claims_and_delivers(hook_env, tmp_path):
    store = open_store(tmp_path, postgres_url())
    try:
        write_notices(store, session_notices("s-pg", 2, end=True))
        n = notifier(store, tmp_path)
        a = notifier(store, tmp_path)
        assert n.route_once() == 3
        claimed = n.outbox.claim("x", 2, 30)
        assert len(claimed) == 2 and len(a.outbox.claim("y", 5, 30)) == 1
        assert n.outbox.claim("z", 5, 30) == []
        for m, _ in claimed:
            n.outbox.delivered(m.message_id)
        assert n.outbox.counts() == {"pending": 1, "delivered": 2, "dead": 0}
        assert n.outbox.failed(claimed[0][0].message_id, "x", permanent=True, backoff_s=1,
                               max_backoff_s=1) == "gone"  # delivered stays delivered
    finally:
        store.close()
