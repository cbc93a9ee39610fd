"""Notices: what is worth telling people, read off a session's log (issue 26).

A fold over log lines (pure, no I/O) beside ``log_view.py`` and ``access.py``: each
line that opens a request to a person, reminds or escalates it, lets it expire or
decides it by its timeout, and the session's end, yields one notice row. The read
model stores them in ``rm_notices`` in the same transaction as the rows of the batch
they come from (``INSERT ... ON CONFLICT DO NOTHING`` on ``notice_id``, so a
re-applied batch, a ``replace`` or a rebuild never makes a second one); the notifier
(``api/notify/outbox.py``) routes them into its outbox, in ``id`` order.

A notice's ``body`` holds :class:`api.notify.model.Notice`'s fields as a plain dict
(observation does not import api); ``notice_id`` is ``"<session_id>:<seq>"``: the
same line always makes the same notice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from observation import event_types as ev
from observation.read_model.json_text import dumps

ISSUE_REMINDED, ISSUE_ESCALATED = ev.ISSUE_REMINDED, ev.ISSUE_ESCALATED
EXPIRED_RESOLUTION = "interaction.reply.expired"
AUTO_DECIDED_RESOLUTION = "auto_decided"
#: The request kinds that ask no one a question worth a message.
_SILENT_KINDS = ("message",)
#: Bounds on what a notice copies from a line (a notice is a message, not an archive).
MAX_PROMPT = 4000


@dataclass(frozen=True)
class NoticeRow:
    notice_id: str  # "<session_id>:<seq>"
    session_id: str
    seq: int
    kind: str  # workflows.config.NoticeKind
    at: str  # the line's time (ISO 8601)
    body: str  # JSON: api.notify.model.Notice's fields


def _strings(value: Any) -> list[str]:
    return [e for e in value if isinstance(e, str)] if isinstance(value, list) else []


@dataclass
class NoticeFold:
    """A session's notices, line by line: :meth:`apply` returns the line's notice,
    if it makes one."""

    session_id: str
    title: str = ""
    owner: str | None = None
    approvers: list[str] = field(default_factory=list)
    notify: list[dict[str, Any]] = field(default_factory=list)
    # the open requests (by issue id): what later notices about them repeat
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, event: dict[str, Any]) -> NoticeRow | None:
        handler = NOTICE_FOLDS.get(event.get("type"))  # most lines tell no one: one lookup
        if handler is None:
            return None
        p = event.get("payload") or {}
        if not isinstance(p, dict):
            return None
        return handler(self, event, p)

    def _run_created(self, event: dict[str, Any], p: dict[str, Any]) -> None:
        self._created(p)

    def _reminded(self, event: dict[str, Any], p: dict[str, Any]) -> NoticeRow | None:
        return self._again(event, p, "reminded")

    def _escalated(self, event: dict[str, Any], p: dict[str, Any]) -> NoticeRow | None:
        return self._again(event, p, "escalated")

    def _ended(self, event: dict[str, Any], p: dict[str, Any]) -> NoticeRow:
        self.requests.clear()
        return self._row(event, "ended", {"status": p.get("status")})

    def _created(self, p: dict[str, Any]) -> None:
        config = p.get("config") if isinstance(p.get("config"), dict) else {}
        title = config.get("title")
        self.title = title if isinstance(title, str) else ""
        people = config.get("people") if isinstance(config.get("people"), dict) else {}
        owner = people.get("owner")
        self.owner = owner if isinstance(owner, str) else None
        self.approvers = _strings(people.get("approvers"))
        self.notify = [r for r in config.get("notify") or [] if isinstance(r, dict)]

    def _opened(self, event: dict[str, Any], p: dict[str, Any]) -> NoticeRow | None:
        issue, kind = p.get("issue_id"), p.get("kind")
        if not isinstance(issue, str) or "auto_decision" in p or kind in _SILENT_KINDS:
            return None  # decided by a rule (asks no one), or a plain message
        if issue in self.requests:
            return None  # the same request again (a new run of the session): told once
        prompt = p.get("prompt") if isinstance(p.get("prompt"), str) else ""
        asked = p.get("asked") if isinstance(p.get("asked"), dict) else None
        request = {"request_id": issue, "request_kind": kind if isinstance(kind, str) else None,
                   "prompt": prompt[:MAX_PROMPT], "digest": p.get("digest"), "asked": asked,
                   "addressees": _strings(p.get("approvers")), "escalated_to": []}
        self.requests[issue] = request
        return self._row(event, "opened", request)

    def _again(self, event: dict[str, Any], p: dict[str, Any], kind: str) -> NoticeRow | None:
        issue = p.get("issue_id")
        request = self.requests.get(issue) if isinstance(issue, str) else None
        if request is None:  # a request the log never opened (or already closed)
            return None
        if kind == "escalated":
            request["addressees"] = _strings(p.get("approvers"))
            request["escalated_to"] = _strings(p.get("escalated_to"))
        if isinstance(p.get("digest"), str):
            request["digest"] = p["digest"]
        return self._row(event, kind, request)

    def _resolved(self, event: dict[str, Any], p: dict[str, Any]) -> NoticeRow | None:
        issue = p.get("issue_id")
        request = self.requests.pop(issue, None) if isinstance(issue, str) else None
        how = p.get("resolution")
        if request is None or how not in (EXPIRED_RESOLUTION, AUTO_DECIDED_RESOLUTION):
            return None
        if how == EXPIRED_RESOLUTION:
            return self._row(event, "expired", request)
        answer = p.get("answer") if isinstance(p.get("answer"), dict) else None
        by = p.get("by") if isinstance(p.get("by"), str) else None
        return self._row(event, "auto_decided", {**request, "answer": answer, "by": by})

    def _row(self, event: dict[str, Any], kind: str, fields: dict[str, Any]) -> NoticeRow:
        seq = int(event["seq"])
        at = event.get("ts") or event.get("timestamp") or ""
        body = {"notice_id": f"{self.session_id}:{seq}", "kind": kind,
                "session_id": self.session_id, "seq": seq, "at": at, "title": self.title,
                "owner": self.owner, "approvers": list(self.approvers),
                "session_notify": list(self.notify), **fields}
        return NoticeRow(body["notice_id"], self.session_id, seq, kind, str(at),
                         dumps(body))


#: The lines that may make a notice (or set what later ones say), by type.
NOTICE_FOLDS: dict[Any, Callable[[NoticeFold, dict[str, Any], dict[str, Any]],
                                  NoticeRow | None]] = {
    ev.RUN_CREATED: NoticeFold._run_created, ev.ISSUE_OPENED: NoticeFold._opened,
    ISSUE_REMINDED: NoticeFold._reminded, ISSUE_ESCALATED: NoticeFold._escalated,
    ev.ISSUE_RESOLVED: NoticeFold._resolved, **dict.fromkeys(ev.END_TYPES, NoticeFold._ended),
}
