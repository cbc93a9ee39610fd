"""The read model's store: one small interface, two backends (``sqlite.py`` for
``hitlflow up``, ``postgres.py`` for a cluster), the same SQL.

Tables (every read is one indexed query):

* ``rm_sessions`` — one row per session (``SessionRow``), primary key the session
  id; indexed by ``(started_at, session_id)`` and ``(status, started_at,
  session_id)`` for the list and its status filter.
* ``rm_contracts`` — one row per contract, primary key ``(session_id, ordinal)``
  (creation order: a page is an index range); ``(session_id, execution_id)`` finds
  one contract.
* ``rm_facts``, ``rm_history`` — the memory facts and status changes, primary key
  ``(session_id, ordinal)``.
* ``rm_access`` — who is named (``access.py``): ``(session_id, role, entry)``, the
  session's owner, approvers and viewers and its pending request's own approvers,
  so that a list shows each principal only what they may see (or answer) in its
  query. (Sessions exported before it existed had no people to name.)
* ``rm_notices`` — what is worth telling people (``notices.py``), one row per log
  line that makes one, ``notice_id`` ``"<session_id>:<seq>"`` unique, ``id`` the
  order they were written in (the notifier reads after its position). Inserted
  with ``ON CONFLICT DO NOTHING`` in the batch's transaction, never deleted by
  ``replace`` or ``reset``: a rebuild never makes a notice twice.
* ``rm_lineage`` — a fork's parent (its log's line 1, ``SESSION_FORKED``): primary key
  the fork's id, indexed by ``(parent_id, session_id)``, so a session lists its forks.

Writes: :meth:`SqlStore.apply` writes one log batch in one transaction (and
:meth:`SqlStore.apply_many` several sessions' batches in one: the exporter's group
writer, ``writer.py``), after
reading the session's stored ``last_seq`` in it: a batch the store already
reflects is a no-op, and only the rows changed after the stored seq are written
(each write is an upsert of the row's whole state), so re-applying a batch or an
exporter restart never double-counts. :meth:`SqlStore.replace` writes a session
whole (a rebuild).
"""

from __future__ import annotations

import contextlib
import json
import operator
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from observation.read_model.access import ANSWER, SEE_ROLES
from observation.read_model.list_token import session_list_position, session_list_token
from observation.read_model.rows import SESSION_COLUMNS, SessionBatch, SessionRow

SCHEMA_VERSION = "1"
TERMINAL_STATUSES = ("succeeded", "failed", "canceled")

