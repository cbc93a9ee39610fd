"""The session config (docs/session-config.md), validated by pydantic. Pure data.

New fields always get defaults so that running sessions keep working.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from workflows.people import DecisionRule, People
from workflows.plan import PlanStep
from workflows.statechart import SessionPolicy

SafetyOverride = Literal["read_only", "irreversible", "at_most_once", "reversible"]
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
#: A variable of the worker a command may see (``pass_env``): a name, never a value,
#: and never one of the worker's own settings (HITLFLOW_*: its token, its keys).
PASS_ENV_RE = re.compile(r"^(?!HITLFLOW_)[A-Za-z_][A-Za-z0-9_]{0,127}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _checked_pass_env(names: list[str], where: str) -> list[str]:
    for name in names:
        if not PASS_ENV_RE.fullmatch(name):
            raise ValueError(f"{where}: pass_env names a variable of the worker; {name!r} is "
                             "not a variable name, or is one of the worker's own HITLFLOW_* "
                             "settings (never passed to a command)")
    return names


def _without_empty_pass_env(data: dict[str, Any]) -> dict[str, Any]:
    """``pass_env`` is left out of the JSON when empty: configs and histories recorded
    before it existed read the same."""
    if not data.get("pass_env"):
        data.pop("pass_env", None)
    return data


class ToolCallRequest(_Strict):
    """A tool call as the LLM asks for it. ``server`` may be omitted when unambiguous.

    ``arguments_error`` says why the model's arguments cannot be used (not JSON, not
    an object, not what the tool's input schema asks for): the call is a model
    mistake, sent back to the model as a failed tool result. ``raw_arguments`` is
    the model's own text when it was not a JSON object (a script may set it to play
    a malformed call). Both are left out of the JSON when unset.
    """

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in ("arguments_error", "raw_arguments"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    id: str = ""
    tool: str = Field(min_length=1)
    server: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None
    raw_arguments: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> ToolCallRequest:
        if self.raw_arguments is not None and self.arguments:
            raise ValueError("a tool call has `arguments` or `raw_arguments`, not both")
        return self


class FormField(_Strict):
    name: str = Field(min_length=1)
    label: str = ""
    type: Literal["string", "number", "boolean"] = "string"
    required: bool = True


class EcsRequest(_Strict):
    """A structured request to the person: confirm, choose, or a small form."""

    kind: Literal["confirm", "choose", "form"]
    prompt: str = Field(min_length=1)
    options: list[str] = Field(default_factory=list)
    fields: list[FormField] = Field(default_factory=list)

    @model_validator(mode="after")
    def _shape(self) -> EcsRequest:
        if self.kind == "choose" and len(self.options) < 2:
            raise ValueError("a `choose` request needs at least two options")
        if self.kind == "form" and not self.fields:
            raise ValueError("a `form` request needs at least one field")
        return self


ContractOutcome = Literal["approved", "rejected", "completed", "failed", "cancelled"]


class ScriptCondition(_Strict):
    """When a scripted alternative plays: the latest finished action (of ``tool``,
    when given) had ``previous`` as its outcome. ``approved``: the person approved
    it (an irreversible call, or a confirm answered yes); ``rejected``: the person
    declined it; ``completed``, ``failed``, ``cancelled``: how it ended."""

    previous: ContractOutcome
    tool: str | None = Field(default=None, min_length=1)


class ScriptedResponse(_Strict):
    """One canned LLM answer for the ``scripted`` provider.

    ``alternatives`` are tried in order before it: the first whose ``when`` holds
    plays instead (docs/session-config.md, "Scripted responses")."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A script of thousands of answers travels in a run's input: only what is set.
        return {k: v for k, v in handler(self).items()
                if not (v is None or v is False or v == [])}

    text: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    ecs_request: EcsRequest | None = None
    # The agent considers the conversation done after this answer.
    end: bool = False
    # Make this call fail as a provider error would (tests, demos).
    error: str | None = None
    http_status: int | None = None
    # The delay the simulated provider asks for (its Retry-After), in seconds.
    retry_after_s: float | None = Field(default=None, ge=0)
    # Set on an alternative only: when it plays instead of its response.
    when: ScriptCondition | None = None
    alternatives: list[ScriptedResponse] = Field(default_factory=list)

    @model_validator(mode="after")
    def _branches(self) -> ScriptedResponse:
        for alt in self.alternatives:
            if alt.when is None:
                raise ValueError("every alternative needs `when` (e.g. "
                                 "{\"previous\": \"rejected\"})")
            if alt.alternatives:
                raise ValueError("an alternative cannot have alternatives of its own")
        return self

    def played(self, outcomes: dict[str, list[str]]) -> ScriptedResponse:
        """The answer that plays given the outcomes of the latest actions (key "" for
        the latest of all, a tool's name for its latest call): the first alternative
        whose condition holds, else this response."""
        for alt in self.alternatives:
            assert alt.when is not None
            if alt.when.previous in outcomes.get(alt.when.tool or "", []):
                return alt
        return self


