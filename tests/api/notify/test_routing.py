"""Routing (pure): a notice, the server's routes and the session's own routes ->
``(channel, recipient, person)`` targets."""

from __future__ import annotations

import logging

import pytest

from api.identity.people_store import PeopleDoc, Person
from api.notify.model import Notice
from api.notify.routing import Directory, Target, addressees, route
from api.notify.settings import NotifyConfig

PEOPLE = PeopleDoc(people=[
    Person(name="ann", role="admin", email="Ann@Example.org"),
    Person(name="bob", role="approver", groups=["ops"], email="bob@example.org"),
    Person(name="cid", role="approver", groups=["ops"]),  # no e-mail
    Person(name="dee", role="approver", groups=["ops", "sec"], email="dee@example.org"),
])
DIRECTORY = Directory(PEOPLE)


def config(routes, channels=None) -> NotifyConfig:
    return NotifyConfig.model_validate({
        "channels": channels or {
            "hook": {"type": "webhook", "url": "http://127.0.0.1:1/x", "secret_env": "S"},
            "mail": {"type": "email", "host": "127.0.0.1", "sender": "hf@example.org"},
            "chat": {"type": "slack", "url": "http://127.0.0.1:1/s", "person": "bob"},
            "chat2": {"type": "slack", "url": "http://127.0.0.1:1/s2"}},
        "routes": routes})


def notice(**kw) -> Notice:
    base = {"notice_id": "s-1:5", "kind": "opened", "session_id": "s-1", "seq": 5,
            "at": "2026-11-26T10:00:00Z", "request_id": "r1", "request_kind": "approval",
            "owner": "ann", "approvers": ["bob"]}
    return Notice.model_validate({**base, **kw})


def pairs(targets: list[Target]) -> list[tuple[str, str | None]]:
    return [(t.channel, t.recipient) for t in targets]


def test_addressees_default_to_the_sessions_people():
    assert addressees(notice()) == ["ann", "bob"]
    assert addressees(notice(addressees=["group:ops", "group:ops"])) == ["group:ops"]


def test_approvers_route_mails_each_addressee_and_hooks_once():
    c = config([{"to": "approvers", "channel": "mail"}, {"to": "approvers", "channel": "hook"},
                {"to": "*", "channel": "hook"}])
    got = route(notice(), c, DIRECTORY)
    assert pairs(got) == [("mail", "ann@example.org"), ("mail", "bob@example.org"),
                          ("hook", None)]
    # links are bound to the person of the address, with the store's role and groups
    assert got[1].person is not None and got[1].person.subject == "bob"
    assert got[1].person.groups == ["ops"] and got[2].person is None


def test_group_route_only_for_requests_addressed_to_it_and_expands_members():
    c = config([{"to": "group:ops", "channel": "mail"}, {"to": "group:sec", "channel": "hook"}])
    assert route(notice(), c, DIRECTORY) == []  # addressed to ann and bob
    got = route(notice(addressees=["group:ops"]), c, DIRECTORY)
    # cid has no address: skipped; dee once
    assert pairs(got) == [("mail", "bob@example.org"), ("mail", "dee@example.org")]


def test_entry_routes_match_subjects_and_addresses_without_case():
    c = config([{"to": "carol@Example.org", "channel": "mail"}, {"to": "bob", "channel": "hook"}])
    got = route(notice(addressees=["CAROL@example.org", "bob"]), c, DIRECTORY)
    assert pairs(got) == [("mail", "carol@example.org"), ("hook", None)]
    assert got[0].person is None  # not a person of the store: no action links


def test_on_filters_kinds_and_ended_goes_only_where_subscribed():
    c = config([{"to": "owner", "channel": "mail"},
                {"to": "*", "channel": "hook", "on": ["ended"]}])
    assert pairs(route(notice(kind="ended", status="succeeded"), c, DIRECTORY)) == \
        [("hook", None)]
    assert pairs(route(notice(kind="reminded"), c, DIRECTORY)) == [("mail", "ann@example.org")]


def test_session_routes_and_slack_person():
    c = config([])
    n = notice(session_notify=[{"channel": "chat", "on": ["opened"]},
                               {"channel": "chat2"}, {"channel": "mail", "on": ["expired"]}])
    got = route(n, c, DIRECTORY)
    assert pairs(got) == [("chat", "bob"), ("chat2", None)]
    assert got[0].person is not None and got[0].person.subject == "bob"
    assert pairs(route(n.model_copy(update={"kind": "expired"}), c, DIRECTORY)) == \
        [("chat2", None), ("mail", "ann@example.org"), ("mail", "bob@example.org")]


def test_unresolvable_entries_and_unknown_channels_are_logged_by_name_and_skipped(caplog):
    c = config([{"to": "approvers", "channel": "mail"}])
    n = notice(addressees=["cid", "nobody", "group:empty"],
               session_notify=[{"channel": "not-there"}, {"channel": 7}])
    with caplog.at_level(logging.INFO, logger="hitlflow.notify"):
        assert route(n, c, DIRECTORY) == []
    text = caplog.text
    assert "cid has no e-mail" in text and "nobody has no e-mail" in text
    assert "group:empty has no member" in text and "channel not-there is not configured" in text


def test_without_a_people_store_email_entries_still_route():
    c = config([{"to": "approvers", "channel": "mail"}])
    assert pairs(route(notice(addressees=["x@example.org", "bob"]), c)) == \
        [("mail", "x@example.org")]


@pytest.mark.parametrize("broken", [
    {"kind": "opened-ish"}, {"seq": "five"}, {"addressees": "bob"}, {"notice_id": None}])
def test_a_notice_body_that_cannot_be_read_is_refused(broken):
    with pytest.raises(ValueError):
        notice(**broken)
