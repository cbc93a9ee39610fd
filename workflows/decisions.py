"""Decisions bound to what was asked, and made by someone (issue 24). Pure: no Temporal
import, no clock. The workflow calls these in its reply validator and its turns; the
API calls the same ones before it sends a reply (defense in depth: the workflow checks
again whatever reaches it by other ways, such as a signal from the Temporal UI).

* What is asked, and its digest: :func:`asked_tool_call`, :func:`asked_step`,
  :func:`asked_question`; :func:`request_terms` adds who may answer it (the matching
  :class:`~workflows.people.DecisionRule`).
* Whether a tool call is asked at all: :func:`tool_verdict` (``allow`` / ``deny`` rules
  and standing decisions decide without a request; ``ask`` asks where the safety class
  would not).
* Who decided: :func:`decider` (the reply's principal, or Temporal access).
* Whether a reply may be taken: :func:`answer_problem`, built of
  :func:`answer_refusal` (403), :func:`answer_conflict` (409) and
  :func:`arguments_errors` (422), each an :class:`AnswerProblem` whose ``type`` and
  ``details`` become the validator's ``ApplicationError``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, Field

from workflows.config import SessionConfig
from workflows.io import ToolSpec
from workflows.lineage import ParentAction
from workflows.people import (
    ANSWER_CONFLICT,
    ANSWER_FORBIDDEN,
    ANSWER_INVALID,
    TEMPORAL_ACCESS,
    DecisionRule,
    Principal,
    PrincipalRef,
    StandingDecision,
    digest_of,
    may_answer,
    rule_for,
    rule_for_kind,
)
from workflows.session_state import PendingRequest

#: At most this many standing decisions per session (carried across continue-as-new).
MAX_STANDING = 100
#: At most this many refusals the API reports (``record_refusal``) are recorded per run
#: of a session; more are ignored, so that a flood cannot fill its history.
MAX_RECORDED_REFUSALS = 100
#: At most this many schema errors are returned for edited arguments.
MAX_SCHEMA_ERRORS = 10

# -- what is asked ---------------------------------------------------------------------


def asked_tool_call(server: str | None, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call as a person is asked about it (its digest covers all three)."""
    return {"server": server, "tool": tool, "arguments": arguments}


def asked_step(index: int, command: Any) -> dict[str, Any]:
    """A plan step: its index and its command (a shell command, or a tool run's dump)."""
    return {"step": index, "command": command}


def asked_question(kind: str, prompt: str, options: list[str],
                   fields: list[dict[str, Any]]) -> dict[str, Any]:
    """An ECS question (confirm, choose, form), as the person sees it."""
    return {"kind": kind, "prompt": prompt, "options": options, "fields": fields}


def request_terms(config: SessionConfig, asked: dict[str, Any],
                  catalog: list[ToolSpec] | None = None,
                  safety: str | None = None) -> dict[str, Any]:
    """The fields of a :class:`PendingRequest` that bind it: ``asked`` and its
    ``digest``, and for a tool call those of the first rule that matches it (who may
    answer, how many approvals, separation of duties, editable with the tool's input
    schema). Unset fields are left out (their defaults)."""
    terms: dict[str, Any] = {"asked": asked, "digest": digest_of(asked)}
    if "tool" not in asked:
        found = rule_for_kind(config.rules, "step" if "step" in asked else "question")
        if found is not None:
            label, rule = found
            terms.update(rule=label, approvers=list(rule.approvers),
                         approvals_required=rule.approvals_required,
                         separation_of_duties=rule.separation_of_duties)
        return terms
    found = rule_for(config.rules, asked.get("server"), asked["tool"], asked["arguments"],
                     safety)
    if found is None:
        return terms
    label, rule = found
    terms.update(rule=label, approvers=list(rule.approvers),
                 approvals_required=rule.approvals_required,
                 separation_of_duties=rule.separation_of_duties, editable=rule.editable)
    if rule.editable:
        spec = next((t for t in catalog or [] if t.name == asked["tool"]
                     and t.server == asked.get("server")), None)
        terms["input_schema"] = spec.input_schema if spec else {"type": "object"}
    return terms


