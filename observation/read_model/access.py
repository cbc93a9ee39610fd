"""Who may see and answer each session, folded from its log for the read model.

The session's people come from its config (the ``RUN_CREATED`` line carries it);
the pending request's approvers, rule, digest and approvals from the
``ISSUE_OPENED`` line and the approvals recorded after it; an escalation
(``ISSUE_ESCALATED``, issue 26) replaces its approvers. The store keeps them
as rows of ``rm_access`` (``session_id, role, entry``) so that the session list
filters by them in its query: ``owner``, ``approver`` and ``viewer`` (the
session's people) and ``answer`` (the pending request's own approvers, when its
rule names any).

Pure, no I/O: the fold beside ``observation.log_view`` (which stays the one
definition of the session's view); this adds only who is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from observation import event_types as ev

#: The rows' roles: the session's people, and the pending request's approvers.
#: Who sees a session in lists: its people, and whom its pending request asks.
SEE_ROLES = ("owner", "approver", "viewer", "answer")
ANSWER = "answer"  # the pending request's own approvers (a rule's)
#: What an ISSUE_OPENED line may carry about who decides (issue 24), copied into the
#: pending request the read model serves when present.
_PENDING_EXTRAS = ("asked", "digest", "approvers", "approvals_required", "rule",
                   "separation_of_duties", "editable")


@dataclass
class AccessFold:
    """The session's people and its pending request's deciders, as of the last line."""

    owner: str | None = None
    approvers: list[str] = field(default_factory=list)
    viewers: list[str] = field(default_factory=list)
    request_id: str | None = None
    pending: dict[str, Any] = field(default_factory=dict)  # the extras of the request
    approvals: list[dict[str, Any]] = field(default_factory=list)
    changed: bool = True  # the rows changed since ``take_changed``

    def apply(self, event: dict[str, Any]) -> None:
        handler = ACCESS_FOLDS.get(event["type"])  # most lines name no one: one lookup
        if handler is not None:
            handler(self, event.get("payload") or {})

    def _created(self, p: dict[str, Any]) -> None:
        people = (p.get("config") or {}).get("people") or {}
        owner = people.get("owner")
        self.owner = owner if isinstance(owner, str) else None
        self.approvers = [e for e in people.get("approvers") or [] if isinstance(e, str)]
        self.viewers = [e for e in people.get("viewers") or [] if isinstance(e, str)]
        self.changed = True

    def _opened(self, p: dict[str, Any]) -> None:
        self.request_id = p.get("issue_id")
        self.pending = {k: p[k] for k in _PENDING_EXTRAS if p.get(k) is not None}
        self.approvals = []
        self.changed = True

    def _resolved(self, p: dict[str, Any]) -> None:
        if p.get("issue_id") == self.request_id:
            self._clear()

    def _ended(self, p: dict[str, Any]) -> None:
        self._clear()

    def _reminded(self, p: dict[str, Any]) -> None:
        self._wait_step(ev.ISSUE_REMINDED, p)

    def _escalated(self, p: dict[str, Any]) -> None:
        self._wait_step(ev.ISSUE_ESCALATED, p)

    def _approved(self, p: dict[str, Any]) -> None:
        if self.request_id is not None and \
                p.get("issue_id", self.request_id) == self.request_id and \
                isinstance(p.get("principal"), dict):
            self.approvals.append(p["principal"])

    def _wait_step(self, kind: str, p: dict[str, Any]) -> None:
        """A reminder or an escalation of the pending request (issue 26): an escalation
        changes whom it is for (the ``answer`` rows: ``waiting_for=me``, may-see)."""
        if self.request_id is None or p.get("issue_id") != self.request_id:
            return
        if kind == ev.ISSUE_REMINDED:
            self.pending["reminded_at"] = p.get("reminded_at")
            return
        self.pending["approvers"] = [e for e in p.get("approvers") or [] if isinstance(e, str)]
        self.pending["escalated_to"] = [e for e in p.get("escalated_to") or []
                                        if isinstance(e, str)]
        self.pending["escalated_at"] = p.get("escalated_at")
        self.changed = True

    def _clear(self) -> None:
        if self.request_id is not None or self.pending:
            self.request_id, self.pending, self.approvals = None, {}, []
            self.changed = True

    def take_changed(self) -> bool:
        out, self.changed = self.changed, False
        return out

    @property
    def request_approvers(self) -> list[str]:
        found = self.pending.get("approvers") or []
        return [e for e in found if isinstance(e, str)]

    def rows(self) -> list[tuple[str, str]]:
        """``(role, entry)``: every entry once per role."""
        out = [("owner", self.owner)] if self.owner else []
        out += [("approver", e) for e in self.approvers]
        out += [("viewer", e) for e in self.viewers]
        out += [(ANSWER, e) for e in self.request_approvers]
        return list(dict.fromkeys(out))

    def pending_extras(self, request_id: str | None) -> dict[str, Any]:
        """What the served pending request gains (for ``request_id``, the one the
        session's view shows)."""
        if request_id is None or request_id != self.request_id:
            return {}
        extras = dict(self.pending)
        if self.approvals:
            extras["approvals"] = list(self.approvals)
        return extras


#: The lines the fold reads, by type (every other line passes by).
ACCESS_FOLDS = {
    ev.RUN_CREATED: AccessFold._created, ev.ISSUE_OPENED: AccessFold._opened,
    ev.ISSUE_RESOLVED: AccessFold._resolved, ev.RUN_COMPLETED: AccessFold._ended,
    ev.RUN_FAILED: AccessFold._ended, ev.ISSUE_REMINDED: AccessFold._reminded,
    ev.ISSUE_ESCALATED: AccessFold._escalated,
    ev.ISSUE_APPROVAL_RECORDED: AccessFold._approved,  # one approval of a two-person request
}
