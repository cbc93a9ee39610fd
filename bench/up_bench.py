"""Benchmark: `hitlflow up`'s process CPU per turn on an approval workload, this tree
against a baseline revision, in one run (issue 28).

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/up_bench.py                    # 20 sessions x 5 turns vs 2882ede
    .venv/bin/python bench/up_bench.py --quick            # 4 sessions x 3 turns, A B B A
    .venv/bin/python bench/up_bench.py --baseline main~3  # against another revision
    .venv/bin/python bench/up_bench.py --baseline none    # this tree alone

The workload, as a person approving an agent's irreversible calls in the inbox does it:

* an OpenAI-compatible chat-completions server in a process of the bench's own (streamed
  answers, as the openai provider asks for them), scripted per request: after a person's
  message it calls the demo notes server's ``append_note`` (made irreversible by the
  session's ``tool_overrides``, so every call waits for an approval and always
  succeeds), after the tool's result it answers in words;
* sessions configured with that model and the demo notes MCP server
  (``activities/demo_notes_server.py``, one notes folder per round);
* ``-n`` clients (asyncio, in the bench's process), each starting a session over HTTP
  and following its SSE stream; on each change to ``waiting_user`` it reads the session
  (``GET /api/sessions/{id}?min_seq=``; the inbox also re-reads after other events) and
  approves the pending call (``POST .../reply`` with its ``digest``) or, when the agent
  waits for the next message, sends it (``POST .../messages``), ``--turns`` times, then
  ends the session (``POST .../end``) and reads its stream to ``stream.complete``.

A turn is one message: one LLM call that asks for the tool, one approval, the call, one
LLM call that answers. Each round starts a fresh ``hitlflow up`` (fresh data dir and dev
server), runs one warm-up session of one turn, waits until ``up`` is idle, reads the CPU
of each process from ``/proc``, runs the clients, waits until every stream completed and
``up`` is idle again (under 3% of a core over 6 s: work it defers by a few seconds, e.g.
a snapshot written later, is counted), and reads the CPU again. Per turn: ``up``'s own
process (the API, the exporter, the read model, telemetry, checkpoints), its worker (a
child process), the tools (the MCP servers under the worker, alive or reaped), the
Temporal dev server, other (up's other child processes, none today: work moved out of
up's process stays counted), and all together; and the history events and log lines per
turn.

**Before and after in one run.** ``--baseline REV`` (default ``2882ede``: main when
issue 28 was filed, the "today" of its target for ``up``) checks REV out into a
temporary ``git worktree`` and runs the same workload against an ``up`` started from
that tree (``cwd`` and ``PYTHONPATH`` set to it, the same venv: its code wins over the
editable install, but the venv's packages are this tree's (uvloop installed does not
change a baseline that does not use it); the bench
checks where ``api.cli`` is imported from with that environment, and ``up``'s and its
worker's cwd and ``PYTHONPATH`` from ``/proc``). Each of ``--rounds`` rounds runs both
sides: baseline then current in odd rounds, current then baseline in even ones (A B B A;
``--order abab`` keeps the baseline first), so the machine's noise and its drift over
the run hit both; the figures are pooled per side and reported as current/baseline, with
up's ratio round by round. Both trees' packages are compiled to bytecode first
(``compileall``), so the freshly checked-out baseline does not compile what it imports
lazily inside its first round. The worktree is removed at the end (it is registered in
the repository's worktree list meanwhile). Nothing is downloaded.

Targets (issue 28): up's CPU per turn at most 0.5x the baseline's. With the same code
on both sides the ratios measure the bench's own noise (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from stack import (
    THREAD_GROUPS,
    Up,
    api_headers,
    cpu_s,
    descendants,
    ratio,
    reaped_children_cpu_s,
    start_up,
    thread_cpu_s,
    thread_switches,
)
from temporalio.client import Client

from api.cli.sse_client import aparse_lines

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = "2882ede"
KEY_ENV = "UPBENCH_LLM_KEY"  # the fake model's key: any value, never a secret
TOOL = "append_note"
STUCK_AFTER_S = 600  # a client still going after this long failed
IDLE_SHARE = 0.03  # up is idle when it uses less than this share of a core ...
#: ... over a window this long: longer than the delays of work up defers (snapshot.json
#: after 2 s without events, at most every 5 s), so that work falls inside the round
IDLE_WINDOW_S = 6.0
IDLE_MAX_S = 60.0  # at most this long to wait for it
PROCS = ("up", "worker", "tools", "server", "other")
#: up's CPU by thread (``stack.thread_cpu_s``); its other threads are the rest.
THREADS = ("up main", "up core")


# ---------------------------------------------------------------------------
# The model: an OpenAI-compatible server in a process of its own


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {"id": "chatcmpl-upbench", "object": "chat.completion", "created": 1_700_000_000,
            "model": "upbench", "choices": [{"index": 0, "message": {
                "role": "assistant", **message}, "finish_reason": finish, "logprobs": None}],
            "usage": USAGE}


USAGE = {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    """One streamed chunk; ``delta`` None: the last one, with the usage and no choice."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish,
                                         "logprobs": None}]
    body = {"id": "chatcmpl-upbench", "object": "chat.completion.chunk",
            "created": 1_700_000_000, "model": "upbench", "choices": choices, **extra}
    return f"data: {json.dumps(body)}\n\n".encode()


