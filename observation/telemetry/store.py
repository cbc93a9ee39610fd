"""The local telemetry store: ``<data_dir>/telemetry.sqlite``.

Holds the TelemetryRuns of every session, upserted as the exporter writes the logs,
queryable by session, job_type and status. Rows are a projection of the logs:
``hitlflow telemetry rebuild`` makes the same rows again from ``runs/`` alone.

* Idempotent: a run is upserted only when the row is not newer (``last_seq``), so
  a replay or a second write of the same state changes nothing.
* JSON columns (``context_json``, ``attributes_json``) are RFC 8785 text, so the
  rows are the same bytes whichever way the events were read.
* A file that is not a store of this version is refused with
  :class:`TelemetryStoreError` before anything is written to it.
* One connection, one lock: the exporter's writer threads share it. WAL mode, so
  readers (the CLI, the HTTP API) never wait for the exporter.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import rfc8785

from observation.telemetry.model import Run, TelemetryRun
from workflows.canonical import jcs

STORE_NAME = "telemetry.sqlite"
SCHEMA_VERSION = "hitlflow-telemetry-v1"
COLUMNS = ("run_id", "session_id", "parent_run_id", "job_type", "name", "status",
           "started_at", "ended_at", "updated_at", "trace_id", "span_id", "parent_span_id",
           "context_json", "attributes_json", "ordinal", "first_seq", "last_seq",
           "event_count")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, parent_run_id TEXT,
    job_type TEXT NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL,
    started_at TEXT, ended_at TEXT, updated_at TEXT NOT NULL,
    trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_span_id TEXT,
    context_json TEXT NOT NULL, attributes_json TEXT NOT NULL, ordinal INTEGER NOT NULL,
    first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, event_count INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session_id, ordinal);
CREATE INDEX IF NOT EXISTS runs_by_job_type ON runs (job_type, status);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_hash TEXT NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', '{SCHEMA_VERSION}');
"""
#: What a run's later lines change; the rest (ids, span, ordinal, first_seq) is fixed
#: when the run is created, so an update leaves it, and the indexes on it, alone.
CHANGING = ("name", "status", "started_at", "ended_at", "updated_at", "attributes_json",
            "last_seq", "event_count")
_UPSERT = (f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
           "ON CONFLICT (run_id) DO UPDATE SET "
           + ", ".join(f"{c} = excluded.{c}" for c in CHANGING)
           + " WHERE excluded.last_seq >= runs.last_seq")
_PROGRESS = ("INSERT INTO sessions (session_id, last_seq, last_hash) VALUES (?, ?, ?) "
             "ON CONFLICT (session_id) DO UPDATE SET last_seq = excluded.last_seq, "
             "last_hash = excluded.last_hash WHERE excluded.last_seq >= sessions.last_seq")


class TelemetryStoreError(Exception):
    """The store cannot be used (missing, not a store, corrupt): nothing was changed."""


def _text(value: Any) -> str:
    return jcs(value).decode()  # RFC 8785 (the C encoder where it provably is)


def to_row(run: TelemetryRun | Run) -> tuple[Any, ...]:
    """The run's row (``COLUMNS``). A projector's :class:`Run` keeps its JSON texts
    until they change, so a run touched by many commits is encoded once per change."""
    if isinstance(run, Run):
        context, attributes = run.texts()
    else:
        context, attributes = _text(run.context_json), _text(run.attributes)
    ctx = run.context_json
    return (run.run_id, run.session_id, run.parent_run_id, run.job_type, run.name, run.status,
            run.started_at, run.ended_at, run.updated_at, str(ctx["trace_id"]),
            str(ctx["span_id"]), ctx.get("parent_span_id"), context, attributes, run.ordinal,
            run.first_seq, run.last_seq, run.event_count)


def from_row(row: tuple[Any, ...]) -> TelemetryRun:
    d = dict(zip(COLUMNS, row, strict=True))
    return TelemetryRun(
        run_id=d["run_id"], parent_run_id=d["parent_run_id"], session_id=d["session_id"],
        job_type=d["job_type"], name=d["name"], status=d["status"],
        started_at=d["started_at"], ended_at=d["ended_at"], updated_at=d["updated_at"],
        context_json=json.loads(d["context_json"]), attributes=json.loads(d["attributes_json"]),
        ordinal=d["ordinal"], first_seq=d["first_seq"], last_seq=d["last_seq"],
        event_count=d["event_count"])