# -- decided without asking -----------------------------------------------------------

VerdictKind = Literal["default", "allow", "deny", "ask", "standing"]


class ToolVerdict(BaseModel):
    """How a tool call is decided: ``default`` (its safety class: irreversible asks,
    the rest run), ``ask``, ``allow`` or ``deny`` by ``rule``, or ``standing``
    (allowed by a standing decision of this session)."""

    kind: VerdictKind
    rule: str | None = None
    standing: StandingDecision | None = None


def tool_verdict(rules: list[DecisionRule], standing: list[StandingDecision],
                 server: str | None, tool: str, arguments: dict[str, Any], *,
                 safety_asks: bool = True, safety: str | None = None,
                 repeat: bool = False) -> ToolVerdict:
    """The first matching rule decides; a ``deny`` rule beats a standing decision, which
    beats ``ask`` and the safety class; ``allow`` runs it. ``safety_asks``: whether its
    safety class asks (an irreversible tool): where nothing would ask, ``allow`` and a
    standing decision change nothing and the verdict is ``default`` (no log line for a
    call that runs as it always would). ``repeat``: a fork's call that its parent sent
    after the fork point (``repeat_of``): only ``deny`` beats asking the person, in
    every mode."""
    found = rule_for(rules, server, tool, arguments, safety)
    if found is not None and found[1].decision == "deny":
        return ToolVerdict(kind="deny", rule=found[0])
    if repeat:
        return ToolVerdict(kind="ask", rule=found[0] if found is not None else None)
    if not safety_asks and (found is None or found[1].decision != "ask"):
        return ToolVerdict(kind="default")
    if found is not None and found[1].decision == "allow":
        return ToolVerdict(kind="allow", rule=found[0])
    held = next((sd for sd in standing if sd.matches(server, tool, arguments)), None)
    if held is not None:
        return ToolVerdict(kind="standing", standing=held)
    if found is not None:
        return ToolVerdict(kind="ask", rule=found[0])
    return ToolVerdict(kind="default")


def repeat_of(parent_actions: list[ParentAction], asked: dict[str, Any]
              ) -> ParentAction | None:
    """The parent's once-only call with the digest of ``asked`` (a fork's tool call),
    if it sent one after the fork point: the world may already hold its effect."""
    digest = digest_of(asked)
    return next((a for a in parent_actions if a.digest == digest), None)


def repeat_note(action: ParentAction, parent: str) -> str:
    """What the person is told before the fork repeats ``action``."""
    return (f"This already ran in the parent session {parent} at {action.at} (its log's "
            f"line {action.seq}); run it again here?")


def standing_for(pending: PendingRequest, remember: Literal["tool", "arguments"],
                 arguments: dict[str, Any], set_by: PrincipalRef,
                 at: datetime) -> StandingDecision:
    """The standing decision an approval with ``remember`` sets (its id is the
    request's: one per request). ``arguments``: what ran (edited or as asked)."""
    asked = pending.asked or {}
    return StandingDecision(
        standing_id=f"sd-{pending.request_id}", server=asked.get("server"),
        tool=asked["tool"], arguments=arguments if remember == "arguments" else None,
        set_by=set_by, request_id=pending.request_id, at=at)


def edited_note(arguments: dict[str, Any]) -> str:
    """The line the model reads first in the result of a call a person edited."""
    return ("The person edited the arguments before approving: "
            + json.dumps(arguments, ensure_ascii=False, sort_keys=True))


def auto_answer_within(pending: PendingRequest, answer: dict[str, Any]) -> dict[str, Any]:
    """The documented default decision (``auto_decision``) of a request nobody answered
    in time, held to the request's terms: nobody's silence makes up for approvers a
    request needs, so one that needs several approvals is rejected instead."""
    if answer.get("approved") and pending.approvals_required > 1:
        return {**answer, "approved": False}
    return answer


# -- who decided ------------------------------------------------------------------------


