"""The notifier's durable outbox, in the read model's database (docs/notifications.md).

Two tables next to ``rm_notices`` (SQLite in ``up``, PostgreSQL on a cluster):

* ``notify_position`` — how far the router has read ``rm_notices`` (by ``id``).
* ``notify_outbox`` — one row per message (a notice to one channel and, for e-mail,
  one address): ``message_id`` = ``"msg_" + sha256("<notice_id>|<channel>|<recipient
  or ''>")[:32]``, so the same notice always makes the same ids; the message as
  rendered when it was routed (every retry sends the same bytes); its state
  (``pending``, ``delivered``, ``dead``), attempts, ``next_at`` and window.

Routing (:meth:`Outbox.route`) reads the notices after the position, expands each
into messages (``api/notify/routing.py`` and the links, done by the caller), and in
ONE transaction inserts them (``ON CONFLICT DO NOTHING`` on the id) and moves the
position, only if nobody moved it meanwhile: a router killed at any point either
did all of it or none of it, and two routers never route a notice twice.

Delivery (:meth:`Outbox.claim` then :meth:`Outbox.delivered` / :meth:`Outbox.failed`):
a claim takes due rows (``state = 'pending' AND next_at <= now``, one index range)
and moves their ``next_at`` a lease ahead, in one transaction (PostgreSQL: ``FOR
UPDATE SKIP LOCKED``): two notifiers never send a row at once, and the rows a killed
notifier had claimed are due again when its lease runs out. A failure waits
``min(backoff_s * 2**attempts, max_backoff_s)`` (with jitter), never past the window;
a permanent failure, or one at the window's end, makes the row a dead letter.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from api.notify.model import Message
from observation.read_model.store import ReadModelError, ReadStore

log = logging.getLogger("hitlflow.notify")

ROUTER = "router"  # the position's name (one router position per database)
STATES = ("pending", "delivered", "dead")
MAX_ERROR = 500  # characters of the last error kept

DDL = (
    """CREATE TABLE IF NOT EXISTS notify_outbox (
        message_id TEXT PRIMARY KEY, notice_id TEXT NOT NULL, channel TEXT NOT NULL,
        recipient TEXT, kind TEXT NOT NULL, session_id TEXT NOT NULL, request_id TEXT,
        body TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
        next_at DOUBLE PRECISION NOT NULL, window_s DOUBLE PRECISION NOT NULL,
        window_until DOUBLE PRECISION NOT NULL, lease_owner TEXT, last_error TEXT,
        created_at DOUBLE PRECISION NOT NULL, delivered_at DOUBLE PRECISION,
        dead_at DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS notify_outbox_due ON notify_outbox (state, next_at)",
    "CREATE INDEX IF NOT EXISTS notify_outbox_dead ON notify_outbox (state, dead_at)",
    """CREATE TABLE IF NOT EXISTS notify_position (
        name TEXT PRIMARY KEY, last_id BIGINT NOT NULL)""",
)
_INSERT = ("INSERT INTO notify_outbox (message_id, notice_id, channel, recipient, kind, "
           "session_id, request_id, body, state, attempts, next_at, window_s, window_until, "
           "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?) "
           "ON CONFLICT (message_id) DO NOTHING")
_DEAD_COLUMNS = ("message_id", "channel", "recipient", "kind", "session_id", "request_id",
                 "attempts", "last_error", "created_at", "dead_at")


def message_id(notice_id: str, channel: str, recipient: str | None) -> str:
    """The message's stable id: the same notice, channel and recipient, the same id."""
    digest = hashlib.sha256(f"{notice_id}|{channel}|{recipient or ''}".encode()).hexdigest()
    return "msg_" + digest[:32]


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(float(t), UTC).isoformat(timespec="milliseconds"
                                                           ).replace("+00:00", "Z")


def parse_at(value: str) -> float | None:
    """An ISO 8601 time (a notice's ``at``) as epoch seconds; None when unreadable."""
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


class PositionMoved(Exception):
    """Another router moved the position meanwhile: nothing was written."""


