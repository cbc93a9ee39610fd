"""The typed input of every signal, update and query of the session workflow.

One pydantic model per call; new fields always get defaults so that running
sessions keep working.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from workflows.config import SessionConfig
from workflows.execution_views import ExecutionFact, ExecutionSnapshot
from workflows.limits import MAX_DEPTH_CEILING, value_problem
from workflows.lineage import ForkedFrom, ParentAction
from workflows.people import Principal
from workflows.session_state import PendingRequest, SessionState, StatusChange
from workflows.statechart import SessionStatus
from workflows.steering import IfBusy


class Behaviour(IntEnum):
    """What a session does that sessions started by older code do not. The level is
    fixed when a run starts (``POST /api/sessions``, or continue-as-new), so every
    history replays as it ran, without the marker (and the search-attribute upsert
    Temporal adds to it) that ``workflow.patched`` writes into every run."""

    ORIGINAL = 0
    JOURNAL_IN_HEADER = 1  # the journal before an activity rides in its header
    AGENT_LOOP_V2 = 2  # provider waits in the workflow; model mistakes go back to it
    REFUSALS_RECORDED = 3  # a refused signal is recorded (`interaction.reply.refused`)
    EACH_WAIT_PUBLISHED = 4  # a wait that follows another in one task moves WaitingSince
    SENT_MARKS = 5  # once-only tool calls: never sent is retried, maybe sent is asked
    SEND_WINDOW = 6  # never sent is retried with backoff for a window, then asked
    PLAN_INTERRUPT = 7  # an interrupt while a plan step runs stops the plan there


#: What sessions start with now.
CURRENT_BEHAVIOUR = max(Behaviour)


class Timing(BaseModel):
    """How soon a session takes an activity's worker for lost, and how soon it tries a
    freely retried activity again. Unset, each is the default of
    ``workflows.activity_calls`` that every session runs with. Tests set small values:
    a lost worker costs the heartbeat timeout in real time, and a tool that cannot be
    reached costs the retries' intervals. Part of the session's input, so its history
    says what was scheduled, and a replay schedules the same."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Every activity's heartbeat timeout. At least 10 s: the worker enforces it
    # locally on the SDK's heartbeats too, and a tool call's SDK heartbeats start only
    # 8 s into an attempt (``activities.mcp.tools.SDK_BEAT_AFTER_S``).
    heartbeat_s: float | None = Field(default=None, ge=10, le=600)
    # The first interval between attempts of a freely retried activity (it doubles).
    retry_s: float | None = Field(default=None, ge=0.1, le=60)


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
    # The session's :class:`Behaviour` (set to ``CURRENT_BEHAVIOUR`` by whoever starts
    # it, and by continue-as-new). Absent in older histories: they replay as they ran.
    behaviour: int = Behaviour.ORIGINAL
    # Shorter activity timeouts and retries (tests; None: the defaults). Left out of
    # the JSON while unset, so inputs are what they were before it.
    timing: Timing | None = None
    # A fork's first run: the parent it was rebuilt from (issue 27). Left out of the
    # JSON while unset, so every other input is what it was.
    forked_from: ForkedFrom | None = None
    # A fork's: the once-only calls its parent sent after the fork point; the fork asks
    # before it sends one again (carried across continue-as-new; left out while empty).
    parent_actions: list[ParentAction] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in ("timing", "forked_from"):
            if data.get(key, False) is None:
                data.pop(key)
        if data.get("parent_actions", False) == []:
            data.pop("parent_actions")
        return data

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
        return self.model_copy(update={"config": None, "state": state, "forked_from": None,
                                       "behaviour": CURRENT_BEHAVIOUR})

    def does(self, behaviour: Behaviour) -> bool:
        return self.behaviour >= behaviour


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
    # Kept for old clients; the decider is ``principal`` (set by the API from the
    # credentials, never from a body), or Temporal access when it is absent.
    by: str = Field(default="user", min_length=1, max_length=200)
    principal: Principal | None = None
    # The digest of what the person was shown (``PendingRequest.digest``): a reply for
    # a digest that no longer matches is refused (409 at the API).
    digest: str | None = Field(default=None, max_length=80)
    # Edit before approve: the arguments that run instead (tools a rule marks editable).
    arguments: dict[str, Any] | None = None
    # Approve, and do not ask again in this session for this tool (any arguments) or
    # for these exact arguments.
    remember: Literal["tool", "arguments"] | None = None
    # How the answer came: through a signed action link sent to ``principal``
    # (issue 26). The log's decision says so.
    via: Literal["link"] | None = None

    @field_validator("values", "arguments")
    @classmethod
    def _within_limits(cls, values: dict[str, Any] | None) -> dict[str, Any] | None:
        """A reply sent straight to Temporal (an update or a signal) is held to the
        limits the API holds its bodies to (``workflows.limits``), at their most."""
        problem = None if values is None else value_problem(
            values, MAX_DEPTH_CEILING, ["values"])
        if problem is not None:
            raise ValueError(problem.message)
        return values


class MessageInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=100_000)
    by: str = Field(default="user", min_length=1, max_length=200)
    principal: Principal | None = None
    # What the message does while the agent works (issue 27, ``workflows.steering``):
    # wait for the next LLM call (enqueue), cut the turn (interrupt), or be refused
    # (reject). Left out of the JSON while "enqueue", so inputs are what they were.
    if_busy: IfBusy = "enqueue"

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("if_busy") == "enqueue":
            data.pop("if_busy")
        return data


class EndInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(default="user", min_length=1, max_length=200)
    reason: str = ""
    principal: Principal | None = None


class RefusalInput(BaseModel):
    """Sent by the API when it refuses a principal (403): recorded in the log as
    ``interaction.reply.refused`` (who, what, which rule); nothing else changes."""

    model_config = ConfigDict(extra="forbid")
    principal: Principal
    action: str = Field(min_length=1, max_length=100)  # reply, cancel, end, message...
    rule: str = Field(min_length=1, max_length=200)
    message: str = Field(default="", max_length=2_000)
    request_id: str | None = Field(default=None, max_length=200)


class RevokeInput(BaseModel):
    """An operator revokes one of the session's standing decisions."""

    model_config = ConfigDict(extra="forbid")
    standing_id: str = Field(min_length=1, max_length=200)
    principal: Principal | None = None


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


class LiveSession(BaseModel):
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
