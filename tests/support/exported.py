"""A session's exported log read in tests, and a refused update."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from observation.exporter import export_session
from observation.schemas import load


async def log_of(client: Client, h: WorkflowHandle, tmp_path: Path) -> list[dict]:
    """The session's exported log, every line checked against the event schema."""
    await export_session(client, h.id, tmp_path / "runs")
    lines = [json.loads(x) for x in
             (tmp_path / "runs" / h.id / "events.ndjson").read_text().splitlines()]
    validator = jsonschema.Draft202012Validator(load("event"))
    for line in lines:
        validator.validate(line)
    return lines


def of(lines: list[dict], kind: str) -> list[dict]:
    """The payloads of the lines of type ``kind``."""
    return [e["payload"] for e in lines if e["type"] == kind]


async def refused(h: WorkflowHandle, arg: Any, update: str = "reply") -> ApplicationError:
    """The typed error the workflow's validator answered ``update`` with."""
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await h.execute_update(update, arg)
    cause = err.value.cause
    assert isinstance(cause, ApplicationError), cause
    return cause