def model_answer(body: dict[str, Any], call_no: int) -> tuple[dict[str, Any], str]:
    """The scripted answer to one request: after a tool's result, words; otherwise a
    call of the notes server's ``append_note`` (its function name as offered)."""
    if body["messages"][-1].get("role") == "tool":
        return {"content": "Noted: the line is appended."}, "stop"
    fname = next(t["function"]["name"] for t in body.get("tools", [])
                 if t["function"]["name"].endswith(TOOL))
    args = json.dumps({"name": "bench", "text": f"line {call_no}\n"})
    return {"content": None, "tool_calls": [{"id": f"call_{call_no}", "type": "function",
                                             "function": {"name": fname,
                                                          "arguments": args}}]}, "tool_calls"


async def _stream(message: dict[str, Any], finish: str) -> AsyncIterator[bytes]:
    yield _chunk({"role": "assistant", "content": ""})
    text = message.get("content") or ""
    for i in range(0, len(text), 10):
        yield _chunk({"content": text[i:i + 10]})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield _chunk({"tool_calls": [{"index": index, **call}]})
    yield _chunk({}, finish)
    yield _chunk(None, usage=USAGE)
    yield b"data: [DONE]\n\n"


def _model_main(sock: socket.socket, ready: Any) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    calls = 0

    async def completions(request: Request) -> Response:
        nonlocal calls
        calls += 1
        body = await request.json()
        message, finish = model_answer(body, calls)
        if body.get("stream"):
            return StreamingResponse(_stream(message, finish), media_type="text/event-stream")
        return JSONResponse(_completion(message, finish))

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    ready.set()
    server.run(sockets=[sock])


class ModelServer:
    """The scripted model in a spawned process, on a socket bound here (it accepts
    connections at once)."""

    def __enter__(self) -> ModelServer:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        self.proc = ctx.Process(target=_model_main, args=(self.sock, ready), daemon=True)
        self.proc.start()
        if not ready.wait(60):
            raise SystemExit("the model server did not start")
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.join(10)
        self.sock.close()


# ---------------------------------------------------------------------------
# Sessions and clients


def session_config(model_url: str, notes: Path, first: str) -> dict[str, Any]:
    return {"title": "up bench", "initial_message": first, "agent": {
        "llm": {"provider": "openai", "base_url": model_url, "model": "upbench",
                "api_key_env": KEY_ENV},
        "system_prompt": "You append to the person's notes.",
        "tools": [{"name": "notes", "tool_overrides": {TOOL: "irreversible"},
                   "command": [sys.executable, "-m", "activities.demo_notes_server",
                               "--dir", str(notes)]}]}}


@dataclass
class Outcome:
    sid: str = ""
    turns: int = 0
    approvals: int = 0
    status: str = ""
    error: str = ""


async def client(url: str, config: dict[str, Any], turns: int) -> Outcome:
    out = Outcome()
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=api_headers()) as http:
        try:
            await asyncio.wait_for(drive(http, config, turns, out), STUCK_AFTER_S)
        except Exception as err:  # reported; the round goes on
            body = err.response.text[:300] if isinstance(err, httpx.HTTPStatusError) else ""
            out.error = f"{type(err).__name__}: {err} {body}"
            print(f"client {out.sid or '?'} failed: {out.error}", file=sys.stderr)
    return out


