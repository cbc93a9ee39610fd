"""The read model in SQLite: ``<data_dir>/read_model.sqlite`` (``hitlflow up``).

WAL, so readers (the API) never wait for the writer (the exporter) and the
writer never waits for them. ``synchronous = NORMAL``: a commit is durable once
the WAL is checkpointed or the next sync; a power loss can roll the read model
back by its last commits, never corrupt it. That is enough because the read
model is a cache of the logs: the log lines it reflects were fsynced before it
was written, and the exporter brings every session's rows back up to its log's
head when it starts (``sync.sync_store``). ``FULL`` would add an fsync per batch
to the exporter's path for nothing a restart does not restore.

Reads run on the caller's thread (one connection per thread); writes go through
one connection under a lock, one ``BEGIN IMMEDIATE`` transaction per batch, or per
round of the exporter's group writer (``writer.py``: every session that committed
meanwhile).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from observation.read_model.store import ReadModelError, SqlStore

FILE_NAME = "read_model.sqlite"


class SqliteStore(SqlStore):
    inline = True  # a local indexed read: cheaper than a hop to a thread

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.where = str(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = self._open()
            self._writer.execute("PRAGMA journal_mode = WAL")
            self.create_schema()
        except sqlite3.Error as err:
            raise ReadModelError(f"the read model {path} cannot be opened: {err}") from err

    @classmethod
    def in_dir(cls, data_dir: Path) -> SqliteStore:
        return cls(data_dir / FILE_NAME)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}", uri=True,
                               check_same_thread=False, isolation_level=None, timeout=10)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA busy_timeout = 10000")
        return conn

    def _connect(self) -> Any:
        return self._open()

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        cur = self._writer.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._writer.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
