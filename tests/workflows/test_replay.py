"""Saved histories of the main scenarios replay against today's SessionWorkflow.

A change that would break running sessions (a non-deterministic edit) fails
here. The histories are recorded by ``tests/workflows/record_histories.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from workflows.journal_carrier import INTERCEPTORS
from workflows.session import SessionWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_recorded():
    assert {p.stem for p in HISTORIES} >= {"demo", "rejected", "auto_timeout", "canceled",
                                           "operator_signals", "plan_steps"}


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_saved_history_replays(path: Path):
    data = json.loads(path.read_text())
    history = WorkflowHistory.from_json(f"replay-{path.stem}", data)
    replayer = Replayer(workflows=[SessionWorkflow], interceptors=INTERCEPTORS,
                        data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


async def test_a_changed_workflow_fails_replay(monkeypatch):
    """The check can fail: a workflow that skips a recorded activity is caught."""

    async def no_catalog(self) -> bool:  # skips the list_tools activity in the history
        self._s.tool_catalog = []
        return True

    monkeypatch.setattr(SessionWorkflow, "_ensure_catalog", no_catalog)
    data = json.loads((Path(__file__).parent / "histories" / "demo.json").read_text())
    replayer = Replayer(workflows=[SessionWorkflow], interceptors=INTERCEPTORS,
                        data_converter=pydantic_data_converter,
                        workflow_runner=UnsandboxedWorkflowRunner())
    result = await replayer.replay_workflow(
        WorkflowHistory.from_json("replay-changed", data), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None


async def test_a_worker_without_the_journal_carrier_fails_loudly():
    """A session that carries its journal in activity headers, on a worker built
    without the interceptor: the workflow task fails (retried once fixed), it never
    runs on and loses the journal silently."""
    data = json.loads((Path(__file__).parent / "histories" / "demo_journal_header.json"
                       ).read_text())
    replayer = Replayer(workflows=[SessionWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(
        WorkflowHistory.from_json("replay-no-carrier", data), raise_on_replay_failure=False)
    assert "the journal was not carried" in str(result.replay_failure)
