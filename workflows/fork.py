"""A fork's first input (issue 27): pure. ``observation/fork.py`` rebuilds the parent's
state at the fork point; this makes of it the state a new session starts from.

An agent session forks where it waits for the person's next message. A plan session
(seed 002) forks at a step boundary (``workflows.fork_point``): before step ``k``, where
the plan goes on to run it, or where it waits for a person at step ``k`` (a gate, a
human verify, a failed or interrupted step). The fork resumes the plan at step ``k``:
steps before it do not run again. A wait's request and its contract stay behind in
the parent, and the fork asks again in its own log (the plan asks at a gate again by
itself; the plan driver asks a verify or a failed step's question again in a fork's
first run), so that log is self-contained."""

from __future__ import annotations

from workflows.fork_point import plan_point
from workflows.lineage import ForkedFrom, ParentAction
from workflows.messages import CURRENT_BEHAVIOUR, SessionInput
from workflows.session_state import SessionState
from workflows.statechart import SessionStatus


def fork_input(parent: SessionState, session_id: str, forked_from: ForkedFrom, *,
               owner: str, message: str | None = None,
               parent_actions: list[ParentAction] | None = None) -> SessionInput:
    """The new session: the parent's state at the point, bounded as a continued run's
    (open contracts, the latest status change, the model's context, the counters, the
    ledger of once-only actions done), under its own id and owned by ``owner`` (who
    forked it); ``message``, the person's next message there (it replaces the one the
    parent got), waits in its inbox; ``parent_actions``, the once-only calls the
    parent sent after the point: the fork asks before sending one again. A plan
    session at a step boundary (``plan_point``) starts queued there (takes no
    ``message``)."""
    point = plan_point(parent)
    if point is not None and message is not None:
        raise ValueError("a plan session's fork takes no message")
    state = parent.carried()
    config = state.config.carried(state.llm_calls)
    config = config.model_copy(update={
        "people": config.people.model_copy(update={"owner": owner})})
    update: dict = {
        "session_id": session_id, "config": config, "journal_outbox": [], "journal_seq": 0,
        "inbox": [message] if message is not None else [], "inbox_from": []}
    if point is not None:
        asked = state.pending.execution_id if state.pending is not None else None
        update.update(status=SessionStatus.QUEUED, pending=None,
                      contracts=[c for c in state.contracts if c.execution_id != asked])
        if point == "gate":  # the plan asks at the gate again by itself
            update["plan_events"] = state.plan_events[:-1]
    state = state.model_copy(update=update)
    return SessionInput(session_id=session_id, config=config, state=state,
                        behaviour=CURRENT_BEHAVIOUR, forked_from=forked_from,
                        parent_actions=parent_actions or [])