class Outbox:
    """The outbox and the router's position, in ``store``'s database."""

    def __init__(self, store: ReadStore) -> None:
        self.store: Any = store
        self._position: int | None = None  # as this router last wrote or read it
        with self.store.transaction() as tx:
            for ddl in DDL:
                tx.execute(ddl)
            tx.execute("INSERT INTO notify_position (name, last_id) VALUES (?, 0) "
                       "ON CONFLICT (name) DO NOTHING", (ROUTER,))

    # -- routing ------------------------------------------------------------------------

    def position(self) -> int:
        rows = self.store.query("SELECT last_id FROM notify_position WHERE name = ?", (ROUTER,))
        return int(rows[0][0]) if rows else 0

    def route(self, expand: Callable[[dict[str, Any]], Iterable[Message]], *,
              window_s: float, now: float | None = None, limit: int = 500) -> int:
        """Route the notices after the position (at most ``limit``): each through
        ``expand(notice body) -> messages``; a notice older than ``window_s`` is
        skipped (a new read model over old logs floods no one), and so is one that
        ``expand`` cannot route (logged by its id). Returns how many notices were
        read (0: nothing new). Raises :class:`PositionMoved` when another router
        got there first (nothing written)."""
        now = time.time() if now is None else now
        after = self._position if self._position is not None else self.position()
        notices = self.store.notices(after, limit)
        if not notices:
            return 0
        rows: list[tuple[Any, ...]] = []
        for n in notices:
            at = parse_at(n["at"])
            if at is not None and at < now - window_s:
                continue  # older than the window: nobody is told now
            try:
                messages = list(expand(n["body"]))
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                log.warning("notice %s cannot be routed (%s); skipped", n["notice_id"],
                            type(err).__name__)
                continue
            for m in messages:
                rows.append((m.message_id, n["notice_id"], m.channel, m.recipient, n["kind"],
                             n["session_id"], m.notice.request_id, m.model_dump_json(),
                             now, window_s, now + window_s, now))
        last = notices[-1]["id"]
        with self.store.transaction() as tx:
            tx.execute("UPDATE notify_position SET last_id = ? WHERE name = ? AND last_id = ?",
                       (last, ROUTER, after))
            if tx.rowcount != 1:
                self._position = None  # read it again next time
                raise PositionMoved(f"the router's position moved from {after}")
            tx.executemany(_INSERT, rows)
        self._position = last
        return len(notices)

    # -- delivery -----------------------------------------------------------------------

    def claim(self, owner: str, limit: int, lease_s: float, *,
              now: float | None = None) -> list[tuple[Message, int]]:
        """Take up to ``limit`` due messages for ``lease_s`` seconds: each with the
        attempts made so far. Not due again before the lease runs out."""
        now = time.time() if now is None else now
        if not self.store.query("SELECT 1 FROM notify_outbox WHERE state = 'pending' "
                                "AND next_at <= ? LIMIT 1", (now,)):
            return []  # idle: one indexed read, no write transaction
        with self.store.transaction() as tx:
            rows = tx.execute(
                "SELECT message_id, body, attempts FROM notify_outbox WHERE state = 'pending' "
                "AND next_at <= ? ORDER BY next_at LIMIT ?" + self.store.skip_locked,
                (now, limit))
            if not rows:
                return []
            tx.executemany("UPDATE notify_outbox SET next_at = ?, lease_owner = ? "
                           "WHERE message_id = ?", [(now + lease_s, owner, r[0]) for r in rows])
        out = []
        for mid, body, attempts in rows:
            try:
                out.append((Message.model_validate_json(body), int(attempts)))
            except ValueError as err:  # a row no sender can read: dead at once
                self.failed(mid, f"unreadable message: {type(err).__name__}", permanent=True,
                            backoff_s=0, max_backoff_s=0, now=now)
        return out

    def delivered(self, message_id: str, *, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self.store.transaction() as tx:
            tx.execute("UPDATE notify_outbox SET state = 'delivered', delivered_at = ?, "
                       "attempts = attempts + 1, lease_owner = NULL WHERE message_id = ? "
                       "AND state = 'pending'", (now, message_id))

    def failed(self, message_id: str, error: str, *, permanent: bool, backoff_s: float,
               max_backoff_s: float, now: float | None = None) -> str:
        """Record a failed attempt: retried later (``"pending"``) or a dead letter
        (``"dead"``: permanent, or the window is over)."""
        now = time.time() if now is None else now
        error = error[:MAX_ERROR]
        with self.store.transaction() as tx:
            rows = tx.execute("SELECT attempts, window_until FROM notify_outbox WHERE "
                              "message_id = ? AND state = 'pending'", (message_id,))
            if not rows:
                return "gone"
            attempts, until = int(rows[0][0]), float(rows[0][1])
            if permanent or now >= until:
                tx.execute("UPDATE notify_outbox SET state = 'dead', dead_at = ?, "
                           "attempts = ?, last_error = ?, lease_owner = NULL "
                           "WHERE message_id = ?", (now, attempts + 1, error, message_id))
                return "dead"
            wait = min(backoff_s * 2 ** min(attempts, 40), max_backoff_s)
            wait *= random.uniform(0.8, 1.2)  # jitter
            tx.execute("UPDATE notify_outbox SET next_at = ?, attempts = ?, last_error = ?, "
                       "lease_owner = NULL WHERE message_id = ?",
                       (min(now + wait, until), attempts + 1, error, message_id))
            return "pending"

    def next_due(self) -> float | None:
        """When the next pending message is due (epoch seconds), if any."""
        rows = self.store.query("SELECT MIN(next_at) FROM notify_outbox WHERE state = 'pending'")
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    # -- what operators see and do (the API, the CLI, the inbox) ------------------------

    def dead_letters(self, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """The messages that could not be delivered, the latest first."""
        rows = self.store.query(
            f"SELECT {', '.join(_DEAD_COLUMNS)} FROM notify_outbox WHERE state = 'dead' "
            "ORDER BY dead_at DESC, message_id LIMIT ? OFFSET ?", (limit, offset))
        out = []
        for r in rows:
            d = dict(zip(_DEAD_COLUMNS, r, strict=True))
            d["attempts"] = int(d["attempts"])
            d["created_at"], d["dead_at"] = iso(d["created_at"]), iso(d["dead_at"])
            out.append(d)
        return out

    def resend(self, message_id: str) -> bool:
        """A dead letter back to pending, due now, with a new window, the same id
        (and the same bytes); False when there is no such dead letter."""
        now = time.time()
        with self.store.transaction() as tx:
            tx.execute("UPDATE notify_outbox SET state = 'pending', next_at = ?, attempts = 0, "
                       "window_until = ? + window_s, dead_at = NULL WHERE message_id = ? "
                       "AND state = 'dead'", (now, now, message_id))
            return tx.rowcount == 1

    def resend_dead(self) -> int:
        """Every dead letter back to pending; how many."""
        now = time.time()
        with self.store.transaction() as tx:
            tx.execute("UPDATE notify_outbox SET state = 'pending', next_at = ?, attempts = 0, "
                       "window_until = ? + window_s, dead_at = NULL WHERE state = 'dead'",
                       (now, now))
            return tx.rowcount

    def counts(self) -> dict[str, int]:
        """How many messages are pending, delivered and dead."""
        out = dict.fromkeys(STATES, 0)
        for state, n in self.store.query(
                "SELECT state, COUNT(*) FROM notify_outbox GROUP BY state"):
            out[state] = int(n)
        return out

    def messages(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Every message (tests and the bench): id, channel, recipient, kind, state,
        attempts, notice_id."""
        sql = ("SELECT message_id, channel, recipient, kind, state, attempts, notice_id "
               "FROM notify_outbox")
        rows = (self.store.query(sql + " WHERE session_id = ? ORDER BY created_at, message_id",
                                 (session_id,)) if session_id is not None
                else self.store.query(sql + " ORDER BY created_at, message_id"))
        cols = ("message_id", "channel", "recipient", "kind", "state", "attempts", "notice_id")
        return [dict(zip(cols, r, strict=True)) for r in rows]


__all__ = ["Outbox", "PositionMoved", "ReadModelError", "message_id"]
