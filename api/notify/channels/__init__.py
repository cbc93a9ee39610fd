"""The channels, one module each, built from their config by type (one table)."""

from __future__ import annotations

import importlib
import logging

from api.notify.model import Channel
from api.notify.settings import ChannelConfig

#: A channel type -> "module:class" of its sender; each class is built as
#: ``Sender(name, config)`` and reads its secrets from the environment then.
SENDERS = {
    "webhook": "api.notify.channels.webhook:WebhookSender",
    "slack": "api.notify.channels.slack:SlackSender",
    "email": "api.notify.channels.email:EmailSender",
}


def quiet_http_logs() -> None:
    """httpx logs each request's URL at INFO, and a channel's URL may be a secret
    (Slack's, a webhook's ``url_env``): wherever a channel is built (the notifier, the
    API's test message), its loggers say warnings only."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def build_channel(name: str, config: ChannelConfig) -> Channel:
    quiet_http_logs()
    module, _, cls = SENDERS[config.type].partition(":")
    return getattr(importlib.import_module(module), cls)(name, config)
