"""What a fork knows of its parent (issue 27): pure data, no dependencies beyond
pydantic (``observation`` builds it from the parent's log)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: The ``reason_code`` of a request that asks before a fork repeats what its parent did.
RAN_IN_PARENT = "ran_in_parent"


class ForkedFrom(BaseModel):
    """Where a fork began: the parent session, the log line it forked at and that
    line's ``line_hash``, which ``hitlflow log verify`` checks in the parent's log."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    session_id: str = Field(min_length=1, max_length=200)
    seq: int = Field(ge=1)
    line_hash: str = Field(pattern=r"^[0-9a-f]{64}$")


class ParentAction(BaseModel):
    """An irreversible or at-most-once tool call the parent sent after the fork point
    (its log's ``TOOL_CALL_STARTED``): the fork asks before it sends one with the same
    digest (``workflows.decisions.repeat_of``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    digest: str  # workflows.people.digest_of({server, tool, arguments})
    server: str | None = None
    tool: str
    seq: int = Field(ge=1)  # its line in the parent's log
    at: str  # that line's ts
