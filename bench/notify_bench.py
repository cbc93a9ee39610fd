"""Benchmark: the notifier's two crash scenarios of issue 26, at full size.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/notify_bench.py                 # 100 sessions, 20 kills, 120 s down
    .venv/bin/python bench/notify_bench.py -n 20 --kills 5 --down-s 20   # quick

It starts ``hitlflow up`` with ``HITLFLOW_NOTIFY_CONFIG`` naming one webhook channel
(every opened request) to a receiver in this process that verifies each request with
the ``standardwebhooks`` package's own verifier, then:

1. **kills**: starts ``-n`` sessions through the HTTP API, each asking two
   confirmations (the second opens once the first is answered, which this bench does
   at once), while the notifier's process is killed with SIGKILL ``--kills`` times at
   random points (``up`` starts it again after a second); then waits until every
   message of the outbox has arrived. Prints: messages expected (the outbox's, one per
   opened request), received (distinct ids), lost, duplicates, and whether every
   duplicate carried the same id and bytes.
2. **down**: the receiver goes down; ``-n`` more sessions open a request each; after
   ``--down-s`` seconds it comes back on the same port. Prints: received in the end,
   lost, the seconds from its return until the last message arrived (the backoff is
   capped at ``--max-backoff-s``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from stack import api_headers, session_body, start_up

from api.notify.outbox import Outbox
from observation.read_model.sqlite import SqliteStore
from tests.api.notify.webhook_receiver import Receiver

SECRET_ENV, URL_ENV = "BENCH_HOOK_SECRET", "BENCH_HOOK_URL"


def notifier_pids(up_pid: int) -> list[int]:
    children = Path(f"/proc/{up_pid}/task/{up_pid}/children").read_text().split()
    out = []
    for pid in children:
        try:
            if b"api.cli\x00notifier\x00" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(int(pid))
        except FileNotFoundError:
            pass
    return out


async def one_notifier(up_pid: int, not_pid: int | None = None, limit_s: float = 60) -> int:
    deadline = time.monotonic() + limit_s
    while True:
        found = [p for p in notifier_pids(up_pid) if p != not_pid]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise SystemExit("up did not start its notifier again")
        await asyncio.sleep(0.05)


async def start(http: httpx.AsyncClient, n: int, confirms: int) -> list[str]:
    gate = asyncio.Semaphore(16)

    async def one() -> str:
        async with gate:
            r = await http.post("/api/sessions", json=session_body(confirms))
            return r.raise_for_status().json()["session_id"]

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def answer_first(http: httpx.AsyncClient, sid: str) -> None:
    """Answer the session's first confirmation once it waits (its second then opens)."""
    deadline = time.monotonic() + 300
    while True:
        s = (await http.get(f"/api/sessions/{sid}")).raise_for_status().json()
        if s.get("pending"):
            r = await http.post(f"/api/sessions/{sid}/reply", json={
                "request_id": s["pending"]["request_id"], "approve": True})
            r.raise_for_status()
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"session {sid} never waited")
        await asyncio.sleep(0.2)


def outbox_ids(data: Path) -> tuple[set[str], dict[str, int]]:
    store = SqliteStore.in_dir(data)
    try:
        box = Outbox(store)
        return {m["message_id"] for m in box.messages()}, box.counts()
    finally:
        store.close()


async def until(check, limit_s: float, what: str, poll_s: float = 0.5) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {limit_s:.0f} s: {what}")
        await asyncio.sleep(poll_s)


def same_bytes(receiver: Receiver) -> bool:
    bodies: dict[str, set[bytes]] = {}
    for r in receiver.received:
        bodies.setdefault(r.webhook_id, set()).add(r.body)
    return all(len(b) == 1 for b in bodies.values())


