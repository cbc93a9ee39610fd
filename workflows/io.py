"""The one typed input and output of every activity (pure data, shared by both sides).

Activities import these to implement the calls; workflows import them to make
the calls. New fields always get defaults so that running sessions keep working.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from workflows.config import EcsRequest, LLMConfig, McpServerConfig, ToolCallRequest
from workflows.safety import SafetyClass, ToolAnnotations

# -- LLM ------------------------------------------------------------------------


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_call_id: str | None = None


class ToolSpec(BaseModel):
    """A tool as listed by its MCP server, with its derived safety class."""

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    annotations: ToolAnnotations = Field(default_factory=ToolAnnotations)
    safety: SafetyClass = SafetyClass.IRREVERSIBLE


class LLMCallInput(BaseModel):
    session_id: str
    call_id: str
    # How many LLM calls the session made before this one (the scripted cursor).
    call_index: int = Field(ge=0)
    llm: LLMConfig
    messages: list[ChatMessage]
    tools: list[ToolSpec] = Field(default_factory=list)
    # The scripted provider's branches: outcomes of the latest finished action ("")
    # and of each tool's latest call (``workflows.agent.script_outcomes``).
    outcomes: dict[str, list[str]] = Field(default_factory=dict)


class TokenUsage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class LLMCallStarted(BaseModel):
    """Seed 003's LLM_CALL_STARTED payload (binding field names)."""

    call_id: str
    model: str
    provider_base_url: str
    prompt_hash: str
    temperature: float
    max_tokens: int
    tool_schema_hash: str | None = None
    response_format: str | None = None


class LLMCallFinished(BaseModel):
    """Seed 003's LLM_CALL_FINISHED payload (binding field names)."""

    call_id: str
    latency_ms: int = Field(ge=0)
    token_usage: TokenUsage
    finish_reason: str
    output_hash: str
    api_cost_usd: float | None = None
    tool_calls_count: int | None = None


class LLMCallFailed(BaseModel):
    """Seed 003's LLM_CALL_FAILED payload; the details of a failed LLM activity."""

    call_id: str
    latency_ms: int = Field(ge=0)
    error_class: str
    error_summary: str
    retryable: bool
    error_details: str | None = None
    http_status: int | None = None


class LLMCallResult(BaseModel):
    text: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    ecs_request: EcsRequest | None = None
    end: bool = False
    started: LLMCallStarted
    finished: LLMCallFinished


# -- MCP tools ------------------------------------------------------------------


class ListToolsInput(BaseModel):
    servers: list[McpServerConfig]


class ToolCatalog(BaseModel):
    tools: list[ToolSpec] = Field(default_factory=list)


class ToolCallInput(BaseModel):
    session_id: str
    execution_id: str
    server: McpServerConfig
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    # Names this attempt: the activity records a durable "sent" mark with it just
    # before the request leaves (``workflows.outcome``). None: no marks (older runs).
    attempt_id: str | None = None


class ToolCallResult(BaseModel):
    """A structured tool result (seed 001). ``is_error`` covers both ways an MCP
    server reports a failure: an exception (Python servers) or ``isError`` (Node)."""

    is_error: bool = False
    text: str = ""
    structured: dict[str, Any] | None = None
    error_message: str | None = None
    # The server's content blocks as MCP sends them (``type``, ``text``, ``mimeType``,
    # ``uri``, ...), except binary data: an image's, audio's or blob's bytes are left
    # out and their base64 length kept as ``size``. Empty in results of older workers.
    content: list[dict[str, Any]] = Field(default_factory=list)


# -- plan steps: shell commands -------------------------------------------------


class CommandInput(BaseModel):
    session_id: str
    execution_id: str
    command: str
    # "run" for the step itself, "verify" for its verify command (a gate run).
    purpose: Literal["run", "verify", "window"] = "run"
    step: int = 0
    timeout_s: float = 3600.0
    cwd: str | None = None
    # The worker's variables the command may see besides the few every command gets
    # (the plan's ``pass_env``; activities.command_env). Left out of the JSON when
    # empty: inputs recorded before it existed read the same.
    pass_env: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if not data.get("pass_env"):
            data.pop("pass_env", None)
        return data


class CommandResult(BaseModel):
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    # Set when the process was killed by a signal (an in-window step's window died).
    killed_by_signal: int | None = None