def decider(principal: Principal | None, config: SessionConfig) -> Principal | None:
    """Who a reply, message or end comes from: the principal the API set, or, for one
    sent straight through Temporal (no principal), whoever holds Temporal access; None
    when the session refuses those (``temporal_replies: refuse``)."""
    if principal is not None:
        return principal
    return None if config.temporal_replies == "refuse" else TEMPORAL_ACCESS


def name_of(principal: PrincipalRef) -> str:
    return principal.name or principal.subject


def ref_of(principal: PrincipalRef) -> PrincipalRef:
    return PrincipalRef(issuer=principal.issuer, subject=principal.subject,
                        name=principal.name)


def same_principal(a: PrincipalRef, b: PrincipalRef) -> bool:
    return a.issuer == b.issuer and a.subject == b.subject


# -- may this reply be taken? -------------------------------------------------------------


class AnswerProblem(BaseModel):
    """Why a reply is refused: the ApplicationError's ``type`` (ANSWER_FORBIDDEN: 403,
    ANSWER_CONFLICT: 409, ANSWER_INVALID: 422), its message and its ``details``."""

    type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


def _forbidden(rule: str, message: str) -> AnswerProblem:
    return AnswerProblem(type=ANSWER_FORBIDDEN, message=message,
                         details={"rule": rule, "code": "forbidden"})


def source_refusal(principal: Principal | None, config: SessionConfig
                   ) -> AnswerProblem | None:
    """A reply, message, end or revocation sent straight through Temporal (no
    principal) where the session refuses those (``temporal_replies: refuse``)."""
    if decider(principal, config) is not None:
        return None
    return _forbidden("temporal_replies", "this session refuses answers and changes sent "
                      "straight through Temporal (temporal_replies: refuse): use hitlflow")


def answer_refusal(principal: Principal | None, config: SessionConfig,
                   pending: PendingRequest, *, approve: bool | None,
                   arguments: dict[str, Any] | None = None,
                   remember: str | None = None, standing_count: int = 0
                   ) -> AnswerProblem | None:
    """Whether this principal may give this answer (403). ``principal`` as the reply
    carries it: None is Temporal access (``decider``), refused when the config says so;
    Temporal access is not held to the people lists (it can do anything in Temporal),
    but it is to separation of duties, edits and ``remember``."""
    who = decider(principal, config)
    if who is None:
        return source_refusal(principal, config)
    if principal is not None:
        refusal = may_answer(principal, config.people, pending.approvers, pending.rule)
        if refusal is not None:
            return _forbidden(refusal.rule, refusal.message)
    owner = config.people.owner
    if pending.separation_of_duties and approve and owner and who.is_named_by(owner):
        return _forbidden("separation_of_duties", f"{who.subject} owns this session and may "
                          "not approve its own agent's action (separation of duties); "
                          "rejecting is allowed")
    if arguments is not None and not (pending.editable and pending.kind == "approval"):
        return _forbidden("editable", "this request is not editable: answer it without "
                          "`arguments`")
    if remember is not None:
        if pending.kind != "approval" or not (pending.asked or {}).get("tool"):
            return _forbidden("remember", "`remember` is for approvals of tool calls")
        if pending.approvals_required > 1:
            return _forbidden("approvals_required", "this request needs "
                              f"{pending.approvals_required} approvers: it cannot be "
                              "remembered as a standing decision")
        if standing_count >= MAX_STANDING:
            return _forbidden("standing_decisions", f"this session holds {MAX_STANDING} "
                              "standing decisions already: revoke one first")
    return None


