"""The worker's knobs (the MCP pool's two, the workflow cache): read from HITLFLOW_*,
refused when nonsense, passed to the pool and the worker."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys

import pytest
from pydantic import ValidationError

import api.runtime.worker as worker
from activities.mcp.pool import DEFAULT_IDLE_S, DEFAULT_MAX_SERVERS, McpClientPool
from api.settings import HitlflowSettings


def test_defaults_match_the_pools_and_the_environment_sets_them(monkeypatch):
    monkeypatch.delenv("HITLFLOW_MCP_IDLE_S", raising=False)
    monkeypatch.delenv("HITLFLOW_MCP_MAX_SERVERS", raising=False)
    assert (HitlflowSettings().mcp_idle_s, HitlflowSettings().mcp_max_servers) == (
        DEFAULT_IDLE_S, DEFAULT_MAX_SERVERS)
    monkeypatch.setenv("HITLFLOW_MCP_IDLE_S", "45.5")
    monkeypatch.setenv("HITLFLOW_MCP_MAX_SERVERS", "4")
    settings = HitlflowSettings()
    assert (settings.mcp_idle_s, settings.mcp_max_servers) == (45.5, 4)


@pytest.mark.parametrize(
    ("var", "value", "field"),
    [("HITLFLOW_MCP_MAX_SERVERS", "0", "mcp_max_servers"),
     ("HITLFLOW_MCP_MAX_SERVERS", "-3", "mcp_max_servers"),
     ("HITLFLOW_MCP_IDLE_S", "-1", "mcp_idle_s"),
     ("HITLFLOW_WORKER_MAX_CACHED_WORKFLOWS", "-1", "worker_max_cached_workflows"),
     ("HITLFLOW_WORKER_MAX_CACHED_WORKFLOWS", "lots", "worker_max_cached_workflows")],
)
def test_nonsense_is_refused(monkeypatch, var, value, field):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValidationError, match=field):
        HitlflowSettings()


def test_the_worker_command_refuses_a_cap_of_zero_before_starting(tmp_path):
    env = {"HITLFLOW_MCP_MAX_SERVERS": "0", "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-m", "api.cli", "worker"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL,
                       check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "HITLFLOW_MCP_MAX_SERVERS" in r.stderr and "greater than or equal to 1" in r.stderr
    assert "Traceback" not in r.stderr


async def test_run_worker_builds_the_pool_from_the_settings(monkeypatch):
    pools: list[McpClientPool] = []
    caches: list[int] = []

    @contextlib.asynccontextmanager
    async def no_worker(client, task_queue, pool, **options):
        pools.append(pool)
        caches.append(options["max_cached_workflows"])
        yield

    async def another_worker_is_alive(client, task_queue, window) -> list[str]:
        return ["another"]  # a warm start: nothing to recover

    monkeypatch.setattr(worker, "build_worker", no_worker)
    monkeypatch.setattr(worker, "other_workers", another_worker_is_alive)
    stop = asyncio.Event()
    stop.set()
    settings = HitlflowSettings(mcp_idle_s=12, mcp_max_servers=3,
                                worker_max_cached_workflows=5000)

    await worker.run_worker(settings, stop, client=object())  # type: ignore[arg-type]

    assert [(p.idle_s, p.max_servers) for p in pools] == [(12, 3)]
    assert caches == [5000]