async def drive(http: httpx.AsyncClient, config: dict[str, Any], turns: int,
                out: Outcome) -> None:
    r = (await http.post("/api/sessions", json=config)).raise_for_status()
    sid = out.sid = r.json()["session_id"]
    async with http.stream("GET", f"/api/sessions/{sid}/events", timeout=None) as stream:
        stream.raise_for_status()
        async for msg in aparse_lines(stream.aiter_lines()):
            if msg.event == "stream.complete":
                break
            if msg.event != "conversation.state.changed":
                continue
            change = msg.json()
            if change.get("to") != "waiting_user":
                out.status = change.get("to", out.status)
                continue
            s = (await http.get(f"/api/sessions/{sid}", params={
                "min_seq": int(msg.id or 0)})).raise_for_status().json()
            pending = s["pending"]
            if pending["kind"] == "approval":
                out.approvals += 1
                await post(http, f"/api/sessions/{sid}/reply", {
                    "request_id": pending["request_id"], "approve": True,
                    "digest": pending.get("digest")})
            elif pending["kind"] == "message":
                out.turns += 1
                if out.turns < turns:
                    await post(http, f"/api/sessions/{sid}/messages",
                               {"text": f"append line {out.turns + 1}"})
                else:
                    await post(http, f"/api/sessions/{sid}/end", {"reason": "done"})
            else:
                raise RuntimeError(f"unexpected request: {pending}")
    if out.status != "succeeded":
        raise RuntimeError(f"the session ended {out.status or 'without a status'}")


