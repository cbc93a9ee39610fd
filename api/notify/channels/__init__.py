"""The channels, one module each, built from their config by type (one table)."""

from __future__ import annotations

import importlib

from api.notify.model import Channel
from api.notify.settings import ChannelConfig

#: A channel type -> "module:class" of its sender; each class is built as
#: ``Sender(name, config)`` and reads its secrets from the environment then.
SENDERS = {
    "webhook": "api.notify.channels.webhook:WebhookSender",
    "slack": "api.notify.channels.slack:SlackSender",
    "email": "api.notify.channels.email:EmailSender",
}


def build_channel(name: str, config: ChannelConfig) -> Channel:
    module, _, cls = SENDERS[config.type].partition(":")
    return getattr(importlib.import_module(module), cls)(name, config)
