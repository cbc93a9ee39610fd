"""A throw-away PostgreSQL server for tests: the binaries of the ``pgserver`` dev
dependency (PyPI; no system package needed), started by the test session in a
temporary directory (a local Unix socket; as root, pgserver runs it as its own
user). ``postgres_url()`` gives a fresh database each call. Skips (with the
reason) only where the server cannot start."""

from __future__ import annotations

import itertools
import tempfile
from typing import Any

import pytest

_server: Any = None
_why_not: str | None = None
_dbs = itertools.count()


def _start() -> Any:
    global _server, _why_not
    if _server is None and _why_not is None:
        try:
            import pgserver

            _server = pgserver.get_server(tempfile.mkdtemp(prefix="hitlflow-pg-"),
                                          cleanup_mode="delete")
        except Exception as err:  # no binaries for this platform, cannot start, ...
            _why_not = f"PostgreSQL cannot start here (pgserver): {type(err).__name__}: {err}"
    if _server is None:
        pytest.skip(_why_not or "PostgreSQL is not available")
    return _server


def postgres_url() -> str:
    """A new empty database on the test server."""
    import psycopg

    server = _start()
    admin = server.get_uri()
    name = f"hitlflow_test_{next(_dbs)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    base, _, query = admin.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}?{query}"