async def post(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    (await http.post(path, json={k: v for k, v in body.items() if v is not None})
     ).raise_for_status()


# ---------------------------------------------------------------------------
# Processes


def _cpu_or_zero(pid: int) -> float:
    try:
        return cpu_s(pid)
    except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
        return 0.0


def cpu_now(up: Up, worker: int) -> dict[str, float]:
    """CPU seconds so far of up, its worker, the tools (the worker's descendants, live or
    reaped), the dev server, and other: up's other descendants, live or reaped (none
    today; where work moves out of up's process into one of its own, it is counted)."""
    server = up.server_pid
    tools = descendants(worker)
    counted = {worker, server, *tools, *descendants(server)}
    threads = thread_cpu_s(up.pid)
    return {"up": cpu_s(up.pid), "up main": threads["main"], "up core": threads["core"],
            "worker": cpu_s(worker),
            "tools": sum(_cpu_or_zero(p) for p in tools) + reaped_children_cpu_s(worker),
            "server": cpu_s(server),
            "other": sum(_cpu_or_zero(p) for p in descendants(up.pid) if p not in counted)
            + reaped_children_cpu_s(up.pid)}


async def until_idle(up: Up) -> float:
    """Until ``up`` uses less than IDLE_SHARE of a core over IDLE_WINDOW_S (at most
    IDLE_MAX_S); the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < IDLE_MAX_S:
        before = cpu_s(up.pid)
        await asyncio.sleep(IDLE_WINDOW_S)
        if cpu_s(up.pid) - before < IDLE_SHARE * IDLE_WINDOW_S:
            break
    return time.monotonic() - t0


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def check_code(up: Up, worker: int, tree: Path, env: dict[str, str]) -> str:
    """That ``up`` and its worker run ``tree``'s code: where ``api.cli`` is imported from
    with their environment and cwd, and their cwd and PYTHONPATH as /proc shows them."""
    probe = subprocess.run(
        [sys.executable, "-c", "import api.cli, observation; print(api.cli.__file__)"],
        cwd=tree, env={**os.environ, **env}, capture_output=True, text=True, check=True)
    where = Path(probe.stdout.strip())
    problems = []
    if not where.is_relative_to(tree):
        problems.append(f"api.cli is imported from {where}")
    for name, pid in (("up", up.pid), ("worker", worker)):
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        path = environ(pid).get("PYTHONPATH")
        if cwd != tree or path != str(tree):
            problems.append(f"{name} runs in {cwd} with PYTHONPATH={path}")
    if problems:
        raise SystemExit(f"not {tree}'s code: " + "; ".join(problems))
    return str(where)


# ---------------------------------------------------------------------------
# Rounds


@dataclass
class Round:
    side: str
    index: int
    turns: int = 0
    approvals: int = 0
    sessions: int = 0
    failed: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # seconds over the round
    switches: dict[str, int] = field(default_factory=dict)  # up's, by thread group
    events: int = 0
    lines: int = 0
    wall_s: float = 0.0


async def run_round(side: str, index: int, tree: Path, model: ModelServer, tmp: Path,
                    args: argparse.Namespace) -> Round:
    data = tmp / f"{index}-{side}"
    notes = data / "notes"
    notes.mkdir(parents=True)
    env = {"PYTHONPATH": str(tree), KEY_ENV: "upbench-not-a-secret"}
    up = await start_up(data, env=env, cwd=tree)
    out = Round(side, index)
    try:
        worker = up.worker_pid
        where = check_code(up, worker, tree, env)
        print(f"round {index} {side}: up {up.pid}, worker {worker}, api.cli from {where}",
              file=sys.stderr, flush=True)
        warm = await client(up.url, session_config(model.base_url, notes, "warm up"), 1)
        if warm.error:
            raise SystemExit(f"the warm-up session failed: {warm.error}")
        await until_idle(up)
        before, switched = cpu_now(up, worker), thread_switches(up.pid)
        t0 = time.perf_counter()
        outcomes = await asyncio.gather(*(
            client(up.url, session_config(model.base_url, notes, "append line 1"),
                   args.turns) for _ in range(args.n)))
        out.wall_s = time.perf_counter() - t0
        await until_idle(up)
        after = cpu_now(up, worker)
        out.cpu = {k: after[k] - before[k] for k in (*PROCS, *THREADS)}
        out.switches = {k: n - switched[k] for k, n in thread_switches(up.pid).items()}
        ok = [o for o in outcomes if not o.error and o.turns == args.turns]
        out.sessions, out.failed = len(outcomes), len(outcomes) - len(ok)
        out.turns = sum(o.turns for o in outcomes)
        out.approvals = sum(o.approvals for o in outcomes)
        temporal = await Client.connect(up.temporal)
        for o in outcomes:
            if o.sid:
                out.events += len([e async for e in temporal.get_workflow_handle(
                    o.sid).fetch_history_events()])
                log = data / "runs" / o.sid / "events.ndjson"
                out.lines += len(log.read_bytes().splitlines()) if log.exists() else 0
    finally:
        code = await up.stop()
        if code:
            print(f"round {index} {side}: `hitlflow up` exit code {code}", file=sys.stderr)
    return out


def per_turn(rounds: list[Round]) -> dict[str, float]:
    """Pooled over ``rounds``: ms of CPU per turn of each process and all together;
    history events and log lines per turn."""
    turns = sum(r.turns for r in rounds) or 1
    out = {k: 1000 * sum(r.cpu[k] for r in rounds) / turns for k in (*PROCS, *THREADS)}
    out["up other"] = out["up"] - out["up main"] - out["up core"]
    out["all"] = sum(out[k] for k in PROCS)
    out["events"] = sum(r.events for r in rounds) / turns
    out["lines"] = sum(r.lines for r in rounds) / turns
    for k in THREAD_GROUPS:
        out[f"switches {k}"] = sum(r.switches.get(k, 0) for r in rounds) / turns
    return out


COLUMNS = (*PROCS, "all", "events", "lines")


def row(name: str, f: dict[str, float]) -> str:
    return f"{name:22}" + "".join(f"{f[k]:>9.1f}" for k in COLUMNS)


def report(rounds: list[Round], args: argparse.Namespace, baseline: str | None) -> None:
    print(f"\n== `hitlflow up` on an approval workload: {args.n} sessions x {args.turns} "
          f"turns a round, {args.rounds} round(s) a side, alternating ==")
    print("CPU in ms per turn (a turn: message, LLM call, approval, tool call, LLM call); "
          "events, lines: history events and log lines per turn")
    print(f"{'round':22}" + "".join(f"{k:>9}" for k in COLUMNS)
          + "   turns  approvals  failed  wall s")
    for r in rounds:
        print(row(f"{r.index} {r.side}", per_turn([r]))
              + f"   {r.turns:5}  {r.approvals:9}  {r.failed:6}  {r.wall_s:6.1f}")
    sides = {side: per_turn([r for r in rounds if r.side == side])
             for side in dict.fromkeys(r.side for r in rounds)}
    print()
    for side, f in sides.items():
        print(row(f"{side} (pooled)", f))
    if baseline is not None and "baseline" in sides:
        cur, base = sides["current"], sides["baseline"]
        print(f"{'current / baseline':22}" + "".join(f"{ratio(cur[k], base[k]):>9}"
                                                      for k in COLUMNS))
        by_index = {(r.index, r.side): r for r in rounds}
        per = [ratio(per_turn([by_index[i, "current"]])["up"],
                     per_turn([by_index[i, "baseline"]])["up"])
               for i in sorted({r.index for r in rounds})]
        print(f"up's ratio round by round (current against the baseline of the same round): "
              f"{', '.join(per)}")
        print(f"baseline: {baseline}; target (issue 28): up's CPU per turn <= 0.5x")
    print("\nup's CPU by thread, ms per turn: main (the event loop: the API, the "
          "exporter's mapping and appends), core (the Temporal client's Rust threads: "
          "its gRPC), other (the exporter's file and commit threads, the read model's and "
          "telemetry's writers)")
    for side, f in sides.items():
        print(f"{side + ' (pooled)':22}" + "".join(
            f"{k.removeprefix('up ')} {f[k]:.1f} ({f[k] / f['up']:.0%})  " if f["up"] else ""
            for k in ("up main", "up core", "up other")))
    print("up's context switches per turn, by the same threads (live ones; each a thread "
          "going to sleep or preempted: hand-overs, waits for the GIL, I/O)")
    for side, f in sides.items():
        switches = {k: f[f"switches {k}"] for k in THREAD_GROUPS}
        print(f"{side + ' (pooled)':22}" + "".join(f"{k} {n:.0f}  " for k, n in switches.items())
              + f"all {sum(switches.values()):.0f}")
    failed = sum(r.failed for r in rounds)
    if failed:
        print(f"{failed} session(s) did not complete every turn: the figures count the turns "
              "that did")


# ---------------------------------------------------------------------------
# The baseline tree


def add_worktree(rev: str, where: Path) -> str:
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if sha.returncode:
        raise SystemExit(f"--baseline {rev!r} is not a commit here: {sha.stderr.strip()}")
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet",
                    str(where), sha.stdout.strip()], check=True)
    return sha.stdout.strip()


#: The packages ``up`` and its worker import.
PACKAGES = ("workflows", "activities", "observation", "api")


def compile_tree(tree: Path) -> None:
    """Every module of ``tree``'s packages compiled to bytecode before the rounds, as
    both sides' trees are: a freshly checked-out baseline otherwise compiles what it
    imports lazily (a route's first request, the exporter's first session) inside its
    first measured round."""
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    *(str(tree / p) for p in PACKAGES if (tree / p).is_dir())], check=True)


def remove_worktree(where: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)],
                   check=False)
    subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=False)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=20, help="concurrent sessions a round (20)")
    p.add_argument("--turns", type=int, default=5, help="turns per session (5)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per side, alternating (2)")
    p.add_argument("--baseline", default=DEFAULT_BASELINE,
                   help=f"the revision to compare with ({DEFAULT_BASELINE}: main when "
                   "issue 28 was filed), or 'none' (this tree alone)")
    p.add_argument("--order", choices=("abba", "abab"), default="abba",
                   help="the sides' order in successive rounds: abba (default: baseline "
                   "first in odd rounds, current first in even ones, so a drift of the "
                   "machine over the run cancels out) or abab (baseline always first)")
    p.add_argument("--quick", action="store_true", help="4 sessions x 3 turns, 2 rounds a side")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.turns, args.rounds = 4, 3, 2
    if min(args.n, args.turns, args.rounds) < 1:
        p.error("-n, --turns and --rounds must be at least 1")
    return args


async def main(argv: list[str]) -> None:
    args = parse(argv)
    baseline = None if args.baseline == "none" else args.baseline
    with tempfile.TemporaryDirectory(prefix="up-bench-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"current": REPO}
        if baseline is not None:
            sha = add_worktree(baseline, tmp / "baseline-tree")
            baseline = f"{args.baseline} ({sha[:12]})"
            trees = {"baseline": tmp / "baseline-tree", "current": REPO}
        rounds: list[Round] = []
        try:
            for tree in trees.values():
                compile_tree(tree)
            with ModelServer() as model:
                for i in range(args.rounds):
                    order = list(trees.items())
                    if args.order == "abba" and i % 2:
                        order.reverse()
                    for side, tree in order:
                        rounds.append(await run_round(side, i + 1, tree, model, tmp, args))
        finally:
            if baseline is not None:
                remove_worktree(tmp / "baseline-tree")
        report(rounds, args, baseline)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
