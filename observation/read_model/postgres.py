"""The read model in PostgreSQL (a cluster: ``HITLFLOW_READ_MODEL_URL=postgresql://...``).

psycopg 3. One connection per reading thread (the API reads in worker threads:
a query is a network round trip), one writing connection under a lock; each
batch is one transaction that locks the session's row (``SELECT ... FOR
UPDATE``) before deciding what to write, so two exporters can never interleave
one session's rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from activities.urls import redact
from observation.read_model.store import ReadModelError, SqlStore


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ReadModelError(f"PostgreSQL read model needs psycopg: {err}") from None
    return psycopg


class PostgresStore(SqlStore):
    inline = False
    placeholder = "%s"

    def __init__(self, url: str, *, connect_timeout_s: int = 10) -> None:
        super().__init__()
        self.url, self.where = url, redact(url)
        self._timeout = connect_timeout_s
        self._pg = _psycopg()
        try:
            self._writer = self._connect()
            self.create_schema()
        except self._pg.Error as err:
            raise ReadModelError(f"the read model {self.where} cannot be opened: {err}"
                                 ) from err

    def _connect(self) -> Any:
        return self._pg.connect(self.url, autocommit=True, connect_timeout=self._timeout)

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (self._pg.Error,)

    def _run_query(self, conn: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        return conn.execute(sql, params, prepare=True).fetchall()

    def _lock_session(self, cur: Any, session_id: str) -> tuple[int, str] | None:
        cur.execute("SELECT last_seq, last_hash FROM rm_sessions WHERE session_id = %s "
                    "FOR UPDATE", (session_id,))
        row = cur.fetchone()
        return (int(row[0]), str(row[1])) if row is not None else None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        if self._writer.closed or self._writer.broken:
            self._writer = self._connect()
        with self._writer.transaction(), self._writer.cursor() as cur:
            yield cur

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
