"""The pure decisions of issue 24 (workflows/decisions.py and the session book's part):
what is asked and its digest, rules and standing decisions, who decided, and every
reason a reply is refused (403, 409, 422), each with the answer a regression would
change."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from workflows import decisions as d
from workflows.config import SessionConfig
from workflows.io import ToolSpec
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
)
from workflows.session_book import SessionBook
from workflows.session_state import PendingRequest, SessionState

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ANN = Principal(issuer="local", subject="ann", name="Ann", role="approver")
BOB = Principal(issuer="local", subject="bob", name="Bob", role="approver")
VIC = Principal(issuer="local", subject="vic", name="Vic", role="viewer")
OPS = Principal(issuer="local", subject="ops", name="", role="operator")
SEC = Principal(issuer="local", subject="sam", name="Sam", role="approver", groups=["security"])
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}},
          "required": ["name"], "additionalProperties": False}
CATALOG = [ToolSpec(server="notes", name="delete_note", input_schema=SCHEMA)]


def config(**kw) -> SessionConfig:
    return SessionConfig.model_validate({
        "agent": {"llm": {"provider": "scripted", "responses": [{"text": "hi"}]}},
        "people": {"owner": "ann", "approvers": ["bob", "group:security"]}, **kw})


def pending(**kw) -> PendingRequest:
    asked = d.asked_tool_call("notes", "delete_note", {"name": "tmp-1"})
    return PendingRequest(**{"request_id": "r1", "kind": "approval", "prompt": "?",
                             "execution_id": "r1", "created_at": NOW, "asked": asked,
                             "digest": digest_of(asked), **kw})


# -- what is asked -------------------------------------------------------------------------


def test_a_digest_covers_exactly_what_is_asked_in_canonical_form():
    a = d.asked_tool_call("notes", "delete_note", {"name": "x", "force": True})
    b = d.asked_tool_call("notes", "delete_note", {"force": True, "name": "x"})
    assert digest_of(a) == digest_of(b) and digest_of(a).startswith("sha256:")
    assert len(digest_of(a)) == len("sha256:") + 64
    for other in (d.asked_tool_call("notes", "delete_note", {"name": "y", "force": True}),
                  d.asked_tool_call("other", "delete_note", {"name": "x", "force": True}),
                  d.asked_tool_call("notes", "write_note", {"name": "x", "force": True})):
        assert digest_of(other) != digest_of(a)
    assert digest_of(d.asked_step(1, "make")) != digest_of(d.asked_step(2, "make"))
    assert digest_of(d.asked_question("choose", "p", ["a", "b"], [])) != digest_of(
        d.asked_question("choose", "p", ["b", "a"], []))


def test_request_terms_without_a_rule_bind_only_what_is_asked():
    asked = d.asked_tool_call("notes", "delete_note", {"name": "x"})
    assert d.request_terms(config(), asked, CATALOG) == {"asked": asked,
                                                        "digest": digest_of(asked)}
    q = d.asked_question("confirm", "sure?", [], [])
    rules = [DecisionRule(tool="*", approvers=["bob"])]
    assert d.request_terms(config(rules=rules), q) == {"asked": q, "digest": digest_of(q)}


def test_request_terms_take_the_first_matching_rule():
    rules = [DecisionRule(tool="write_*", approvers=["nobody"]),
             DecisionRule(tool="delete_*", arguments={"name": "prod-*"},
                          approvers=["group:security"], approvals_required=2,
                          separation_of_duties=True, name="prod"),
             DecisionRule(tool="delete_*", editable=True)]
    prod = d.asked_tool_call("notes", "delete_note", {"name": "prod-db"})
    terms = d.request_terms(config(rules=rules), prod, CATALOG)
    assert terms == {"asked": prod, "digest": digest_of(prod), "rule": "prod",
                     "approvers": ["group:security"], "approvals_required": 2,
                     "separation_of_duties": True, "editable": False}
    tmp = d.asked_tool_call("notes", "delete_note", {"name": "tmp"})
    terms = d.request_terms(config(rules=rules), tmp, CATALOG)
    assert (terms["rule"], terms["editable"], terms["input_schema"]) == (
        "rules[2]", True, SCHEMA)
    # a tool the catalog does not list: any object
    assert d.request_terms(config(rules=rules), tmp, [])["input_schema"] == {"type": "object"}
    assert PendingRequest(request_id="r", kind="approval", prompt="", created_at=NOW,
                          **terms).input_schema == SCHEMA


# -- decided without asking ----------------------------------------------------------------

RULES = [DecisionRule(tool="delete_note", arguments={"name": "tmp-*"}, decision="allow",
                      name="tmp"),
         DecisionRule(tool="delete_note", arguments={"name": "prod-*"}, decision="deny"),
         DecisionRule(tool="read_*", decision="ask", name="reads")]


def standing(tool: str = "delete_note", arguments: dict | None = None) -> StandingDecision:
    return StandingDecision(standing_id="sd-r1", tool=tool, arguments=arguments,
                            set_by=ANN.ref(), request_id="r1", at=NOW)


@pytest.mark.parametrize(("tool", "args", "held", "kind", "rule"), [
    ("delete_note", {"name": "tmp-1"}, [], "allow", "tmp"),
    ("delete_note", {"name": "prod-1"}, [], "deny", "rules[1]"),
    ("delete_note", {"name": "prod-1"}, [standing()], "deny", "rules[1]"),  # deny wins
    ("delete_note", {"name": "other"}, [], "default", None),
    ("delete_note", {"name": "other"}, [standing()], "standing", None),
    ("delete_note", {"name": "other"}, [standing(arguments={"name": "x"})], "default", None),
    ("read_note", {"name": "a"}, [], "ask", "reads"),
    ("read_note", {"name": "a"}, [standing("read_note")], "standing", None),  # beats ask
    ("write_note", {"name": "a"}, [standing()], "default", None),
])
def test_tool_verdict_of_a_call_its_safety_class_asks_for(tool, args, held, kind, rule):
    v = d.tool_verdict(RULES, held, "notes", tool, args)
    assert (v.kind, v.rule) == (kind, rule)
    assert (v.standing is not None) == (kind == "standing")


@pytest.mark.parametrize(("tool", "args", "held", "kind", "rule"), [
    # what runs anyway is not "decided": no rule or standing decision is recorded
    ("delete_note", {"name": "tmp-1"}, [], "default", None),
    ("delete_note", {"name": "other"}, [standing()], "default", None),
    ("delete_note", {"name": "prod-1"}, [], "deny", "rules[1]"),  # deny refuses anything
    ("read_note", {"name": "a"}, [], "ask", "reads"),  # ask asks anything
    ("read_note", {"name": "a"}, [standing("read_note")], "standing", None),
])
def test_tool_verdict_of_a_call_that_would_run_without_asking(tool, args, held, kind, rule):
    v = d.tool_verdict(RULES, held, "notes", tool, args, safety_asks=False)
    assert (v.kind, v.rule) == (kind, rule)


def test_a_standing_decision_matches_its_tool_and_its_arguments_or_any():
    any_args = standing()
    exact = standing(arguments={"name": "x", "n": 1})
    assert any_args.matches("notes", "delete_note", {"name": "whatever"})
    assert exact.matches("notes", "delete_note", {"n": 1, "name": "x"})
    assert not exact.matches("notes", "delete_note", {"name": "x"})
    assert not any_args.matches("notes", "write_note", {})
    on = StandingDecision(standing_id="s", server="notes", tool="t", set_by=ANN.ref(),
                          request_id="r", at=NOW)
    assert on.matches("notes", "t", {}) and not on.matches("other", "t", {})


def test_standing_for_an_approval():
    p = pending()
    sd = d.standing_for(p, "tool", {"name": "tmp-1"}, ANN.ref(), NOW)
    assert (sd.standing_id, sd.tool, sd.server, sd.arguments, sd.set_by.subject) == (
        "sd-r1", "delete_note", "notes", None, "ann")
    sd = d.standing_for(p, "arguments", {"name": "edited"}, ANN.ref(), NOW)
    assert sd.arguments == {"name": "edited"}


def test_the_model_is_told_of_an_edit():
    assert d.edited_note({"name": "b", "a": 1}) == (
        'The person edited the arguments before approving: {"a": 1, "name": "b"}')


# -- who decided -------------------------------------------------------------------------------


def test_the_decider_is_the_principal_or_temporal_access_never_the_body():
    assert d.decider(ANN, config()) is ANN
    assert d.decider(None, config()) is TEMPORAL_ACCESS
    assert d.decider(None, config(temporal_replies="refuse")) is None
    assert d.decider(ANN, config(temporal_replies="refuse")) is ANN
    assert d.name_of(ANN) == "Ann" and d.name_of(OPS) == "ops"
    assert d.same_principal(ANN, ANN.ref())
    assert not d.same_principal(ANN, PrincipalRef(issuer="oidc", subject="ann"))


# -- refusals -------------------------------------------------------------------------------


def refused(principal, cfg=None, p=None, **kw):
    kw.setdefault("approve", True)
    problem = d.answer_refusal(principal, cfg or config(), p or pending(), **kw)
    return None if problem is None else (problem.type, problem.details["rule"])


def test_who_may_answer():
    assert refused(VIC) == (ANSWER_FORBIDDEN, "role.approver")
    assert refused(BOB) is None and refused(SEC) is None and refused(OPS) is None
    assert refused(ANN) is None  # the owner
    stranger = Principal(issuer="local", subject="zed", role="approver")
    assert refused(stranger) == (ANSWER_FORBIDDEN, "people.approvers")
    # a rule's approvers bind operators too, and name the rule
    ruled = pending(approvers=["group:security"], rule="prod")
    assert refused(OPS, p=ruled) == (ANSWER_FORBIDDEN, "prod")
    assert refused(BOB, p=ruled) == (ANSWER_FORBIDDEN, "prod")
    assert refused(SEC, p=ruled) is None


def test_temporal_access_is_recorded_or_refused_as_configured():
    ruled = pending(approvers=["group:security"], rule="prod")
    assert refused(None, p=ruled) is None  # Temporal access can do anything in Temporal
    assert refused(None, config(temporal_replies="refuse")) == (
        ANSWER_FORBIDDEN, "temporal_replies")


def test_separation_of_duties_forbids_the_owner_to_approve_not_to_reject():
    sod = pending(separation_of_duties=True)
    assert refused(ANN, p=sod) == (ANSWER_FORBIDDEN, "separation_of_duties")
    assert refused(ANN, p=sod, approve=False) is None
    assert refused(BOB, p=sod) is None
    assert refused(ANN) is None  # without it, the owner may approve
    by_mail = Principal(issuer="oidc", subject="x1", email="Ann@Example.org", role="approver")
    cfg = config(people={"owner": "ann@example.org"})
    assert refused(by_mail, cfg, sod) == (ANSWER_FORBIDDEN, "separation_of_duties")


def test_edits_only_where_the_rule_says_editable():
    assert refused(BOB, arguments={"name": "x"}) == (ANSWER_FORBIDDEN, "editable")
    assert refused(BOB, p=pending(editable=True), arguments={"name": "x"}) is None
    confirm = pending(kind="confirm", editable=True)
    assert refused(BOB, p=confirm, arguments={"name": "x"}) == (ANSWER_FORBIDDEN, "editable")


def test_remember_only_for_a_tool_approval_by_one_approver_within_the_bound():
    assert refused(BOB, remember="tool") is None
    assert refused(BOB, p=pending(approvals_required=2), remember="tool") == (
        ANSWER_FORBIDDEN, "approvals_required")
    assert refused(BOB, p=pending(kind="confirm", asked=None), remember="arguments") == (
        ANSWER_FORBIDDEN, "remember")
    assert refused(BOB, remember="tool", standing_count=d.MAX_STANDING) == (
        ANSWER_FORBIDDEN, "standing_decisions")
    assert refused(BOB, remember="tool", standing_count=d.MAX_STANDING - 1) is None


# -- conflicts --------------------------------------------------------------------------------


def conflict(principal, p=None, approve=True, digest=None):
    problem = d.answer_conflict(principal, config(), p or pending(), approve=approve,
                                digest=digest)
    return None if problem is None else (problem.type, problem.details["code"])


def test_a_reply_for_another_digest_is_a_conflict():
    p = pending()
    assert conflict(BOB, digest=p.digest) is None
    assert conflict(BOB) is None  # a reply that names no digest (an older client)
    assert conflict(BOB, digest="sha256:" + "0" * 64) == (ANSWER_CONFLICT, "stale_digest")
    assert conflict(BOB, approve=False, digest="sha256:0") == (ANSWER_CONFLICT,
                                                              "stale_digest")


def test_the_same_person_approving_twice_is_a_conflict():
    two = pending(approvals_required=2, approvals=[BOB.ref()])
    assert conflict(BOB, two) == (ANSWER_CONFLICT, "already_approved")
    assert conflict(ANN, two) is None
    assert conflict(BOB, two, approve=False) is None  # one rejection rejects
    other_issuer = Principal(issuer="oidc", subject="bob", role="approver")
    assert conflict(other_issuer, two) is None
    by_temporal = pending(approvals_required=2, approvals=[TEMPORAL_ACCESS.ref()])
    assert conflict(None, by_temporal) == (ANSWER_CONFLICT, "already_approved")


# -- edited arguments -------------------------------------------------------------------------


def test_edited_arguments_are_checked_against_the_input_schema():
    assert d.arguments_errors(SCHEMA, {"name": "ok"}) == []
    assert d.arguments_errors(None, {"anything": 1}) == []
    assert d.arguments_errors(SCHEMA, {"name": 3}) == ["name: 3 is not of type 'string'"]
    errors = d.arguments_errors(SCHEMA, {"other": 1})
    assert any("'name' is a required property" in e for e in errors)
    assert any("Additional properties" in e for e in errors)
    assert d.arguments_errors({"type": "nonsense"}, {}) and d.arguments_errors(
        {"type": "nonsense"}, {})[0].startswith("the tool's input schema is not valid")
    many = {"type": "object", "additionalProperties": {"type": "string"}}
    assert len(d.arguments_errors(many, {str(i): i for i in range(50)})) == d.MAX_SCHEMA_ERRORS


def problem(principal, p=None, **kw):
    kw.setdefault("approve", True)
    kw.setdefault("digest", None)
    found = d.answer_problem(principal, config(), p or pending(), **kw)
    return None if found is None else (found.type, found.details)


def test_answer_problem_puts_each_check_in_order():
    editable = pending(editable=True, input_schema=SCHEMA)
    assert problem(BOB, editable, arguments={"name": "fine"}) is None
    assert problem(BOB, editable, arguments={"name": 1}) == (ANSWER_INVALID, {
        "code": "invalid_arguments", "errors": ["name: 1 is not of type 'string'"]})
    assert problem(BOB, editable, arguments={"name": "x"}, approve=False)[0] == ANSWER_INVALID
    # a rejection is not remembered (422, not a silent drop)
    assert problem(BOB, pending(), remember="tool", approve=False) == (ANSWER_INVALID, {
        "code": "invalid_remember", "errors": ["remember without approve: true"]})
    assert problem(BOB, pending(), remember="tool") is None
    # a stale digest first, then who, then a second approval, then the schema
    assert problem(VIC, editable, digest="sha256:0", arguments={"name": 1})[1]["code"] == (
        "stale_digest")
    assert problem(VIC, editable, arguments={"name": 1})[1] == {"rule": "role.approver",
                                                               "code": "forbidden"}
    two = pending(approvals_required=2, approvals=[BOB.ref()], editable=True,
                  input_schema=SCHEMA)
    assert problem(BOB, two, arguments={"name": 1})[1]["code"] == "already_approved"
    assert problem(ANN, two) is None


# -- revoking -----------------------------------------------------------------------------------


def test_who_may_revoke_a_standing_decision():
    held = [standing()]

    def revoke(p, cfg=None, sid="sd-r1"):
        found = d.revoke_problem(p, cfg or config(), held, sid)
        return None if found is None else (found.type, found.details.get("rule"),
                                           found.message)

    assert revoke(OPS) is None
    assert revoke(ANN) is None  # its author
    assert revoke(BOB)[:2] == (ANSWER_FORBIDDEN, "role.operator")
    assert revoke(OPS, sid="sd-x") == ("ValueError", None,
                                       "no standing decision 'sd-x' in this session")
    assert revoke(None) is None
    assert revoke(None, config(temporal_replies="refuse"))[:2] == (ANSWER_FORBIDDEN,
                                                                  "temporal_replies")


# -- the session book -------------------------------------------------------------------------


def book(**kw) -> SessionBook:
    return SessionBook(SessionState(session_id="s", config=config(), **kw))


def test_an_approval_of_several_is_journaled_and_kept_in_the_request():
    b = book(pending=pending(approvals_required=2))
    b.record_approval(BOB.ref(), NOW)
    assert b.state.pending.approvals == [BOB.ref()]
    (entry,) = b.take_journal()
    assert entry.kind == "approval.recorded"
    assert entry.data["approvals"] == [{"issuer": "local", "subject": "bob", "name": "Bob"}]
    assert entry.data["digest"] == b.state.pending.digest
    # continue-as-new carries the tally, in the request
    carried = SessionState.model_validate(b.state.carried().model_dump(mode="json"))
    assert carried.pending.approvals == [BOB.ref()]


def test_a_reply_record_carries_its_principal_only_when_known():
    b = book(pending=pending())
    b.accept_reply({"approved": True}, "Bob", NOW, principal=BOB.ref(),
                   attribution={"digest": "sha256:x"})
    (entry,) = b.take_journal()
    assert entry.data["principal"] == {"issuer": "local", "subject": "bob", "name": "Bob"}
    assert (entry.data["by"], entry.data["digest"]) == ("Bob", "sha256:x")
    b = book(pending=pending())
    b.accept_reply({"approved": True}, "x", NOW, auto=True)
    assert "principal" not in b.take_journal()[0].data


def test_messages_keep_their_senders_in_order():
    b = book(inbox=["first, from the config"])
    b.take_message("two", ANN.ref())
    b.take_message("three", None)
    b.take_message("four", BOB.ref())
    assert b.take_inbox() == [("first, from the config", None), ("two", ANN.ref()),
                              ("three", None), ("four", BOB.ref())]
    assert b.state.inbox == [] and b.state.inbox_from == []


def test_standing_decisions_are_bounded_and_revoked_with_who():
    b = book()
    for i in range(4):
        b.add_standing(standing().model_copy(update={"standing_id": f"sd-{i}"}), 3)
    assert [sd.standing_id for sd in b.state.standing_decisions] == ["sd-1", "sd-2", "sd-3"]
    b.revoke_standing("sd-2", OPS.ref(), NOW)
    assert [sd.standing_id for sd in b.state.standing_decisions] == ["sd-1", "sd-3"]
    (entry,) = b.take_journal()
    assert entry.kind == "standing.revoked"
    assert (entry.data["revoked_by"]["subject"], entry.data["set_by"]["subject"]) == (
        "ops", "ann")


def test_schema_errors_at_mixed_paths_are_sorted_without_failing():
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}},
        "name": {"type": "string"}}}
    assert d.arguments_errors(schema, {"tags": ["a", 1, 2], "name": 5}) == [
        "name: 5 is not of type 'string'", "tags/1: 1 is not of type 'string'",
        "tags/2: 2 is not of type 'string'"]


def test_a_source_refusal_is_only_for_temporal_access_where_refused():
    assert d.source_refusal(None, config()) is None
    assert d.source_refusal(ANN, config(temporal_replies="refuse")) is None
    found = d.source_refusal(None, config(temporal_replies="refuse"))
    assert (found.type, found.details) == (ANSWER_FORBIDDEN, {"rule": "temporal_replies",
                                                              "code": "forbidden"})


def test_an_auto_decision_never_approves_what_needs_several_approvers():
    auto = {"approved": True, "auto": True}
    assert d.auto_answer_within(pending(), auto) == auto
    assert d.auto_answer_within(pending(approvals_required=2), auto) == {
        "approved": False, "auto": True}
    no = {"approved": False, "auto": True}
    assert d.auto_answer_within(pending(approvals_required=2), no) == no
    choice = {"choice": "done", "auto": True}
    assert d.auto_answer_within(pending(kind="choose", approvals_required=2), choice) == choice


def test_the_temporal_ui_says_who_a_request_is_for_and_who_approved_so_far():
    from workflows.operators import waiting_details

    def details(**kw) -> str:
        s = SessionState(session_id="s", config=config(), status="waiting_user",
                         pending=pending(**kw))
        return waiting_details(s)

    assert "For " not in details()
    assert "For group:security (rule prod)\n" in details(approvers=["group:security"],
                                                         rule="prod")
    text = details(approvals_required=2, rule="two", approvals=[BOB.ref()])
    assert ("For the session's approvers (rule two): 2 different approvers; approved so "
            "far by Bob") in text


def test_step_and_question_rules_say_who_answers_and_nothing_else():
    rules = [{"kind": "step", "approvers": ["group:ops"], "approvals_required": 2},
             {"kind": "question", "name": "questions", "approvers": ["bob"],
              "separation_of_duties": True}]
    cfg = config(rules=rules)
    step = d.request_terms(cfg, d.asked_step(0, "make deploy"))
    assert (step["approvers"], step["approvals_required"], step["rule"]) == (
        ["group:ops"], 2, "rules[0]")
    question = d.request_terms(cfg, d.asked_question("confirm", "ok?", [], []))
    assert (question["approvers"], question["rule"], question["separation_of_duties"]) == (
        ["bob"], "questions", True)
    # A tool call matches only tool_call rules.
    call = d.request_terms(cfg, d.asked_tool_call("notes", "delete_note", {"name": "x"}))
    assert "rule" not in call and "approvers" not in call
    for bad in ({"kind": "step", "decision": "allow"}, {"kind": "question", "tool": "x*"},
                {"kind": "step", "editable": True}, {"kind": "question", "safety": "irreversible"},
                {"kind": "step", "arguments": {"a": "*"}}, {"kind": "nope"}):
        with pytest.raises(ValueError):
            DecisionRule.model_validate(bad)


def test_a_rule_may_match_a_safety_class():
    rules = [DecisionRule(tool="delete_*", safety="irreversible", approvers=["group:security"])]
    assert d.tool_verdict(rules, [], "notes", "delete_note", {}, safety="irreversible",
                          ).rule == "rules[0]"
    assert d.tool_verdict(rules, [], "notes", "delete_note", {}, safety="reversible",
                          ).kind == "default"
    cfg = config(rules=[r.model_dump() for r in rules])
    asked = d.asked_tool_call("notes", "delete_note", {})
    assert d.request_terms(cfg, asked, CATALOG, "irreversible")["approvers"] == [
        "group:security"]
    assert "approvers" not in d.request_terms(cfg, asked, CATALOG, "at_most_once")