class LLMConfig(_Strict):
    provider: Literal["scripted", "openai"]
    model: str = "scripted"
    base_url: str | None = None
    # The *name* of the environment variable that holds the key; never the key.
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=1024, ge=1, le=200_000)
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    responses: list[ScriptedResponse] = Field(default_factory=list)
    # Waiting for the provider (docs/session-config.md, "Rate limits and provider
    # errors"): the longest one model answer may wait on rate limits (429) in all,
    # and how many times a provider error that may pass (5xx, 408, 409, a lost
    # connection) is retried.
    rate_limit_budget_minutes: float = Field(default=10.0, gt=0, le=24 * 60)
    error_retries: int = Field(default=5, ge=0, le=100)
    # The script position of ``responses[0]``: a run (and each LLM call) carries only
    # the part of the script it still needs, never the whole of it.
    responses_offset: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _shape(self) -> LLMConfig:
        if self.provider == "openai" and not self.base_url:
            raise ValueError("the openai provider needs a base_url")
        if self.provider == "scripted" and not self.responses and not self.responses_offset:
            raise ValueError("the scripted provider needs at least one response")
        if any(r.when is not None for r in self.responses):
            raise ValueError("`when` belongs to an alternative (a response's "
                             "`alternatives`), not to a response")
        return self

    def script_from(self, call_index: int, count: int | None = None) -> LLMConfig:
        """This config with only the scripted responses from ``call_index`` on (at most
        ``count``): what a later run or one LLM call needs. Other providers: unchanged."""
        if self.provider != "scripted":
            return self
        start = max(0, call_index - self.responses_offset)
        end = None if count is None else start + count
        rest = self.responses[start:end]
        offset = call_index if rest else self.responses_offset + len(self.responses)
        return self.model_copy(update={"responses": rest, "responses_offset": offset})


class McpServerConfig(_Strict):
    """An MCP server: a stdio command, or a streamable-HTTP URL."""

    name: str = Field(pattern=NAME_RE)
    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # Variables of the worker the server may see (by name; docs/session-config.md).
    pass_env: list[str] = Field(default_factory=list)
    cwd: str | None = None
    roots: list[str] | None = None
    # Per-tool override of the safety class derived from the MCP annotations.
    tool_overrides: dict[str, SafetyOverride] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty_pass_env(handler(self))

    @model_validator(mode="after")
    def _shape(self) -> McpServerConfig:
        _checked_pass_env(self.pass_env, f"MCP server {self.name!r}")
        if self.url is not None and self.pass_env:
            raise ValueError(f"MCP server {self.name!r}: pass_env is for a command; a url "
                             "server runs elsewhere, with its own environment")
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of command or url")
        if self.command is not None and not self.command:
            raise ValueError(f"MCP server {self.name!r}: command is empty")
        if self.url is not None and self.env:
            raise ValueError(f"MCP server {self.name!r}: env is for a command; a url server "
                             "runs elsewhere, with its own environment")
        # What the worker could not start the process with: refused here, not at its start.
        for key, value in self.env.items():
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"MCP server {self.name!r}: env name {key!r} is not a "
                                 "variable name (empty, or with '=' or a NUL character)")
            if "\0" in value:
                raise ValueError(f"MCP server {self.name!r}: env {key} holds a NUL character")
        return self


