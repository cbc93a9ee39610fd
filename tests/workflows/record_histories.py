"""Record the histories that ``test_replay.py`` replays in CI.

Run by hand, and only when a change is *meant* to be incompatible with running
sessions (then say so in the commit):

    .venv/bin/python -m tests.workflows.record_histories [SCENARIO ...]

Each scenario runs on the real dev server (search attributes on, as in
production) with the real activities; its final history is saved as
``histories/<name>.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.mcp.pool import McpClientPool
from api.cli.demo_config import demo_config, notes_server
from api.runtime.devserver_setup import temporal_cli_path, tuning_args
from tests.support.mcp_servers import recording_server
from tests.support.sessions import running_worker, start_session, until, until_status
from workflows.config import SessionConfig
from workflows.messages import CURRENT_BEHAVIOUR, Behaviour, ReplyInput
from workflows.search_attributes import SEARCH_ATTRIBUTES
from workflows.statechart import SessionStatus

HISTORIES = Path(__file__).parent / "histories"
W = SessionStatus.WAITING_USER


def scripted(notes_dir: Path, responses: list[dict], **kw) -> SessionConfig:
    return SessionConfig.model_validate({
        "initial_message": "go",
        "agent": {"llm": {"provider": "scripted", "responses": responses},
                  "tools": [notes_server(notes_dir)]},
        **kw,
    })


async def answer(h: WorkflowHandle, **kw) -> None:
    snap = await until_status(h, W)
    await h.execute_update("reply", ReplyInput(request_id=snap.pending.request_id, **kw))


async def demo(client: Client, tq: str, d: Path, *, behaviour: int = Behaviour.ORIGINAL
               ) -> WorkflowHandle:
    h = await start_session(client, demo_config(d), tq, search_attributes=True,
                            behaviour=behaviour)
    await answer(h, approve=True)
    await until(h, lambda s: s.pending is not None and s.pending.kind == "confirm")
    await answer(h, approve=True)
    await h.result()
    return h


async def rejected(client: Client, tq: str, d: Path) -> WorkflowHandle:
    (d / "a.note").write_text("x")
    h = await start_session(client, scripted(d, [
        {"tool_calls": [{"tool": "delete_note", "arguments": {"name": "a"}}]},
        {"text": "kept it", "end": True}]), tq, search_attributes=True,
        behaviour=Behaviour.ORIGINAL)
    await answer(h, approve=False)
    await h.result()
    return h


async def auto_timeout(client: Client, tq: str, d: Path) -> WorkflowHandle:
    h = await start_session(client, scripted(d, [
        {"ecs_request": {"kind": "choose", "prompt": "which?", "options": ["a", "b"]}},
        {"text": "took a"}], mode="auto", interactive_require_user_reply=False,
        reply_timeout_s=1, auto_decision="approve"), tq, search_attributes=True,
        behaviour=Behaviour.ORIGINAL)
    await h.result()
    return h


async def canceled(client: Client, tq: str, d: Path) -> WorkflowHandle:
    h = await start_session(client, scripted(d, [
        {"ecs_request": {"kind": "confirm", "prompt": "sure?"}}]), tq, search_attributes=True,
        behaviour=Behaviour.ORIGINAL)
    await until_status(h, W)
    await h.cancel()
    with contextlib.suppress(WorkflowFailureError):  # a cancelled session fails its result
        await h.result()
    return h


async def demo_journal_header(client: Client, tq: str, d: Path) -> WorkflowHandle:
    """The demo as sessions started since the journal rides in activity headers."""
    return await demo(client, tq, d, behaviour=CURRENT_BEHAVIOUR)


async def outcome_unknown(client: Client, tq: str, d: Path) -> WorkflowHandle:
    """An approved call whose server died holding it: the person is asked whether it
    happened and says "try again" (sent marks, reason codes)."""
    (d / "crash-call").touch()
    h = await start_session(client, SessionConfig.model_validate({
        "initial_message": "go", "agent": {"llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "delete", "arguments": {"name": "x"}}]},
            {"text": "deleted", "end": True}]},
            "tools": [recording_server(d).model_dump()]}}), tq, search_attributes=True,
        behaviour=CURRENT_BEHAVIOUR)
    await answer(h, approve=True)
    await until(h, lambda s: s.pending is not None and s.pending.kind == "choose")
    await answer(h, choice="try again")
    await h.result()
    return h


async def send_window(client: Client, tq: str, d: Path) -> WorkflowHandle:
    """An approved call whose server cannot start: tried again after a backoff timer
    for the window (2 s), then the person says "send again" (Behaviour.SEND_WINDOW;
    recorded with a pool that closes idle servers at once, ``POOLS``)."""
    h = await start_session(client, SessionConfig.model_validate({
        "initial_message": "go", "send_window_s": 2,
        "agent": {"llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "delete", "arguments": {"name": "x"}}]},
            {"text": "deleted", "end": True}]},
            "tools": [recording_server(d).model_dump()]}}), tq, search_attributes=True,
        behaviour=CURRENT_BEHAVIOUR)
    await until_status(h, W)  # its tools are listed
    (d / "fail-start").touch()
    while (d / "server.pid").exists() and _alive(int((d / "server.pid").read_text())):
        await asyncio.sleep(0.05)  # the server that listed them closes (idle)
    await answer(h, approve=True)
    await until(h, lambda s: s.pending is not None and s.pending.kind == "choose")
    (d / "fail-start").unlink()
    await answer(h, choice="send again")
    await h.result()
    return h


def _alive(pid: int) -> bool:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 0)
        return True
    return False


async def agent_loop(client: Client, tq: str, d: Path) -> WorkflowHandle:
    """A model mistake sent back, a corrected call, then a provider error that is
    waited for once (a durable timer) and fails the session (``agent-loop-v2``)."""
    cfg = scripted(d, [
        {"tool_calls": [{"tool": "write_note", "raw_arguments": '{"name": "a", '}]},
        {"tool_calls": [{"tool": "write_note", "arguments": {"name": "a", "content": "x"}}]},
        {"error": "overloaded", "http_status": 503, "retry_after_s": 1}], mode="auto")
    cfg.agent.llm.error_retries = 1  # type: ignore[union-attr]
    h = await start_session(client, cfg, tq, search_attributes=True, behaviour=CURRENT_BEHAVIOUR)
    with contextlib.suppress(WorkflowFailureError):
        await h.result()
    return h



async def operator_signals(client: Client, tq: str, d: Path) -> WorkflowHandle:
    """Signals as an operator sends them from the Temporal UI: malformed and stale ones
    are refused (recorded, Behaviour.REFUSALS_RECORDED), a good one answers."""
    h = await start_session(client, scripted(d, [
        {"ecs_request": {"kind": "confirm", "prompt": "sure?"}},
        {"text": "done", "end": True}]), tq, search_attributes=True,
        behaviour=CURRENT_BEHAVIOUR)
    snap = await until_status(h, W)
    await h.signal("submit_reply", ["not", "an", "object"])
    await h.signal("submit_reply", {"request_id": "stale", "approve": True})
    await h.signal("end_conversation", {"reasn": "typo"})
    await h.signal("submit_reply", {"request_id": snap.pending.request_id, "approve": True})
    await h.result()
    return h


async def plan_steps(client: Client, tq: str, d: Path) -> WorkflowHandle:
    """A verify: human step, then a gate: the second wait begins in the task that took
    the first answer (Behaviour.EACH_WAIT_PUBLISHED publishes its WaitingSince)."""
    config = SessionConfig.model_validate({"plan": {"name": "ship", "steps": [
        {"name": "build", "run": "echo built", "verify": "human"},
        {"name": "go?", "gate": True}]}})
    h = await start_session(client, config, tq, search_attributes=True,
        behaviour=CURRENT_BEHAVIOUR)
    await answer(h, choice="approve")
    await until(h, lambda s: s.pending is not None and s.pending.prompt == "gate: go?")
    await answer(h, choice="approve")
    await h.result()
    return h



# `demo`, `rejected`, `auto_timeout` and `canceled` as sessions ran before the journal
# moved into activity headers (a memo before every await): running sessions of that
# kind must replay too.
SCENARIOS: dict[str, Callable[[Client, str, Path], Awaitable[WorkflowHandle]]] = {
    "demo": demo, "rejected": rejected, "auto_timeout": auto_timeout, "canceled": canceled,
    "demo_journal_header": demo_journal_header, "agent_loop": agent_loop,
    "operator_signals": operator_signals, "plan_steps": plan_steps,
    "outcome_unknown": outcome_unknown, "send_window": send_window,
}
# Scenarios that need a pool of their own (the default: the worker's usual one).
POOLS: dict[str, Callable[[], McpClientPool]] = {"send_window": lambda: McpClientPool(idle_s=0)}


async def main(names: list[str]) -> None:
    """Record the named scenarios (default: all of them)."""
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenarios {sorted(unknown)}; known: {sorted(SCENARIOS)}")
    HISTORIES.mkdir(exist_ok=True)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()), ip="127.0.0.1",
        data_converter=pydantic_data_converter, search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=tuning_args(persistent=False),
    )
    try:
        for name, scenario in SCENARIOS.items():
            if names and name not in names:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                tq = f"record-{name}"
                pool = POOLS[name]() if name in POOLS else None
                async with running_worker(env.client, tq, pool=pool):
                    h = await scenario(env.client, tq, Path(tmp))
                    history = await h.fetch_history()
            (HISTORIES / f"{name}.json").write_text(history.to_json())
            print(f"recorded {name}: {len(history.events)} events", file=sys.stderr)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
