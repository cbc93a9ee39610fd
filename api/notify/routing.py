"""Who gets what (pure): a notice, the server's routes and the session's own routes
-> the messages to make, as ``(channel, recipient, person)`` targets.

* Server routes (:class:`~api.notify.settings.RouteConfig`), each for the notice kinds
  in its ``on``: ``to`` is ``approvers`` (every notice; e-mail goes to each
  addressee), ``owner`` (the session's owner), ``*`` (every notice; e-mail to the
  addressees), or an entry (``group:NAME``, a subject, an e-mail address): the
  notices whose request is addressed to it (e-mail to that entry).
* The session's routes (its config's ``notify``: channel and ``on``): its notices go
  to that channel (e-mail: to the addressees). A channel the server does not know
  is logged and skipped.

The addressees of a notice are its request's (``Notice.addressees``, after an
escalation the new list); when the request names nobody, the session's owner and
approvers.

Per channel type: e-mail makes one message per address (an e-mail entry itself; a
subject: that person's address in the people store; ``group:NAME``: each member with
an address; what resolves to no address is logged by name and skipped); a webhook
one message per channel; Slack one message per channel, its links bound to the
channel's ``person`` when set. The person links are bound to is the people store's
person of the address (or Slack's ``person``), as a principal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from api.identity.people_store import PeopleDoc, Person
from api.notify.model import Notice
from api.notify.settings import NotifyConfig, SlackChannel
from workflows.config import REQUEST_NOTICES
from workflows.people import Principal

log = logging.getLogger("hitlflow.notify")

GROUP = "group:"


@dataclass(frozen=True)
class Target:
    """One message to make: ``recipient`` an e-mail address (e-mail) or the person
    links are bound to (Slack), None otherwise; ``person`` whom action links name."""

    channel: str
    recipient: str | None = None
    person: Principal | None = None


class Directory:
    """The people store's answers routing needs: a person by subject or address, the
    members of a group. Built from a :class:`PeopleDoc` (local mode); empty when
    there is none (other modes: e-mail entries still work)."""

    def __init__(self, doc: PeopleDoc | None = None) -> None:
        people = doc.people if doc is not None else []
        self.by_name = {p.name: p for p in people}
        self.by_email = {p.email.lower(): p for p in people if p.email}
        self.groups: dict[str, list[Person]] = {}
        for p in people:
            for g in p.groups:
                self.groups.setdefault(g, []).append(p)

    def person_of_email(self, address: str) -> Person | None:
        return self.by_email.get(address.lower())


def addressees(notice: Notice) -> list[str]:
    """Whom the notice's request is addressed to (the session's owner and approvers
    when it names nobody)."""
    if notice.addressees:
        return list(dict.fromkeys(notice.addressees))
    found = ([notice.owner] if notice.owner else []) + list(notice.approvers)
    return list(dict.fromkeys(found))


def _addressed_to(entry: str, notice: Notice) -> bool:
    lowered = entry.lower()
    return any(a == entry or ("@" in a and a.lower() == lowered) for a in addressees(notice))


def _addresses(entries: Iterable[str], directory: Directory, where: str
               ) -> list[tuple[str, Person | None]]:
    """E-mail addresses of ``entries``, each once, with the person of each."""
    out: dict[str, Person | None] = {}
    for entry in entries:
        if entry.startswith(GROUP):
            members = [p for p in directory.groups.get(entry[len(GROUP):], []) if p.email]
            if not members:
                log.info("%s: %s has no member with an e-mail address; skipped", where, entry)
            for p in members:
                out.setdefault(p.email.lower(), p)  # type: ignore[union-attr]
        elif "@" in entry:
            out.setdefault(entry.lower(), directory.person_of_email(entry))
        else:
            person = directory.by_name.get(entry)
            if person is None or not person.email:
                log.info("%s: %s has no e-mail address in the people store; skipped",
                         where, entry)
                continue
            out.setdefault(person.email.lower(), person)
    return list(out.items())


def _targets_on(channel: str, entries: list[str], config: NotifyConfig,
                directory: Directory) -> list[Target]:
    cfg = config.channels.get(channel)
    if cfg is None:
        log.info("channel %s is not configured; skipped", channel)
        return []
    if cfg.type == "email":
        return [Target(channel, address, person.principal() if person else None)
                for address, person in _addresses(entries, directory, f"channel {channel}")]
    if isinstance(cfg, SlackChannel) and cfg.person:
        person = directory.by_name.get(cfg.person)
        return [Target(channel, cfg.person, person.principal() if person else None)]
    return [Target(channel)]


def route(notice: Notice, config: NotifyConfig, directory: Directory | None = None
          ) -> list[Target]:
    """The targets of ``notice``: each ``(channel, recipient)`` once, in route order."""
    directory = directory or Directory()
    found: dict[tuple[str, str | None], Target] = {}

    def add(targets: Iterable[Target]) -> None:
        for t in targets:
            found.setdefault((t.channel, t.recipient), t)

    to_whom = addressees(notice)
    for r in config.routes:
        if notice.kind not in r.on:
            continue
        if r.to in ("approvers", "*"):
            add(_targets_on(r.channel, to_whom, config, directory))
        elif r.to == "owner":
            if notice.owner:
                add(_targets_on(r.channel, [notice.owner], config, directory))
        elif _addressed_to(r.to, notice):
            add(_targets_on(r.channel, [r.to], config, directory))
    for own in notice.session_notify:
        channel, on = own.get("channel"), own.get("on")
        if not isinstance(channel, str):
            continue
        kinds = on if isinstance(on, list) else REQUEST_NOTICES
        if notice.kind in kinds:
            add(_targets_on(channel, to_whom, config, directory))
    return list(found.values())
