"""The typed input of every signal, update and query of the session workflow.

One pydantic model per call; new fields always get defaults so that running
sessions keep working.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from observation.projections import ExecutionFact, ExecutionSnapshot
from workflows.config import SessionConfig
from workflows.session_state import PendingRequest, SessionState, StatusChange
from workflows.statechart import SessionStatus


class SessionInput(BaseModel):
    session_id: str
    # The session config; a continued run finds it in ``state`` instead (once).
    config: SessionConfig | None = None
    # Set by continue-as-new: the state carried over from the previous run.
    state: SessionState | None = None
    # Continue-as-new once history grows past this many events (None: when
    # Temporal suggests it). Tests use a small number to cross several runs.
    continue_as_new_after_events: int | None = Field(default=None, ge=10)
    # Upsert SessionStatus/WaitingSince (off only where a server cannot hold them).
    search_attributes: bool = True
    # The journal before an activity rides in its header (``journal_carrier``): set
    # for sessions started (or continued) by this version. Absent in older
    # histories, which upsert a memo there and replay as they ran.
    journal_in_header: bool = False

    @model_validator(mode="after")
    def _has_config(self) -> SessionInput:
        if self.config is None and self.state is None:
            raise ValueError("a session input needs its config (or a carried state)")
        return self

    def carried(self, state: SessionState) -> SessionInput:
        """The next run's input: the bounded state, with the config once and without
        the scripted responses already played (DESIGN invariant 7)."""
        state = state.carried()
        state.config = state.config.carried(state.llm_calls)
        return self.model_copy(update={"config": None, "state": state,
                                       "journal_in_header": True})


class SessionResult(BaseModel):
    session_id: str
    status: SessionStatus
    failure_reason: str | None = None
    contracts: int = 0
    turns: int = 0


class ReplyInput(BaseModel):
    """An answer to the pending request, naming it by ``request_id``.

    approval / confirm: ``approve``; choose: ``choice``; form: ``values``.
    """

    model_config = ConfigDict(extra="forbid")
    request_id: str = Field(min_length=1, max_length=200)
    approve: bool | None = None
    choice: str | None = None
    values: dict[str, Any] | None = None
    comment: str | None = Field(default=None, max_length=10_000)
    by: str = Field(default="user", min_length=1, max_length=200)


class MessageInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=100_000)
    by: str = Field(default="user", min_length=1, max_length=200)


class EndInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(default="user", min_length=1, max_length=200)
    reason: str = ""


class RecoverInput(BaseModel):
    """Sent by a worker at start-up to each session in ``waiting_user``."""

    worker_identity: str = ""


class Ack(BaseModel):
    accepted: bool = True
    request_id: str | None = None
    status: SessionStatus
    # Journal entries the session will have once the request is recorded (the ones
    # so far and the first one after it): a read model that has folded this many
    # reflects at least the workflow task that took it.
    journal_seq: int | None = None


class ContractQuery(BaseModel):
    execution_id: str


class SessionSnapshot(BaseModel):
    """What a person or a client sees of a session (no raw contracts)."""

    session_id: str
    status: SessionStatus
    mode: str
    pending: PendingRequest | None
    contracts: list[ExecutionSnapshot]
    memory: list[ExecutionFact]
    status_history: list[StatusChange]
    replies: int
    # Of the whole session; ``contracts`` is the recent window the workflow keeps.
    contracts_total: int = 0
    turns: int
    llm_calls: int
    failure_reason: str | None = None
    last_text: str | None = None
