"""Settings for every process (``HITLFLOW_*`` environment variables or CLI options)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from workflows.limits import DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING
from workflows.people import ROLES, DecisionRule, Role

TASK_QUEUE = "hitlflow-sessions"
#: The Host names the API answers to unless told others (any port).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
#: What the API lets a session config run by default: the README's demo tool server.
DEMO_COMMAND = "python -m activities.demo_notes_server"


class HitlflowSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HITLFLOW_", extra="ignore")

    data_dir: Path = Path(".hitlflow")
    # host:port of a Temporal frontend; empty means the embedded dev server of `up`.
    temporal_address: str = ""
    namespace: str = "default"
    # Connect with temporalio's environment configuration: the TEMPORAL_* variables and
    # profile file for TLS, client certificates and API keys (docs/operations.md,
    # "Connecting to a secured Temporal"); `up` turns it off for its own dev server.
    temporal_envconfig: bool = True
    task_queue: str = TASK_QUEUE
    temporal_port: int = Field(default=7233, ge=1, le=65535)
    ui_port: int = Field(default=8233, ge=1, le=65535)
    api_port: int = Field(default=8000, ge=1, le=65535)
    api_host: str = "127.0.0.1"
    # The HTTP API's doors (docs/security.md, "The HTTP API"). Requests need
    # `Authorization: Bearer <api_token>`; with no token, `up` makes one
    # (<data_dir>/api-token) and `hitlflow api` refuses to start, unless `api_auth` is
    # "off" (explicitly: anyone who reaches the port may then run commands on the workers).
    api_token: str | None = Field(default=None, repr=False)
    api_auth: Literal["token", "off"] = "token"
    # The names the API answers to in the Host header (any port; comma-separated in the
    # environment, empty: these; "*": any, e.g. behind a proxy that checks it); others
    # get 400. The address the API is bound to (`api_host`) is always one of them.
    api_allowed_hosts: Annotated[list[str], NoDecode] = list(LOCAL_HOSTS)
    # Origins allowed cross-origin calls (CORS); none by default.
    api_cors_origins: Annotated[list[str], NoDecode] = []

    # Who makes each request (docs/security.md, "Identity"): `local` people and their
    # keys (<data_dir>/people.json, `hitlflow people`), `oidc` bearer JWTs of an OpenID
    # Connect provider (HITLFLOW_OIDC_*), `proxy` the headers of an authenticating
    # reverse proxy (only from `proxy_trusted_addresses`), or `off` (as api_auth=off).
    # The API token works in every mode, as the service principal "API token (automation)".
    auth_mode: Literal["local", "oidc", "proxy", "off"] = "local"
    # The proxy's addresses (IPs or CIDRs, comma-separated): only requests whose TCP peer
    # is one of them may carry identity headers (X-Forwarded-User, -Email, -Groups).
    proxy_trusted_addresses: Annotated[list[str], NoDecode] = []
    # Roles from groups (proxy and oidc): `admin=g1,g2;operator=ops;approver=staff`; the
    # highest role one of a person's groups names wins, else `default_role`.
    role_groups: Annotated[dict[str, list[str]], NoDecode] = {}
    default_role: Role = "viewer"

    @field_validator("proxy_trusted_addresses", mode="before")
    @classmethod
    def _addresses(cls, value: object) -> object:
        """IPs or CIDRs, comma-separated in the environment; each must parse."""
        import ipaddress

        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            for entry in value:
                try:
                    ipaddress.ip_network(str(entry), strict=False)
                except ValueError:
                    raise ValueError(f"{entry!r} is not an IP address or a CIDR "
                                     "(e.g. 127.0.0.1 or 10.0.0.0/8)") from None
        return value

    @field_validator("role_groups", mode="before")
    @classmethod
    def _role_groups(cls, value: object) -> object:
        """``admin=g1,g2;operator=ops``: role names checked, groups comma-separated."""
        if isinstance(value, str):
            parsed: dict[str, list[str]] = {}
            for part in value.split(";"):
                if not part.strip():
                    continue
                role, eq, groups = part.partition("=")
                if not eq:
                    raise ValueError(f"{part.strip()!r} is not ROLE=GROUP[,GROUP...] "
                                     "(e.g. admin=hitlflow-admins;operator=ops)")
                parsed.setdefault(role.strip(), []).extend(
                    g.strip() for g in groups.split(",") if g.strip())
            value = parsed
        if isinstance(value, dict):
            unknown = [r for r in value if r not in ROLES]
            if unknown:
                raise ValueError(f"unknown role {unknown[0]!r}: the roles are "
                                 f"{', '.join(ROLES)}")
        return value

    @property
    def effective_auth_mode(self) -> Literal["local", "oidc", "proxy", "off"]:
        """``off`` when either ``HITLFLOW_AUTH_MODE=off`` or the older
        ``HITLFLOW_API_AUTH=off`` says so, else ``auth_mode``."""
        return "off" if self.api_auth == "off" else self.auth_mode

    @field_validator("api_token", mode="before")
    @classmethod
    def _no_empty_token(cls, value: object) -> object:
        """An empty token (``HITLFLOW_API_TOKEN=``) is no token: never one that matches;
        white space around one (an env file's newline) is not part of it."""
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value

    @field_validator("api_allowed_hosts", "api_cors_origins", "api_allowed_commands",
                     mode="before")
    @classmethod
    def _comma_separated(cls, value: object, info: ValidationInfo) -> object:
        """A list given as one comma-separated string (the environment's form)."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
            if not value and info.field_name == "api_allowed_hosts":
                return list(LOCAL_HOSTS)
        return value

    # The worker's MCP servers: one closes after this many seconds with no call,
    # and at most this many run at once (docs/concepts.md, "Tools and their safety class").
    mcp_idle_s: float = Field(default=300.0, ge=0)
    mcp_max_servers: int = Field(default=32, ge=1)
    # Levels of arrays and objects a JSON body of the API may have (docs/security.md,
    # "Limits"): deeper is a 422 before anything parses it.
    max_json_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=16, le=MAX_DEPTH_CEILING)
    # Bytes a config, a reply or a message may take in the session's history (encoded,
    # defaults filled in): more is a 422. At most 1 MiB: Temporal refuses 2 MB payloads.
    max_input_bytes: int = Field(default=1024 * 1024, ge=16 * 1024, le=1024 * 1024)
    # The read model: PostgreSQL (postgresql://...) on a cluster; unset means SQLite
    # in data_dir (read_model.sqlite).
    read_model_url: str | None = None
    # A worker that saw another poll its task queue this recently does not run restart
    # recovery (api.runtime.recovery); just over Temporal's 1-minute long-poll.
    live_poller_window_s: float = Field(default=90.0, ge=0)
    # The exporter parks sessions that wait for a person (false: follow them all, as
    # before; for comparisons).
    exporter_park: bool = True
    # At most this many sessions followed at once (each holds a history long-poll;
    # Temporal caps them per namespace, 1,200 on a dev server): the others wait for
    # a slot, which a session that parks or ends frees.
    exporter_max_followers: int = Field(default=400, ge=1, le=100_000)
    # Sessions a worker keeps in memory (the SDK's sticky cache): a reply to one
    # outside it replays the session's history first (of its current run: short).
    worker_max_cached_workflows: int = Field(default=1000, ge=0, le=1_000_000)
    # Seconds over which the exporter describes each parked session once (what
    # history gains without a visible change reaches the log within this): the idle
    # cost of a waiting session is one DescribeWorkflowExecution per period.
    exporter_sweep_s: float = Field(default=1800.0, ge=1, le=86_400)
    # The key that signs each log's checkpoint: a file holding a signer key
    # (`hitlflow log keygen`) or the key itself (PRIVATE+KEY+...). Unset:
    # <data_dir>/checkpoint.key, created by the exporter's first start (api.runtime.signing_keys).
    checkpoint_key: str | None = Field(default=None, repr=False)

    # Who may run code (docs/security.md, "Who may run code"): what a session config
    # started over HTTP may run, comma-separated. An entry is a tool server command's
    # argv prefix (DEMO_COMMAND by default), `shell` (plan steps' run and verify shell
    # commands) or `*` (any command). Empty: no command at all.
    api_allowed_commands: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [DEMO_COMMAND])

    @property
    def target(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.temporal_port}"

    # Who decides, server-wide (docs/session-config.md, "People"): the approvers and
    # viewers a session started over HTTP gets when its config names none
    # (comma-separated names or group:NAME), and decision rules put BEFORE every
    # session's own (the operator's policy wins): a JSON list of DecisionRule,
    # checked when the process starts.
    default_approvers: Annotated[list[str], NoDecode] = []
    default_viewers: Annotated[list[str], NoDecode] = []
    rules: Annotated[list[DecisionRule], NoDecode] = Field(default_factory=list,
                                                           max_length=100)

    @field_validator("default_approvers", "default_viewers", mode="before")
    @classmethod
    def _people_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("rules", mode="before")
    @classmethod
    def _rules_json(cls, value: object) -> object:
        """``HITLFLOW_RULES`` is JSON: a list of rules (docs/session-config.md)."""
        if isinstance(value, str):
            if not value.strip():
                return []
            try:
                value = json.loads(value)
            except ValueError as err:
                raise ValueError(f"HITLFLOW_RULES is not valid JSON ({err}): it takes a "
                                 'JSON list of rules, e.g. [{"tool": "delete_*", '
                                 '"approvers": ["group:security"]}]') from None
        if not isinstance(value, list):
            raise ValueError("HITLFLOW_RULES must be a JSON list of rules, got "
                             f"{type(value).__name__}")
        return value