class ContextPolicy(_Strict):
    """What the model sees of a long conversation (docs/session-config.md: ``context``).

    The system prompt always; then the execution facts (consequence views of the
    latest actions, which summarise what older turns did); then the latest messages
    within both budgets. Older messages are dropped from the session's state too:
    the past lives in history and the log, not in the workflow.
    """

    max_messages: int = Field(default=60, ge=1, le=10_000)
    max_chars: int = Field(default=200_000, ge=1_000, le=10_000_000)
    max_facts: int = Field(default=50, ge=0, le=1_000)
    # A tool result longer than this reaches the model cut, with a note saying so
    # (the whole result stays in history and the log's tool artifact).
    max_tool_result_chars: int = Field(default=20_000, ge=100, le=10_000_000)


class AgentDriver(_Strict):
    llm: LLMConfig
    system_prompt: str = "You are a careful assistant."
    tools: list[McpServerConfig] = Field(default_factory=list)
    # LLM calls allowed for one user turn before the session fails.
    max_turns: int = Field(default=20, ge=1, le=1000)
    # Model mistakes in a row (malformed or schema-violating arguments, unknown
    # tools) that go back to the model as failed tool results; one more fails the
    # session.
    max_consecutive_mistakes: int = Field(default=3, ge=0, le=100)
    context: ContextPolicy = Field(default_factory=ContextPolicy)

    @model_validator(mode="after")
    def _unique(self) -> AgentDriver:
        names = [s.name for s in self.tools]
        if len(names) != len(set(names)):
            raise ValueError("MCP server names must be unique")
        return self


class PlanDriver(_Strict):
    name: str = "plan"
    steps: list[PlanStep] = Field(min_length=1, max_length=500)
    tools: list[McpServerConfig] = Field(default_factory=list)
    # Variables of the worker the steps' commands may see (by name; docs/session-config.md).
    pass_env: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty_pass_env(handler(self))

    @model_validator(mode="after")
    def _names(self) -> PlanDriver:
        _checked_pass_env(self.pass_env, "plan")
        return self


#: Someone a request can be addressed to: a subject, an e-mail address or `group:NAME`.
PersonEntry = Annotated[str, Field(min_length=1, max_length=500)]

#: What the notifier tells of (issue 26): a request opened, reminded, escalated,
#: expired or auto-decided, and the session's end. Declared once, here.
NoticeKind = Literal["opened", "reminded", "escalated", "expired", "auto_decided", "ended"]
NOTICE_KINDS: tuple[str, ...] = ("opened", "reminded", "escalated", "expired",
                                 "auto_decided", "ended")
#: What a route is told of unless it says otherwise (the end only where subscribed).
REQUEST_NOTICES: tuple[str, ...] = NOTICE_KINDS[:-1]


class NotifyRoute(_Strict):
    """One of a session's own notification routes: a channel the server's notifier
    knows by name (its URL and secrets stay in the server's config, never here)."""

    channel: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    on: list[NoticeKind] = Field(default_factory=lambda: list(REQUEST_NOTICES),
                                 min_length=1, max_length=len(NOTICE_KINDS))


