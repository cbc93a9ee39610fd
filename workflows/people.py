"""Who decides, as data and pure answers (no Temporal import).

A request is made by a :class:`Principal` (issuer, subject, display name, groups,
role), established by the API from its credentials, never from a body. A session's
config names its :class:`People` (owner, approvers, viewers: subjects, e-mail
addresses or ``group:NAME``) and its :class:`DecisionRule` table. The ``may_*``
functions answer "may this principal do that here?" with ``None`` or a
:class:`Refusal` naming the rule: the API refuses with 403 from them, the workflow
checks the same functions again for what reaches it by other ways.

Entries match a principal's ``subject`` or ``email``, never its display name (which
a person may choose at their identity provider).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workflows.canonical import canonical_json

Role = Literal["viewer", "approver", "operator", "admin"]
#: Ascending: each role may do what the ones before it may.
ROLES: tuple[Role, ...] = ("viewer", "approver", "operator", "admin")
PrincipalKind = Literal["person", "service", "temporal"]
GROUP_PREFIX = "group:"
#: Entries and names are bounded before they reach history.
_NAME = Field(min_length=1, max_length=200)


class PrincipalRef(BaseModel):
    """Who it was, as the log records it: enough to attribute, nothing secret."""

    issuer: str = Field(min_length=1, max_length=500)
    subject: str = Field(min_length=1, max_length=500)
    name: str = Field(default="", max_length=200)


class Principal(PrincipalRef):
    """Who makes a request, as the API established it."""

    groups: list[str] = Field(default_factory=list, max_length=200)
    role: Role = "viewer"
    kind: PrincipalKind = "person"
    email: str | None = Field(default=None, max_length=320)

    def ref(self) -> PrincipalRef:
        return PrincipalRef(issuer=self.issuer, subject=self.subject, name=self.name)

    def at_least(self, role: Role) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)

    def is_named_by(self, entry: str) -> bool:
        """Whether an entry of a people list or a rule names this principal."""
        if entry.startswith(GROUP_PREFIX):
            return entry[len(GROUP_PREFIX):] in self.groups
        if entry == self.subject:
            return True
        return self.email is not None and entry.lower() == self.email.lower()

    def named_by_any(self, entries: Iterable[str]) -> bool:
        return any(self.is_named_by(e) for e in entries)


#: Answers that arrive as signals or updates straight through Temporal (the Temporal
#: UI, the ``temporal`` CLI) carry no principal of hitlflow's: they are recorded as
#: coming from whoever holds Temporal access (or refused: ``temporal_replies``).
TEMPORAL_ACCESS = Principal(issuer="temporal", subject="temporal-access",
                            name="whoever holds Temporal access", role="operator",
                            kind="temporal")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class People(_Strict):
    """Who may see and answer a session. The API sets ``owner`` to the principal who
    starts it. Empty lists take the server's defaults (``HITLFLOW_DEFAULT_APPROVERS``,
    ``HITLFLOW_DEFAULT_VIEWERS``)."""

    owner: str | None = Field(default=None, min_length=1, max_length=500)
    approvers: list[str] = Field(default_factory=list, max_length=100)
    viewers: list[str] = Field(default_factory=list, max_length=100)

    def everyone(self) -> list[str]:
        return [*([self.owner] if self.owner else []), *self.approvers, *self.viewers]


RuleKind = Literal["tool_call", "step", "question"]
SafetyName = Literal["read_only", "irreversible", "at_most_once", "reversible"]


class DecisionRule(_Strict):
    """One row of a session's decision rules (and the server's): the first row that
    matches what is asked decides how it is decided. A ``tool_call`` row matches by
    ``tool``, ``server``, ``arguments`` patterns and ``safety`` class: ``allow`` runs
    the call without asking, ``deny`` refuses it without asking, ``ask`` asks
    ``approvers`` (empty: the session's approvers and owner). A ``step`` row (a plan
    step's approval) or a ``question`` row (the agent's confirm, choose and form
    requests) only says who answers: ``approvers``, ``approvals_required``,
    ``separation_of_duties``."""

    name: str = Field(default="", max_length=200)
    kind: RuleKind = "tool_call"
    safety: SafetyName | None = None  # tool calls of this safety class only
    tool: str = Field(default="*", min_length=1, max_length=200)  # fnmatch, case-sensitive
    server: str = Field(default="*", min_length=1, max_length=200)
    # argument name -> fnmatch pattern of its value (a string, or canonical JSON).
    arguments: dict[str, str] = Field(default_factory=dict, max_length=50)
    decision: Literal["ask", "allow", "deny"] = "ask"
    approvers: list[str] = Field(default_factory=list, max_length=100)
    approvals_required: int = Field(default=1, ge=1, le=10)
    separation_of_duties: bool = False  # the owner may not approve their own agent's call
    editable: bool = False  # an approver may answer with edited arguments

    @model_validator(mode="after")
    def _fits_its_kind(self) -> DecisionRule:
        if self.kind != "tool_call" and (
                self.decision != "ask" or self.editable or self.safety is not None
                or self.arguments or (self.tool, self.server) != ("*", "*")):
            raise ValueError(f"a {self.kind} rule only says who answers (approvers, "
                             "approvals_required, separation_of_duties): tool, server, "
                             "arguments, safety, editable and allow/deny are for tool_call "
                             "rules")
        return self

    def label(self, index: int) -> str:
        return self.name or f"rules[{index}]"

    def matches(self, server: str | None, tool: str, arguments: dict[str, Any],
                safety: str | None = None) -> bool:
        if self.kind != "tool_call":
            return False
        if self.safety is not None and safety != self.safety:
            return False
        if not fnmatchcase(tool, self.tool) or not fnmatchcase(server or "", self.server):
            return False
        for name, pattern in self.arguments.items():
            if name not in arguments:
                return False
            value = arguments[name]
            text = value if isinstance(value, str) else canonical_json(value)
            if not fnmatchcase(text, pattern):
                return False
        return True


def rule_for(rules: list[DecisionRule], server: str | None, tool: str,
             arguments: dict[str, Any], safety: str | None = None
             ) -> tuple[str, DecisionRule] | None:
    """The first rule that matches a tool call, with its label, or None."""
    for index, rule in enumerate(rules):
        if rule.matches(server, tool, arguments, safety):
            return rule.label(index), rule
    return None


def rule_for_kind(rules: list[DecisionRule], kind: RuleKind) -> tuple[str, DecisionRule] | None:
    """The first ``step`` or ``question`` rule, with its label, or None."""
    for index, rule in enumerate(rules):
        if rule.kind == kind:
            return rule.label(index), rule
    return None


def digest_of(asked: dict[str, Any]) -> str:
    """The digest of exactly what is asked: ``sha256:`` and the hex sha256 of its
    canonical JSON (a tool call: ``{server, tool, arguments}``; a plan step:
    ``{step, command}``; a question: its kind, prompt, options and fields)."""
    return "sha256:" + hashlib.sha256(canonical_json(asked).encode()).hexdigest()


# -- authority -----------------------------------------------------------------------


class Refusal(BaseModel):
    """Why a principal may not do something: the rule (as the 403 and the log name
    it) and a sentence for the person."""

    rule: str
    message: str


def _refuse(rule: str, message: str) -> Refusal:
    return Refusal(rule=rule, message=message)


def may_see(p: Principal, people: People) -> Refusal | None:
    """Operators see every session; others the sessions whose people name them."""
    if p.at_least("operator") or p.named_by_any(people.everyone()):
        return None
    return _refuse("people.viewers", f"{p.subject} is not among this session's owner, "
                   "approvers or viewers (and is not an operator)")


def may_start(p: Principal) -> Refusal | None:
    if p.at_least("approver"):
        return None
    return _refuse("role.approver", f"{p.subject} is a {p.role}: starting a session needs "
                   "the approver role or above")


Action = Literal["cancel", "end", "message"]


def may_act(p: Principal, people: People, action: Action) -> Refusal | None:
    """Cancel, end or message a session: its owner, its approvers (end and message),
    or an operator."""
    if p.at_least("operator"):
        return None
    if not p.at_least("approver"):
        return _refuse("role.approver", f"{p.subject} is a {p.role}: to {action} a session "
                       "needs the approver role or above")
    named = [people.owner] if people.owner else []
    if action != "cancel":
        named += people.approvers
    if p.named_by_any(named):
        return None
    who = "its owner" if action == "cancel" else "its owner or approvers"
    return _refuse("people.owner" if action == "cancel" else "people.approvers",
                   f"only {who} or an operator may {action} this session")


def may_answer(p: Principal, people: People, approvers: list[str] | None,
               rule: str | None = None) -> Refusal | None:
    """Answer a request: ``approvers`` are the request's own (from its rule); without
    them the session's approvers and owner, or an operator. A rule's approvers bind
    operators too (that is what the rule is for)."""
    if not p.at_least("approver"):
        return _refuse("role.approver", f"{p.subject} is a {p.role}: answering a request "
                       "needs the approver role or above")
    if approvers:
        if p.named_by_any(approvers):
            return None
        return _refuse(rule or "request.approvers", "this request is for "
                       f"{', '.join(approvers)}; {p.subject} is not one of them")
    if p.at_least("operator") or p.named_by_any(
            [*([people.owner] if people.owner else []), *people.approvers]):
        return None
    return _refuse("people.approvers", f"{p.subject} is not the owner or an approver of "
                   "this session (and is not an operator)")


class StandingDecision(BaseModel):
    """"Approve, and do not ask again" in one session: a tool call matching it runs
    without a request; the log names it and who set it. ``arguments`` None: any."""

    standing_id: str
    server: str | None = None
    tool: str
    arguments: dict[str, Any] | None = None
    set_by: PrincipalRef
    request_id: str
    at: datetime

    def matches(self, server: str | None, tool: str, arguments: dict[str, Any]) -> bool:
        if tool != self.tool or (self.server is not None and server != self.server):
            return False
        return self.arguments is None or canonical_json(arguments) == canonical_json(
            self.arguments)


#: The ``type`` of the ApplicationError a reply's update validator raises, which the
#: API answers with 403 (``details[0]``: ``{"rule": ...}``) and 409.
ANSWER_FORBIDDEN = "AnswerForbidden"
ANSWER_CONFLICT = "AnswerConflict"
#: Edited arguments that do not meet the tool's input schema (422 at the API;
#: ``details[0]``: ``{"code": "invalid_arguments", "errors": [...]}``).
ANSWER_INVALID = "AnswerInvalid"
