"""The wait for a person, as a table of steps (issue 26). Pure: no Temporal import.

A request to a person may go through three steps while nobody answers it, each
from the moment the request opened (``PendingRequest.created_at``):

========  ======================  ==================================================
step      after                   what happens
========  ======================  ==================================================
remind    ``remind_after_s``      the request's addressees are reminded (a notice)
escalate  ``escalate_after_s``    ``escalate_to`` are added to its addressees
timeout   ``reply_timeout_s``     today's timeout path: expire, or auto-decide
========  ======================  ==================================================

Each step fires once: the request records when it was reminded and escalated
(``reminded_at``, ``escalated_at``), and continue-as-new carries the request, so a
step done in one run is done in the next. A step whose time has passed while
nothing ran (a worker down for a day) fires as soon as the session runs again,
and the steps fire in their order. The timeout is a step only where today's rules
give the wait a deadline (:func:`timeout_applies`). Requests for the person's next
message (kind ``message``) have no steps.

The workflow asks :func:`next_step` for the step due next and waits until then (or
for an answer); :func:`escalated` says who a request is for after escalation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from workflows.config import SessionConfig
from workflows.session_state import PendingRequest

WaitStepName = Literal["remind", "escalate", "timeout"]

#: The steps in the order they fire: the config field that times each, and the
#: request's field that says it was done (None: the step ends the wait).
WAIT_STEPS: tuple[tuple[WaitStepName, str, str | None], ...] = (
    ("remind", "remind_after_s", "reminded_at"),
    ("escalate", "escalate_after_s", "escalated_at"),
    ("timeout", "reply_timeout_s", None),
)

#: The shortest wait for a step already due (a timer needs a positive duration).
DUE_NOW = timedelta(milliseconds=1)


@dataclass(frozen=True)
class WaitStep:
    name: WaitStepName
    at: datetime  # when it is due

    def due_in(self, now: datetime) -> timedelta:
        """How long to wait for it from ``now`` (at least :data:`DUE_NOW`)."""
        return max(self.at - now, DUE_NOW)


def timeout_applies(config: SessionConfig) -> bool:
    """Whether nobody's answer ends the wait (today's ``_reply_deadline`` rules): with
    a timeout, unless strict mode keeps waiting (``on_reply_timeout: keep_waiting``)."""
    if config.reply_timeout_s is None:
        return False
    return not config.interactive_require_user_reply or config.on_reply_timeout == "cancel"


def next_step(config: SessionConfig, pending: PendingRequest | None,
              now: datetime) -> WaitStep | None:
    """The step due next for ``pending``, and when (None: nothing is left to do but
    wait for the answer). ``now`` is not needed to choose: a step whose time has passed
    is still the next one until it is done (it is due at once: :meth:`WaitStep.due_in`)."""
    del now  # the choice depends on what was done, not on the clock
    if pending is None or pending.kind == "message":
        return None
    for name, after_field, done_field in WAIT_STEPS:
        after: float | None = getattr(config, after_field)
        if after is None:
            continue
        if done_field is not None and getattr(pending, done_field) is not None:
            continue  # once each
        if name == "timeout" and not timeout_applies(config):
            continue
        return WaitStep(name, pending.created_at + timedelta(seconds=after))
    return None


def addressees(config: SessionConfig, pending: PendingRequest) -> list[str]:
    """Whom the request is for now: its own approvers (a rule's, or an escalation's),
    else whom ``people.may_answer`` lets answer a request without them: the session's
    owner and approvers."""
    if pending.approvers:
        return list(pending.approvers)
    people = config.people
    return list(dict.fromkeys([*([people.owner] if people.owner else []),
                               *people.approvers]))


def escalated(config: SessionConfig, pending: PendingRequest) -> tuple[list[str], list[str]]:
    """``(approvers, added)``: the request's addressees after escalation (its current
    ones, then ``escalate_to``, in order, each once) and the entries escalation added."""
    current = addressees(config, pending)
    added = [e for e in dict.fromkeys(config.escalate_to) if e not in current]
    return [*current, *added], added