class SessionConfig(_Strict):
    mode: Literal["interactive", "auto"] = "interactive"
    interactive_require_user_reply: bool = True
    # Seconds a request to the person may wait before the timeout path (None: forever).
    reply_timeout_s: float | None = Field(default=None, gt=0, le=365 * 24 * 3600)
    # Strict mode on timeout: keep waiting, or cancel the waiting contract (`timeout`).
    on_reply_timeout: Literal["keep_waiting", "cancel"] = "keep_waiting"
    # The documented default decision of `interaction.auto_decide.timeout`.
    auto_decision: Literal["reject", "approve"] = "reject"
    initial_message: str | None = None
    title: str = ""
    agent: AgentDriver | None = None
    plan: PlanDriver | None = None
    # Who decides (workflows.people): who may see and answer, and how each tool call
    # is decided. Left out of the JSON while empty (configs recorded before them).
    people: People = Field(default_factory=People)
    rules: list[DecisionRule] = Field(default_factory=list, max_length=100)
    # Answers sent straight through Temporal (no principal of hitlflow's): recorded
    # as coming from whoever holds Temporal access, or refused.
    temporal_replies: Literal["record", "refuse"] = "record"
    # Seconds an approved call that could not be sent keeps being tried before the
    # person is asked (workflows.retry_window; None: as long as a reply would be
    # waited for). Left out of the JSON while unset.
    send_window_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    # Reaching people (issue 26): remind the request's addressees after
    # `remind_after_s`; after `escalate_after_s` add `escalate_to` to them (a new
    # message goes out); `reply_timeout_s` stays the last step. Each fires once.
    remind_after_s: float | None = Field(default=None, gt=0, le=365 * 24 * 3600)
    escalate_after_s: float | None = Field(default=None, gt=0, le=365 * 24 * 3600)
    escalate_to: list[PersonEntry] = Field(default_factory=list, max_length=100)
    # Channels of the server's notifier this session's notices also go to.
    notify: list[NotifyRoute] = Field(default_factory=list, max_length=20)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name, default in (("people", People().model_dump()), ("rules", []),
                              ("temporal_replies", "record"), ("send_window_s", None),
                              ("remind_after_s", None), ("escalate_after_s", None),
                              ("escalate_to", []), ("notify", [])):
            if name in data and data[name] == default:
                data.pop(name)
        return data

    @model_validator(mode="after")
    def _one_driver(self) -> SessionConfig:
        if (self.agent is None) == (self.plan is None):
            raise ValueError("a session has exactly one driver: `agent` or `plan`")
        return self

    @model_validator(mode="after")
    def _wait_steps_in_order(self) -> SessionConfig:
        """remind < escalate < reply timeout, each when set; escalation names whom."""
        steps = [(n, v) for n, v in (("remind_after_s", self.remind_after_s),
                                     ("escalate_after_s", self.escalate_after_s),
                                     ("reply_timeout_s", self.reply_timeout_s))
                 if v is not None]
        for (a, x), (b, y) in itertools.pairwise(steps):
            if x >= y:
                raise ValueError(f"{a} ({x:g}) must come before {b} ({y:g})")
        if (self.escalate_after_s is None) != (not self.escalate_to):
            raise ValueError("escalate_after_s and escalate_to go together")
        return self

    def carried(self, llm_calls: int) -> SessionConfig:
        """The config a next run needs: the scripted responses already played are
        left behind (they are in the first run's input, in history)."""
        if self.agent is None:
            return self
        agent = self.agent.model_copy(update={"llm": self.agent.llm.script_from(llm_calls)})
        return self.model_copy(update={"agent": agent})

    @property
    def policy(self) -> SessionPolicy:
        return SessionPolicy(
            mode=self.mode, interactive_require_user_reply=self.interactive_require_user_reply
        )


SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def valid_session_id(session_id: str) -> bool:
    """Session ids name files on disk: a safe character set, no path separators."""
    return bool(SESSION_ID_RE.fullmatch(session_id))


def execution_id_for(session_id: str, unique: str) -> str:
    """Execution ids name their session (``<session_id>.<unique>``): session ids
    never contain a dot, so any contract can be found from its id alone."""
    return f"{session_id}.{unique}"


def session_of_execution(execution_id: str) -> str | None:
    session_id, dot, unique = execution_id.partition(".")
    return session_id if dot and unique and valid_session_id(session_id) else None
