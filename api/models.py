"""The HTTP request and response models, kept apart from the workflow's own types.

Requests forbid unknown fields (a typo is a 422, not a silently ignored field).
Responses are built from the workflow's query results by ``model_validate`` of
their JSON form, so a new workflow field never leaks into the API by accident.
The seed 000 observation models (``ExecutionSnapshot``, ``ExecutionTimeline``,
``ExecutionFact``, ``StateMachineTopology``) *are* the public contract of the
observation endpoints and are served as they are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from observation.projections import ExecutionFact, ExecutionSnapshot
from workflows.config import SESSION_ID_RE
from workflows.session_state import RequestKind
from workflows.statechart import SessionStatus

SESSION_ID_PATTERN = SESSION_ID_RE.pattern
ExecutionStatusName = Literal[
    "running", "completed", "failed", "canceled", "terminated", "continued_as_new", "timed_out"
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ----------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str = Field(description="A stable, machine-readable error code.")
    message: str = Field(description="What went wrong, for a person.")


class ErrorBody(BaseModel):
    """The one shape of every error response."""

    error: ErrorDetail


# -- requests ----------------------------------------------------------------------------


class ReplyRequest(_Request):
    """An answer to the pending request, naming it by ``request_id``.

    approval / confirm: ``approve``; choose: ``choice``; form: ``values``.
    """

    request_id: str = Field(min_length=1, max_length=200)
    approve: bool | None = None
    choice: str | None = Field(default=None, max_length=10_000)
    values: dict[str, Any] | None = None
    comment: str | None = Field(default=None, max_length=10_000)
    by: str = Field(default="user", min_length=1, max_length=200)


class MessageRequest(_Request):
    text: str = Field(min_length=1, max_length=100_000)
    by: str = Field(default="user", min_length=1, max_length=200)


class EndRequest(_Request):
    by: str = Field(default="user", min_length=1, max_length=200)
    reason: str = Field(default="", max_length=10_000)


class StepActionRequest(_Request):
    by: str = Field(default="user", min_length=1, max_length=200)
    comment: str | None = Field(default=None, max_length=10_000)


# -- responses ---------------------------------------------------------------------------


class SessionCreated(BaseModel):
    session_id: str
    status: SessionStatus


class Accepted(BaseModel):
    """The session took the request; its effect shows in the session's status soon."""

    session_id: str
    accepted: bool = True
    request_id: str | None = None
    status: SessionStatus | None = Field(
        description="The session's status when the request was taken (before its effect)."
    )


class CancelAccepted(Accepted):
    """The session is cancelling: its cancellation is requested (now, or already)."""

    cancellation: Literal["requested", "already_requested"] = Field(
        description="`requested` by this call, or `already_requested` before it (a repeat "
        "cancel changes nothing)."
    )


class FormFieldView(BaseModel):
    name: str
    label: str = ""
    type: str = "string"
    required: bool = True


class PendingRequestView(BaseModel):
    """What the session waits for; a reply must name ``request_id``."""

    request_id: str
    kind: RequestKind  # one place: workflows.session_state
    prompt: str
    execution_id: str | None = None
    options: list[str] = Field(default_factory=list)
    fields: list[FormFieldView] = Field(default_factory=list)
    created_at: datetime


class FcmpEventView(BaseModel):
    type: str
    payload: dict[str, Any]


class StatusChangeView(BaseModel):
    from_status: SessionStatus
    to_status: SessionStatus
    event: str
    at: datetime
    fcmp: list[FcmpEventView] = Field(default_factory=list)


class SessionView(BaseModel):
    """A session: canonical status, pending request, contracts as snapshots.

    ``live`` is false when no worker answered and the view comes from Temporal's
    record of the session alone (status from its search attribute, nothing else).
    """

    session_id: str
    status: SessionStatus | None
    execution_status: ExecutionStatusName | None = None
    live: bool = True
    mode: str | None = None
    pending: PendingRequestView | None = None
    contracts: list[ExecutionSnapshot] = Field(default_factory=list)
    memory: list[ExecutionFact] = Field(default_factory=list)
    status_history: list[StatusChangeView] = Field(default_factory=list)
    replies: int = 0
    turns: int = 0
    llm_calls: int = 0
    failure_reason: str | None = None
    last_text: str | None = None


class SessionSummary(BaseModel):
    session_id: str
    status: SessionStatus | None = Field(
        description="The SessionStatus search attribute (null if the session never set it)."
    )
    execution_status: ExecutionStatusName | None
    started_at: datetime | None = None
    closed_at: datetime | None = None
    waiting_since: datetime | None = None
    task_queue: str | None = None


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    next_page_token: str | None = Field(
        default=None, description="Pass as `page_token` for the next page; null on the last."
    )


class TemporalHealth(BaseModel):
    reachable: bool
    target: str
    namespace: str
    error: str | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    temporal: TemporalHealth