DDL = (
    "CREATE TABLE IF NOT EXISTS rm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS rm_sessions (
        session_id TEXT PRIMARY KEY, status TEXT, execution_status TEXT, mode TEXT,
        task_queue TEXT, pending TEXT, waiting_since TEXT, started_at TEXT NOT NULL,
        closed_at TEXT, turns INTEGER NOT NULL, replies INTEGER NOT NULL,
        llm_calls INTEGER NOT NULL, contracts_total INTEGER NOT NULL,
        terminal_contracts INTEGER NOT NULL, has_suspended INTEGER NOT NULL,
        status_counts TEXT NOT NULL, facts_total INTEGER NOT NULL,
        history_total INTEGER NOT NULL, failure_reason TEXT, last_text TEXT,
        closed INTEGER NOT NULL, journal_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
        last_hash TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS rm_sessions_started ON rm_sessions (started_at, session_id)",
    """CREATE INDEX IF NOT EXISTS rm_sessions_status
        ON rm_sessions (status, started_at, session_id)""",
    """CREATE TABLE IF NOT EXISTS rm_contracts (
        session_id TEXT NOT NULL, ordinal INTEGER NOT NULL, execution_id TEXT NOT NULL,
        status TEXT NOT NULL, entered_state_at TEXT NOT NULL, snapshot TEXT NOT NULL,
        transitions TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (session_id, ordinal))""",
    """CREATE UNIQUE INDEX IF NOT EXISTS rm_contracts_execution
        ON rm_contracts (session_id, execution_id)""",
    """CREATE TABLE IF NOT EXISTS rm_facts (
        session_id TEXT NOT NULL, ordinal INTEGER NOT NULL, body TEXT NOT NULL,
        seq INTEGER NOT NULL, PRIMARY KEY (session_id, ordinal))""",
    """CREATE TABLE IF NOT EXISTS rm_history (
        session_id TEXT NOT NULL, ordinal INTEGER NOT NULL, body TEXT NOT NULL,
        seq INTEGER NOT NULL, PRIMARY KEY (session_id, ordinal))""",
    """CREATE TABLE IF NOT EXISTS rm_access (
        session_id TEXT NOT NULL, role TEXT NOT NULL, entry TEXT NOT NULL,
        entry_lower TEXT NOT NULL, PRIMARY KEY (session_id, role, entry))""",
    "CREATE INDEX IF NOT EXISTS rm_access_entry ON rm_access (entry, role, session_id)",
    """CREATE INDEX IF NOT EXISTS rm_access_email
        ON rm_access (entry_lower, role, session_id)""",
    """CREATE TABLE IF NOT EXISTS rm_lineage (
        session_id TEXT PRIMARY KEY, parent_id TEXT NOT NULL, parent_seq INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS rm_lineage_parent ON rm_lineage (parent_id, session_id)",
)
#: ``rm_notices``: ``id`` is the backend's autoincrement (``{id}``, see
#: ``SqlStore.id_column``).
NOTICES_DDL = (
    """CREATE TABLE IF NOT EXISTS rm_notices (
        {id}, notice_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
        seq INTEGER NOT NULL, kind TEXT NOT NULL, at TEXT NOT NULL, body TEXT NOT NULL)""",
)
INSERT_NOTICE = ("INSERT INTO rm_notices (notice_id, session_id, seq, kind, at, body) "
                 "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (notice_id) DO NOTHING")
TABLES = ("rm_sessions", "rm_contracts", "rm_facts", "rm_history", "rm_access", "rm_lineage")
MAX_CHILDREN = 100  # a session's forks listed with it
_BOOLS = ("has_suspended", "closed")

_SESSION_COLS = (*SESSION_COLUMNS, "updated_at")
_STARTED_AT = SESSION_COLUMNS.index("started_at")
_session_values = operator.attrgetter(*SESSION_COLUMNS)  # the row's values, in C
_BOOL_AT = tuple(SESSION_COLUMNS.index(c) for c in _BOOLS)
_LOCK_CHUNK = 500  # session ids per query of a round's lock
UPSERT_SESSION = (
    f"INSERT INTO rm_sessions ({', '.join(_SESSION_COLS)}) "
    f"VALUES ({', '.join('?' for _ in _SESSION_COLS)}) ON CONFLICT (session_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _SESSION_COLS[1:]))
#: The session row's columns no index holds: a session whose ``status`` and
#: ``started_at`` are as stored is updated in them only (its indexes' pages are left
#: alone: a round writes fewer pages).
_UNINDEXED = tuple(c for c in _SESSION_COLS[1:] if c not in ("status", "started_at"))
UPDATE_SESSION = (f"UPDATE rm_sessions SET {', '.join(f'{c} = ?' for c in _UNINDEXED)} "
                  "WHERE session_id = ?")
_UNINDEXED_AT = tuple(_SESSION_COLS.index(c) for c in _UNINDEXED)
_unindexed = operator.itemgetter(*_UNINDEXED_AT)  # those columns' values, in C
#: A contract's ``execution_id`` is that of its ordinal for good (creation order in
#: its log): not rewritten, so the ``(session_id, execution_id)`` index is untouched.
UPSERT_CONTRACT = (
    "INSERT INTO rm_contracts (session_id, ordinal, execution_id, status, entered_state_at, "
    "snapshot, transitions, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (session_id, ordinal) DO UPDATE SET "
    "status = excluded.status, entered_state_at = excluded.entered_state_at, "
    "snapshot = excluded.snapshot, transitions = excluded.transitions, seq = excluded.seq")


def _upsert_entry(table: str) -> str:
    return (f"INSERT INTO {table} (session_id, ordinal, body, seq) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (session_id, ordinal) DO UPDATE SET body = excluded.body, "
            "seq = excluded.seq")


@dataclass(frozen=True)
class Audience:
    """Whose list it is: the entries that name the principal (``subject`` and
    ``group:NAME`` per group; ``email`` lowercased, matched without case), whether
    they see every session (operators) and whether they may answer at all (approver
    or above). ``waiting_for``: only sessions whose pending request they may answer
    (``workflows.people.may_answer``: the request's own approvers when it names any,
    else the session's owner and approvers, or an operator)."""

    names: tuple[str, ...]
    email: str | None = None
    sees_all: bool = False
    answers: bool = False
    waiting_for: bool = False


class ReadModelError(Exception):
    """The read model cannot be read or written (its database is unreachable or broken)."""


@dataclass(frozen=True)
class StoredSession:
    """A session's row as stored (JSON columns decoded)."""

    row: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.row[name]
        except KeyError:
            raise AttributeError(name) from None


class ReadStore(Protocol):
    """What the exporter writes and the API reads. Methods are blocking; ``inline``
    says whether a read is cheap enough to run on an event loop (SQLite: a local
    indexed read) or should go to a thread (PostgreSQL: a network round trip)."""

    inline: bool
    where: str

    def apply(self, batch: SessionBatch) -> bool: ...
    def apply_many(self, batches: Sequence[SessionBatch]) -> int: ...
    def replace(self, batch: SessionBatch) -> None: ...
    def reset(self) -> None: ...
    def heads(self) -> dict[str, tuple[int, str]]: ...
    def session(self, session_id: str) -> dict[str, Any] | None: ...
    def contracts(self, session_id: str, offset: int, limit: int) -> list[dict[str, Any]]: ...
    def contract(self, session_id: str, execution_id: str) -> dict[str, Any] | None: ...
    def facts(self, session_id: str, offset: int, limit: int) -> list[dict[str, Any]]: ...
    def history(self, session_id: str, offset: int, limit: int) -> list[dict[str, Any]]: ...
    def list_sessions(self, status: str | None, limit: int, page_token: str | None,
                      audience: Audience | None = None
                      ) -> tuple[list[dict[str, Any]], str | None]: ...
    def access(self, session_id: str) -> dict[str, list[str]]: ...
    def dump(self) -> dict[str, list[tuple[Any, ...]]]: ...
    def notices(self, after: int, limit: int) -> list[dict[str, Any]]: ...
    def children(self, session_id: str) -> list[dict[str, Any]]: ...
    # the notifier's own tables (api.notify.outbox), in the same database
    skip_locked: str
    def transaction(self) -> contextlib.AbstractContextManager[StoreCursor]: ...
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
    def close(self) -> None: ...


def now_text(at: datetime) -> str:
    """A time as ``updated_at`` holds it (the reference :func:`_stamp` is held to)."""
    return at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


_second: tuple[int, str] = (-1, "")  # the last second stamped, and its text (one
# tuple, replaced whole: a thread reads one second's pair, whatever the others do)


def _stamp(us: int) -> str:
    """:func:`now_text` of ``us`` microseconds after the epoch: the second's text made
    once per second, the microseconds appended (a round's ``updated_at``)."""
    global _second
    second, micro = divmod(us, 1_000_000)
    known = _second
    if known[0] != second:
        known = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{known[1]}.{micro:06d}Z"


def _now() -> str:
    return _stamp(time.time_ns() // 1000)


class SqlStore:
    """The SQL both backends share. Subclasses give connections and a placeholder."""

    inline = False
    where = ""
    placeholder = "?"
    #: ``rm_notices.id``: an autoincrement primary key in the backend's words.
    id_column = "id INTEGER PRIMARY KEY AUTOINCREMENT"
    #: Appended to a SELECT that claims rows for update (PostgreSQL: skip the rows
    #: another transaction holds; SQLite's write transactions are serial anyway).
    skip_locked = ""
    #: Appended to the query that reads a round's sessions (PostgreSQL: locks them).
    lock_rows = ""

    def __init__(self) -> None:
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._sql_cache: dict[str, str] = {}

    # -- backend hooks ------------------------------------------------------------------

    def _connect(self) -> Any:
        raise NotImplementedError

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor inside one write transaction (committed on exit)."""
        raise NotImplementedError
        yield

    def _lock_sessions(self, cur: Any, session_ids: Sequence[str]
                       ) -> dict[str, tuple[int, str | None, str]]:
        """The stored ``(last_seq, status, started_at)`` of each of ``session_ids``
        that has a row (sorted ids; PostgreSQL locks the rows, in that order)."""
        out: dict[str, tuple[int, str | None, str]] = {}
        for i in range(0, len(session_ids), _LOCK_CHUNK):
            chunk = session_ids[i:i + _LOCK_CHUNK]
            self._exec(cur, "SELECT session_id, last_seq, status, started_at FROM "
                       f"rm_sessions WHERE session_id IN ({', '.join('?' for _ in chunk)}) "
                       "ORDER BY session_id" + self.lock_rows, chunk)
            out.update((str(r[0]), (int(r[1]), r[2], str(r[3]))) for r in cur.fetchall())
        return out

    def _errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    def _lock_notices(self, cur: Any) -> None:
        """Serialise the transactions that insert notices, so that ``id`` order is
        commit order (a reader after position ``n`` never misses a smaller id that
        commits later). SQLite's write transactions are serial already."""

    # -- for the notifier (api.notify.outbox): its own tables, in the same database ---

    @contextlib.contextmanager
    def transaction(self) -> Iterator[StoreCursor]:
        """One write transaction (committed on exit, rolled back on an error);
        errors of the database become :class:`ReadModelError`."""
        try:
            with self._write_lock, self._transaction() as cur:
                yield StoreCursor(self, cur)
        except self._errors() as err:
            raise ReadModelError(f"the read model ({self.where}) cannot be written: {err}"
                                 ) from err

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One read (``?`` placeholders), on this thread's connection."""
        return self._query(sql, params)

    # -- plumbing ---------------------------------------------------------------------

    def _sql(self, sql: str) -> str:
        if self.placeholder == "?":
            return sql
        out = self._sql_cache.get(sql)
        if out is None:
            out = self._sql_cache[sql] = sql.replace("?", self.placeholder)
        return out

    def _exec(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        return cur.execute(self._sql(sql), params)

    def _many(self, cur: Any, sql: str, rows: list[Sequence[Any]]) -> None:
        if rows:
            cur.executemany(self._sql(sql), rows)

    def _reader(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._run_query(self._reader(), self._sql(sql), params)
        except self._errors() as err:
            self._local.conn = None
            raise ReadModelError(f"the read model ({self.where}) cannot be read: {err}"
                                 ) from err

    def _run_query(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return conn.execute(sql, params).fetchall()

    def create_schema(self) -> None:
        with self._transaction() as cur:
            for ddl in DDL:
                self._exec(cur, ddl)
            for ddl in NOTICES_DDL:
                self._exec(cur, ddl.format(id=self.id_column))
            self._exec(cur, "INSERT INTO rm_meta (key, value) VALUES ('schema', ?) "
                       "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       (SCHEMA_VERSION,))

    # -- writes -----------------------------------------------------------------------

    def apply(self, batch: SessionBatch) -> bool:
        """Write one batch; False (nothing written) when the store already reflects it
        (:meth:`apply_many` of one)."""
        return self.apply_many([batch]) > 0

    def apply_many(self, batches: Sequence[SessionBatch]) -> int:
        """Write several sessions' batches in ONE transaction (the group writer's round,
        ``writer.py``): each as :meth:`apply` would (only what is after the stored
        ``last_seq``; nothing when the store reflects it), one batch per session; how
        many wrote anything. The sessions' rows are read (PostgreSQL: locked) in one
        query, in session id order, after the notices' lock when any batch has
        notices: two exporters' rounds wait for each other, never deadlock."""
        ordered = sorted(batches, key=lambda b: b.session_id)
        if len({b.session_id for b in ordered}) != len(ordered):
            raise ValueError("apply_many: one batch per session (merge them first)")
        if not ordered:
            return 0
        try:
            with self._write_lock, self._transaction() as cur:
                if any(b.notices for b in ordered):
                    self._lock_notices(cur)
                stored = self._lock_sessions(cur, [b.session_id for b in ordered])
                todo = []
                for b in ordered:
                    row = stored.get(b.session_id)
                    if row is None:
                        todo.append(b)
                    elif row[0] < b.session.last_seq:
                        todo.append(b.since(row[0]) if b.holds_seq(row[0]) else b)
                self._write_all(cur, todo, notices_locked=True, stored=stored)
                return len(todo)
        except self._errors() as err:
            raise ReadModelError(f"the read model ({self.where}) cannot be written: {err}"
                                 ) from err

    def replace(self, batch: SessionBatch) -> None:
        """The session's rows are exactly ``batch`` (a full one), whatever was stored."""
        try:
            with self._write_lock, self._transaction() as cur:
                for table in TABLES:
                    self._exec(cur, f"DELETE FROM {table} WHERE session_id = ?",
                               (batch.session_id,))
                self._write(cur, batch)
        except self._errors() as err:
            raise ReadModelError(f"the read model ({self.where}) cannot be written: {err}"
                                 ) from err

    def reset(self) -> None:
        """Drop every row (a rebuild starts here)."""
        try:
            with self._write_lock, self._transaction() as cur:
                for table in TABLES:
                    self._exec(cur, f"DELETE FROM {table}")
        except self._errors() as err:
            raise ReadModelError(f"the read model ({self.where}) cannot be reset: {err}"
                                 ) from err

    def _write(self, cur: Any, b: SessionBatch) -> None:
        self._write_all(cur, [b])

    def _write_all(self, cur: Any, batches: Sequence[SessionBatch],
                   notices_locked: bool = False,
                   stored: dict[str, tuple[int, str | None, str]] | None = None) -> None:
        """The rows of ``batches`` (one per session), one statement per table;
        ``stored``: the sessions' stored ``(last_seq, status, started_at)`` (a session
        whose indexed columns are as stored is updated in the others only)."""
        if not batches:
            return
        now = _now()
        stored = stored or {}
        sessions, updates, contracts, facts, history = [], [], [], [], []
        access_of, access, lineage, notices = [], [], [], []
        for b in batches:
            sid, s = b.session_id, b.session
            values = list(_session_values(s))
            for i in _BOOL_AT:  # PostgreSQL's INTEGER takes no bool
                values[i] = int(values[i])
            values[_STARTED_AT] = s.started_at or ""
            values.append(now)
            row = stored.get(sid)
            if row is not None and row[1] == s.status and row[2] == values[_STARTED_AT]:
                updates.append((*_unindexed(values), sid))
            else:
                sessions.append(values)
            contracts += [(sid, c.ordinal, c.execution_id, c.status, c.entered_state_at,
                           c.snapshot, c.transitions, c.seq) for c in b.contracts]
            facts += [(sid, f.ordinal, f.body, f.seq) for f in b.facts]
            history += [(sid, h.ordinal, h.body, h.seq) for h in b.history]
            if b.access is not None:
                access_of.append((sid,))
                access += [(sid, role, entry, entry.lower()) for role, entry in b.access]
            if b.forked_from is not None:
                lineage.append((sid, *b.forked_from))
            notices += [(n.notice_id, n.session_id, n.seq, n.kind, n.at, n.body)
                        for n in b.notices]
        self._many(cur, UPSERT_SESSION, sessions)
        self._many(cur, UPDATE_SESSION, updates)
        self._many(cur, UPSERT_CONTRACT, contracts)
        self._many(cur, _upsert_entry("rm_facts"), facts)
        self._many(cur, _upsert_entry("rm_history"), history)
        self._many(cur, "DELETE FROM rm_access WHERE session_id = ?", access_of)
        self._many(cur, "INSERT INTO rm_access (session_id, role, entry, entry_lower) "
                   "VALUES (?, ?, ?, ?)", access)
        self._many(cur, "INSERT INTO rm_lineage (session_id, parent_id, parent_seq) "
                   "VALUES (?, ?, ?) ON CONFLICT (session_id) DO NOTHING", lineage)
        if notices:
            if not notices_locked:
                self._lock_notices(cur)
            self._many(cur, INSERT_NOTICE, notices)

    # -- reads ------------------------------------------------------------------------

    def heads(self) -> dict[str, tuple[int, str]]:
        """Every session's ``(last_seq, last_hash)``."""
        return {r[0]: (int(r[1]), r[2]) for r in self._query(
            "SELECT session_id, last_seq, last_hash FROM rm_sessions")}

    def session(self, session_id: str) -> dict[str, Any] | None:
        rows = self._query(f"SELECT {', '.join(_SESSION_COLS)} FROM rm_sessions "
                           "WHERE session_id = ?", (session_id,))
        return _session_dict(rows[0]) if rows else None

    def contracts(self, session_id: str, offset: int, limit: int) -> list[dict[str, Any]]:
        return [{"snapshot": json.loads(r[0]), "transitions": json.loads(r[1])}
                for r in self._query(
                    "SELECT snapshot, transitions FROM rm_contracts WHERE session_id = ? "
                    "AND ordinal >= ? AND ordinal < ? ORDER BY ordinal",
                    (session_id, offset, offset + limit))]

    def contract(self, session_id: str, execution_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT snapshot, transitions FROM rm_contracts "
                           "WHERE session_id = ? AND execution_id = ?",
                           (session_id, execution_id))
        return ({"snapshot": json.loads(rows[0][0]), "transitions": json.loads(rows[0][1])}
                if rows else None)

    def _entries(self, table: str, session_id: str, offset: int, limit: int
                 ) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in self._query(
            f"SELECT body FROM {table} WHERE session_id = ? AND ordinal >= ? AND ordinal < ? "
            "ORDER BY ordinal", (session_id, offset, offset + limit))]

    def facts(self, session_id: str, offset: int, limit: int) -> list[dict[str, Any]]:
        return self._entries("rm_facts", session_id, offset, limit)

    def history(self, session_id: str, offset: int, limit: int) -> list[dict[str, Any]]:
        return self._entries("rm_history", session_id, offset, limit)

    def access(self, session_id: str) -> dict[str, list[str]]:
        """Who the session names, by role (``access.py``): ``owner``, ``approver``,
        ``viewer``, ``answer``; empty when it names nobody (or is not stored)."""
        out: dict[str, list[str]] = {}
        for role, entry in self._query("SELECT role, entry FROM rm_access WHERE "
                                       "session_id = ? ORDER BY role, entry", (session_id,)):
            out.setdefault(role, []).append(entry)
        return out

    def list_sessions(self, status: str | None, limit: int, page_token: str | None,
                      audience: Audience | None = None
                      ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first; ``status``: only sessions in it (and, unless it is terminal,
        still running: a terminated session keeps its last status); ``audience``:
        only those it may see (and answer), filtered in the query."""
        where: list[str] = []
        params: list[Any] = []
        if audience is not None:
            if audience.waiting_for and not audience.answers:
                return [], None
            _audience_filter(audience, where, params)
        if status is not None:
            where.append("status = ?")
            params.append(status)
            if status not in TERMINAL_STATUSES:
                where.append("execution_status = 'running'")
        if page_token:
            started, sid = session_list_position(page_token)
            where.append("(started_at < ? OR (started_at = ? AND session_id < ?))")
            params += [started, started, sid]
        sql = (f"SELECT {', '.join(_SESSION_COLS)} FROM rm_sessions"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY started_at DESC, session_id DESC LIMIT ?")
        rows = [_session_dict(r) for r in self._query(sql, (*params, limit + 1))]
        more = len(rows) > limit
        rows = rows[:limit]
        token = session_list_token(rows[-1]["started_at"], rows[-1]["session_id"]) \
            if more and rows else None
        return rows, token

    def notices(self, after: int, limit: int) -> list[dict[str, Any]]:
        """The notices written after ``id`` ``after``, in order (``id``, ``notice_id``,
        ``session_id``, ``seq``, ``kind``, ``at``, ``body`` decoded)."""
        return [{"id": int(r[0]), "notice_id": r[1], "session_id": r[2], "seq": int(r[3]),
                 "kind": r[4], "at": r[5], "body": json.loads(r[6])}
                for r in self._query("SELECT id, notice_id, session_id, seq, kind, at, body "
                                     "FROM rm_notices WHERE id > ? ORDER BY id LIMIT ?",
                                     (after, limit))]

    def children(self, session_id: str) -> list[dict[str, Any]]:
        """The forks of ``session_id`` (at most :data:`MAX_CHILDREN`): each fork's id
        and the line of this session's log it began at."""
        return [{"session_id": r[0], "seq": int(r[1])} for r in self._query(
            "SELECT session_id, parent_seq FROM rm_lineage WHERE parent_id = ? "
            "ORDER BY session_id LIMIT ?", (session_id, MAX_CHILDREN))]

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table, ordered, without ``updated_at`` (tests compare)."""
        out = {}
        for table in TABLES:
            rows = self._query(f"SELECT * FROM {table} ORDER BY session_id" + {
                "rm_sessions": "", "rm_access": ", role, entry", "rm_lineage": ""
            }.get(table, ", ordinal"))
            if table == "rm_sessions":
                rows = [r[:-1] for r in rows]  # updated_at is last
            out[table] = [tuple(r) for r in rows]
        return out


class StoreCursor:
    """A cursor in one of :meth:`SqlStore.transaction`'s transactions: ``?``
    placeholders whatever the backend."""

    def __init__(self, store: SqlStore, cur: Any) -> None:
        self.store, self.cur = store, cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows when it returns any."""
        self.store._exec(self.cur, sql, params)
        return list(self.cur.fetchall()) if self.cur.description is not None else []

    def executemany(self, sql: str, rows: list[Sequence[Any]]) -> None:
        self.store._many(self.cur, sql, rows)

    @property
    def rowcount(self) -> int:
        return int(self.cur.rowcount)


def _named(audience: Audience, roles: Sequence[str], params: list[Any]) -> str:
    """SQL: the session names the audience in one of ``roles`` (a set of session ids
    the indexes on ``rm_access`` find, not a probe per listed session)."""
    names = audience.names or ("",)
    in_roles = f"role IN ({', '.join('?' for _ in roles)})"
    sql = (f"SELECT session_id FROM rm_access WHERE entry IN "
           f"({', '.join('?' for _ in names)}) AND {in_roles}")
    params += names
    params += roles
    if audience.email:
        sql += f" UNION SELECT session_id FROM rm_access WHERE entry_lower = ? AND {in_roles}"
        params.append(audience.email.lower())
        params += roles
    return f"session_id IN ({sql})"


def _audience_filter(audience: Audience, where: list[str], params: list[Any]) -> None:
    if not audience.sees_all:
        where.append(_named(audience, SEE_ROLES, params))
    if audience.waiting_for:
        where.append("pending IS NOT NULL AND execution_status = 'running'")
        theirs = _named(audience, (ANSWER,), params)
        unaddressed = ("NOT EXISTS (SELECT 1 FROM rm_access a WHERE a.session_id = "
                       "rm_sessions.session_id AND a.role = ?)")  # the primary key's prefix
        params.append(ANSWER)
        if audience.sees_all:
            where.append(f"({theirs} OR {unaddressed})")
        else:
            where.append(f"({theirs} OR ({unaddressed} AND "
                         f"{_named(audience, ('owner', 'approver'), params)}))")


def _session_dict(r: Sequence[Any]) -> dict[str, Any]:
    d = dict(zip(_SESSION_COLS, r, strict=True))
    for b in _BOOLS:
        d[b] = bool(d[b])
    d["pending"] = json.loads(d["pending"]) if d["pending"] else None
    d["status_counts"] = json.loads(d["status_counts"])
    return d


def session_row_of(d: dict[str, Any]) -> SessionRow:  # pragma: no cover - convenience
    return SessionRow(**{c: d[c] for c in SESSION_COLUMNS})
