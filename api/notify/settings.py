"""The notifier's configuration: a YAML or JSON file named by
``HITLFLOW_NOTIFY_CONFIG`` (docs/notifications.md). It names channels and the
server's routes; secrets are never in it, only the names of the environment
variables that hold them (read when a channel is built, never logged).

.. code-block:: yaml

    public_url: https://hitlflow.example.com   # links in messages (default: the API's)
    window_s: 86400                            # how long a message is retried
    action_links: true                         # approve/reject links where allowed
    link_ttl_s: 604800
    channels:
      ops-hook: {type: webhook, url: "https://hooks.example.com/x", secret_env: OPS_SECRET}
      mail: {type: email, host: smtp.example.com, port: 587, starttls: true,
             username: hitlflow, password_env: SMTP_PASSWORD, sender: hitlflow@example.com}
      ops-chat: {type: slack, url_env: SLACK_OPS_URL}
    routes:
      - {to: "group:ops", channel: ops-chat}
      - {to: approvers, channel: mail, on: [opened, reminded, escalated]}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workflows.config import REQUEST_NOTICES, NoticeKind

MAX_CONFIG_BYTES = 1_000_000
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_CHANNEL_NAME = r"^[A-Za-z0-9_.-]+$"


class NotifyConfigError(ValueError):
    """The notify config cannot be used: what is wrong, where (never a secret)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _PostsToUrl(_Strict):
    """A channel that posts to a URL: given in the config, or (when the URL is itself a
    secret, as Slack's are) named by an environment variable."""

    url: str | None = Field(default=None, max_length=2000)
    url_env: str | None = Field(default=None, pattern=_ENV_NAME)
    timeout_s: float = Field(default=10, gt=0, le=120)

    @model_validator(mode="after")
    def _one_url(self) -> _PostsToUrl:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("give exactly one of url and url_env")
        return self


class WebhookChannel(_PostsToUrl):
    """Standard Webhooks (webhook-id, -timestamp, -signature) to the URL."""

    type: Literal["webhook"]
    # the signing secret ("whsec_<base64>"), from this environment variable
    secret_env: str = Field(pattern=_ENV_NAME)


class SlackChannel(_PostsToUrl):
    """A Slack-compatible incoming webhook: a Block Kit message with buttons."""

    type: Literal["slack"]
    # The person the buttons' action links are bound to (a subject of the people
    # store); without it the buttons open the request's page in the inbox.
    person: str | None = Field(default=None, min_length=1, max_length=500)


class EmailChannel(_Strict):
    """SMTP: one message per addressee with an e-mail address."""

    type: Literal["email"]
    host: str = Field(min_length=1, max_length=500)
    port: int = Field(default=25, ge=1, le=65535)
    starttls: bool = False
    username: str | None = Field(default=None, max_length=500)
    password_env: str | None = Field(default=None, pattern=_ENV_NAME)
    sender: str = Field(min_length=3, max_length=500)
    timeout_s: float = Field(default=30, gt=0, le=300)


ChannelConfig = Annotated[WebhookChannel | SlackChannel | EmailChannel,
                          Field(discriminator="type")]


class RouteConfig(_Strict):
    """A server-wide route: notices whose request is addressed to ``to`` go to
    ``channel``. ``to``: ``approvers`` (every request; e-mail goes to each
    addressee), ``owner`` (the session's owner), ``group:NAME``, a subject or an
    e-mail address (requests addressed to it), or ``*`` (every notice)."""

    to: str = Field(min_length=1, max_length=500)
    channel: str = Field(pattern=_CHANNEL_NAME, max_length=100)
    on: list[NoticeKind] = Field(default_factory=lambda: list(REQUEST_NOTICES), min_length=1)


class NotifyConfig(_Strict):
    public_url: str | None = Field(default=None, max_length=2000)
    window_s: float = Field(default=24 * 3600, gt=0, le=30 * 24 * 3600)
    action_links: bool = True
    link_ttl_s: float = Field(default=7 * 24 * 3600, gt=0, le=90 * 24 * 3600)
    channels: dict[Annotated[str, Field(pattern=_CHANNEL_NAME, max_length=100)],
                   ChannelConfig] = Field(default_factory=dict, max_length=200)
    routes: list[RouteConfig] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _routes_name_channels(self) -> NotifyConfig:
        for i, route in enumerate(self.routes):
            if route.channel not in self.channels:
                raise ValueError(f"routes[{i}] names channel {route.channel!r}, "
                                 f"which is not among the channels")
        return self


def secret_from_env(name: str | None, what: str) -> str | None:
    """The value of the environment variable ``name`` (None when no name is given);
    a name given but unset is a :class:`NotifyConfigError` naming the variable."""
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise NotifyConfigError(f"{what}: the environment variable {name} is not set")
    return value


def load_notify_config(path: Path) -> NotifyConfig:
    """Read and check the file (YAML or JSON): a clear error for a file that is
    missing, too big, not a mapping, or not valid."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise NotifyConfigError(f"notify config {path}: cannot be read: {err.strerror}"
                                ) from err
    if len(raw) > MAX_CONFIG_BYTES:
        raise NotifyConfigError(f"notify config {path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = (json.loads(raw) if path.suffix == ".json"
                else yaml.safe_load(raw.decode("utf-8")))
    except (ValueError, yaml.YAMLError) as err:
        raise NotifyConfigError(f"notify config {path}: not valid "
                                f"{'JSON' if path.suffix == '.json' else 'YAML'}: {err}"
                                ) from err
    if not isinstance(data, dict):
        raise NotifyConfigError(f"notify config {path}: must be a mapping")
    try:
        return NotifyConfig.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
            for e in err.errors())
        raise NotifyConfigError(f"notify config {path}: {problems}") from None


class NotifySettings(BaseSettings):
    """Where the notify config is and how the notifier paces itself."""

    model_config = SettingsConfigDict(env_prefix="HITLFLOW_NOTIFY_", extra="ignore")

    config: Path | None = None  # HITLFLOW_NOTIFY_CONFIG; none: no notifier
    poll_s: float = Field(default=1.0, gt=0, le=60)  # how often the outbox is looked at
    backoff_s: float = Field(default=5.0, gt=0, le=3600)  # the first retry's wait
    max_backoff_s: float = Field(default=900.0, gt=0, le=24 * 3600)
    concurrency: int = Field(default=8, ge=1, le=256)  # sends at once
    # How long a claimed message is held by its notifier before another may send it
    # (none: the slowest channel's timeout + 30 s); a killed notifier's claims come
    # back after it.
    lease_s: float | None = Field(default=None, gt=0, le=3600)

    def load(self) -> NotifyConfig | None:
        return None if self.config is None else load_notify_config(self.config)
