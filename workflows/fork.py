"""A fork's first input (issue 27): pure. ``observation/fork.py`` rebuilds the parent's
state at the fork point; this makes of it the state a new session starts from."""

from __future__ import annotations

from workflows.lineage import ForkedFrom, ParentAction
from workflows.messages import CURRENT_BEHAVIOUR, SessionInput
from workflows.session_state import SessionState


def fork_input(parent: SessionState, session_id: str, forked_from: ForkedFrom, *,
               owner: str, message: str | None = None,
               parent_actions: list[ParentAction] | None = None) -> SessionInput:
    """The new session: the parent's state at the point, bounded as a continued run's
    (open contracts, the latest status change, the model's context, the counters, the
    ledger of once-only actions done), under its own id and owned by ``owner`` (who
    forked it); ``message``, the person's next message there (it replaces the one the
    parent got), waits in its inbox; ``parent_actions``, the once-only calls the
    parent sent after the point: the fork asks before sending one again."""
    state = parent.carried()
    config = state.config.carried(state.llm_calls)
    config = config.model_copy(update={
        "people": config.people.model_copy(update={"owner": owner})})
    state = state.model_copy(update={
        "session_id": session_id, "config": config, "journal_outbox": [], "journal_seq": 0,
        "inbox": [message] if message is not None else []})
    return SessionInput(session_id=session_id, config=config, state=state,
                        behaviour=CURRENT_BEHAVIOUR, forked_from=forked_from,
                        parent_actions=parent_actions or [])