class TelemetryStore:
    """Open with :meth:`open` (read-write, created when missing) or :meth:`open`
    with ``readonly=True`` (queries only; the file must exist)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path, self._conn, self._lock = path, conn, threading.Lock()

    @classmethod
    def open(cls, path: Path, *, readonly: bool = False) -> TelemetryStore:
        if readonly and not path.is_file():
            raise TelemetryStoreError(f"no telemetry store at {path}")
        mode = "ro" if readonly else "rwc"
        try:
            conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode={mode}", uri=True,
                                   check_same_thread=False, isolation_level=None, timeout=5)
        except sqlite3.Error as err:
            raise TelemetryStoreError(f"{path}: cannot open the telemetry store: {err}"
                                      ) from None
        try:
            cls._check(path, conn, readonly)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn)

    @staticmethod
    def _check(path: Path, conn: sqlite3.Connection, readonly: bool) -> None:
        """Refuse anything but a store of this version (or, to write, an empty file)
        before writing a byte; then create the tables in an empty file."""
        how = ("move it aside (`hitlflow telemetry rebuild` makes a new one from the "
               "logs under runs/)")
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables and not readonly:
                conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
                tables = {"meta", "runs", "sessions"}
            if not {"meta", "runs", "sessions"} <= tables:
                raise TelemetryStoreError(f"{path} is not a hitlflow telemetry store "
                                          f"(tables: {sorted(tables)}); {how}")
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None or row[0] != SCHEMA_VERSION:
                raise TelemetryStoreError(f"{path}: schema {row[0] if row else None!r}, "
                                          f"this version reads {SCHEMA_VERSION!r}; {how}")
            if not readonly:
                check = conn.execute("PRAGMA quick_check").fetchone()
                if check is None or check[0] != "ok":
                    raise TelemetryStoreError(f"{path} is corrupt ({check}); {how}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as err:
            raise TelemetryStoreError(f"{path} is not a readable telemetry store "
                                      f"({err}); {how}") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> TelemetryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------

    def upsert(self, runs: Iterable[TelemetryRun | Run],
               progress: tuple[str, int, str] | None = None) -> None:
        """Write runs (each unless its row is newer) and, optionally, how far the
        session's log is reflected: ``(session_id, last_seq, last_hash)``. One
        transaction."""
        self.upsert_rows([([to_row(r) for r in runs], progress)])

    def upsert_rows(self, batch: Iterable[tuple[list[tuple[Any, ...]],
                                                tuple[str, int, str] | None]]) -> None:
        """Several upserts (rows made by :func:`to_row`) in one transaction."""
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for rows, progress in batch:
                        self._conn.executemany(_UPSERT, rows)
                        if progress is not None:
                            self._conn.execute(_PROGRESS, progress)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as err:
            raise TelemetryStoreError(f"{self.path}: writing telemetry runs failed: {err}"
                                      ) from err

    # -- reading -------------------------------------------------------------------------

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._conn.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as err:
            raise TelemetryStoreError(f"{self.path}: reading the telemetry store failed: "
                                      f"{err}") from None

    def runs(self, *, session_id: str | None = None, job_type: str | None = None,
             status: str | None = None, parent_run_id: str | None = None,
             limit: int | None = None, offset: int = 0) -> list[TelemetryRun]:
        """Runs matching every filter given, by session then in log order."""
        where, args = [], []
        for col, value in (("session_id", session_id), ("job_type", job_type),
                           ("status", status), ("parent_run_id", parent_run_id)):
            if value is not None:
                where.append(f"{col} = ?")
                args.append(value)
        sql = f"SELECT {', '.join(COLUMNS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY session_id, ordinal LIMIT ? OFFSET ?"
        args += [-1 if limit is None else limit, offset]
        return [from_row(r) for r in self._query(sql, args)]

    def run(self, run_id: str) -> TelemetryRun | None:
        rows = self._query(f"SELECT {', '.join(COLUMNS)} FROM runs WHERE run_id = ?", [run_id])
        return from_row(rows[0]) if rows else None

    def progress(self) -> dict[str, tuple[int, str]]:
        """``session_id -> (last_seq, last_hash)``: how far each log is reflected."""
        return {sid: (seq, h) for sid, seq, h in self._query(
            "SELECT session_id, last_seq, last_hash FROM sessions")}

    def dump(self) -> Iterator[bytes]:
        """Every row as one JCS line, by run id: two stores with the same rows dump
        the same bytes (the determinism checks compare these)."""
        rows = self._query(f"SELECT {', '.join(COLUMNS)} FROM runs ORDER BY run_id")
        rows += [("session", *r) for r in self._query(
            "SELECT session_id, last_seq, last_hash FROM sessions ORDER BY session_id")]
        for r in rows:
            yield rfc8785.dumps(list(r)) + b"\n"