def answer_conflict(principal: Principal | None, config: SessionConfig,
                    pending: PendingRequest, *, approve: bool | None,
                    digest: str | None) -> AnswerProblem | None:
    """Whether the answer is for something else than what is asked now (409): a digest
    that no longer matches, or the same person approving a second time."""
    if digest is not None and digest != pending.digest:
        return AnswerProblem(
            type=ANSWER_CONFLICT, details={"code": "stale_digest"},
            message=f"the reply is for {digest}, but what is asked now is "
            f"{pending.digest or 'without a digest'}: look at the request again")
    who = decider(principal, config)
    if approve and who is not None and any(same_principal(a, who) for a in pending.approvals):
        return AnswerProblem(
            type=ANSWER_CONFLICT, details={"code": "already_approved"},
            message=f"{who.subject} has approved this request already; it needs "
            f"{pending.approvals_required} different approvers")
    return None


def arguments_errors(schema: dict[str, Any] | None, arguments: dict[str, Any]) -> list[str]:
    """What is wrong with edited arguments against the tool's input schema ([]: fine)."""
    if schema is None:
        return []
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        errors = sorted(cls(schema).iter_errors(arguments),
                        key=lambda e: ([str(p) for p in e.path], e.message))
    except jsonschema.exceptions.SchemaError as err:
        return [f"the tool's input schema is not valid: {err.message}"]
    out = []
    for e in errors[:MAX_SCHEMA_ERRORS]:
        where = "/".join(str(p) for p in e.path)
        out.append(f"{where}: {e.message}" if where else e.message)
    return out


def answer_problem(principal: Principal | None, config: SessionConfig,
                   pending: PendingRequest, *, approve: bool | None, digest: str | None,
                   arguments: dict[str, Any] | None = None, remember: str | None = None,
                   standing_count: int = 0, via: str | None = None) -> AnswerProblem | None:
    """Everything that refuses a reply the request's own checks let through, first
    found first: an action link's answer without the person it was sent to (422), a
    stale digest (409), who may answer (403), a second approval by the same person
    (409), edited arguments the schema refuses (422)."""
    if via is not None and principal is None:
        return AnswerProblem(type=ANSWER_INVALID, message="an answer through an action "
                             "link (`via`: link) names the person the link was sent to "
                             "(`principal`)",
                             details={"code": "invalid_via",
                                      "errors": ["via without principal"]})
    stale = answer_conflict(None, config, pending, approve=None, digest=digest)
    if stale is not None:
        return stale
    problem = answer_refusal(principal, config, pending, approve=approve,
                             arguments=arguments, remember=remember,
                             standing_count=standing_count)
    problem = problem or answer_conflict(principal, config, pending, approve=approve,
                                         digest=None)
    if problem is not None:
        return problem
    if remember is not None and not approve:
        return AnswerProblem(type=ANSWER_INVALID, message="`remember` comes with an "
                             "approval (`approve`: true): a rejection is not remembered",
                             details={"code": "invalid_remember",
                                      "errors": ["remember without approve: true"]})
    if arguments is not None:
        if not approve:
            return AnswerProblem(type=ANSWER_INVALID, message="edited arguments come with "
                                 "an approval (`approve`: true)",
                                 details={"code": "invalid_arguments",
                                          "errors": ["arguments without approve: true"]})
        errors = arguments_errors(pending.input_schema, arguments)
        if errors:
            return AnswerProblem(type=ANSWER_INVALID, details={
                "code": "invalid_arguments", "errors": errors},
                message="the edited arguments do not meet the tool's input schema: "
                + "; ".join(errors))
    return None


def revoke_problem(principal: Principal | None, config: SessionConfig,
                   standing: list[StandingDecision], standing_id: str) -> AnswerProblem | None:
    """Why a standing decision cannot be revoked by this principal, or None: an unknown
    id (type ``ValueError``, as any validator's), or who may not (ANSWER_FORBIDDEN).
    Operators revoke any; others only their own."""
    held = next((sd for sd in standing if sd.standing_id == standing_id), None)
    if held is None:
        return AnswerProblem(type="ValueError",
                             message=f"no standing decision {standing_id!r} in this session")
    who = decider(principal, config)
    if who is None:
        return source_refusal(principal, config)
    if not who.at_least("operator") and not same_principal(who, held.set_by):
        return _forbidden("role.operator", f"{who.subject} may not revoke {standing_id!r}: "
                          "only an operator or its author")
    return None