async def kills(args: argparse.Namespace, up, http, receiver: Receiver) -> None:
    rng = random.Random(args.seed)
    sids = await start(http, args.n, 2)
    answering = asyncio.gather(*(answer_first(http, sid) for sid in sids))
    done = 0
    pid = await one_notifier(up.pid)
    while done < args.kills:
        await asyncio.sleep(rng.uniform(0.1, 2.0))  # a random point of its life
        os.kill(pid, signal.SIGKILL)
        done += 1
        pid = await one_notifier(up.pid, not_pid=pid)
    await answering
    expected = 2 * args.n
    await until(lambda: len(outbox_ids(up.data)[0]) >= expected, 600,
                f"{expected} messages in the outbox")
    ids, _ = outbox_ids(up.data)
    await until(lambda: ids <= set(receiver.ids()), 600, "every message received")
    got = receiver.ids()
    print(f"\n== {args.n} sessions opening {expected} requests, the notifier killed "
          f"{done} times at random points ==")
    print(f"messages expected {len(ids)}, received {len(set(got) & ids)}, "
          f"lost {len(ids - set(got))}, duplicates {len(got) - len(set(got))}, "
          f"every duplicate the same id and bytes: {same_bytes(receiver)}, "
          f"refused by the verifier: {sum(r.error is not None for r in receiver.received)}")


async def down(args: argparse.Namespace, up, http, receiver: Receiver) -> None:
    before, _ = outbox_ids(up.data)
    port = receiver.port
    receiver.stop()
    t_down = time.monotonic()
    await start(http, args.n, 1)
    await until(lambda: len(outbox_ids(up.data)[0]) >= len(before) + args.n, 600,
                "the new messages in the outbox")
    await asyncio.sleep(max(0.0, args.down_s - (time.monotonic() - t_down)))
    receiver.port = port
    receiver.start()
    back = time.monotonic()
    ids, _ = outbox_ids(up.data)
    new = ids - before
    await until(lambda: new <= set(receiver.ids()), 3600, "every message after the return")
    drained = time.monotonic() - back
    _, counts = outbox_ids(up.data)
    print(f"\n== the receiver down {back - t_down:.0f} s while {args.n} sessions opened "
          "requests, then back ==")
    print(f"messages {len(new)}, received {len(new & set(receiver.ids()))}, "
          f"lost {len(new - set(receiver.ids()))}; the last arrived {drained:.1f} s after "
          f"its return (backoff capped at {args.max_backoff_s:.0f} s); outbox {counts}")


async def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=100, help="sessions per scenario (100)")
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs of the notifier (20)")
    p.add_argument("--down-s", type=float, default=120.0, help="receiver down, s (120)")
    p.add_argument("--max-backoff-s", type=float, default=30.0, help="(30)")
    p.add_argument("--seed", type=int, default=26)
    args = p.parse_args(argv)
    receiver = Receiver(delay_s=0.05).start()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        cfg = data / "notify.json"
        cfg.write_text(json.dumps({
            "channels": {"hook": {"type": "webhook", "url_env": URL_ENV,
                                  "secret_env": SECRET_ENV, "timeout_s": 5}},
            "routes": [{"to": "*", "channel": "hook", "on": ["opened"]}]}))
        env = {"HITLFLOW_NOTIFY_CONFIG": str(cfg), SECRET_ENV: receiver.secret,
               URL_ENV: receiver.url, "HITLFLOW_NOTIFY_POLL_S": "0.2",
               "HITLFLOW_NOTIFY_BACKOFF_S": "1", "HITLFLOW_NOTIFY_LEASE_S": "5",
               "HITLFLOW_NOTIFY_MAX_BACKOFF_S": str(args.max_backoff_s)}
        up = await start_up(data, env=env)
        try:
            async with httpx.AsyncClient(base_url=up.url, timeout=120,
                                         headers=api_headers()) as http:
                await kills(args, up, http, receiver)
                await down(args, up, http, receiver)
        finally:
            print(f"`hitlflow up` exit code on Ctrl-C: {await up.stop()}", file=sys.stderr)
            receiver.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
