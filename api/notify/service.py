"""The notifier: route new notices into the outbox and deliver what is due, until
stopped (``hitlflow notifier``; ``up`` runs it as a child process when
``HITLFLOW_NOTIFY_CONFIG`` is set).

Each round: route the notices written since the position (``Outbox.route``), then
claim up to ``concurrency`` due messages and send them at once; again at once while
there was work, else after ``poll_s``. Idle, a round is two indexed reads (the
notices after the position; whether anything is due), whatever the number of
sessions waiting. Everything it knows is in the database: killed at any point, the
next notifier routes what was not routed and sends again what was claimed but not
marked delivered (same id, same bytes: at least once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from api.identity.people_store import PeopleFileError, PeopleStore
from api.notify import links
from api.notify.channels import SENDERS, build_channel
from api.notify.model import Channel, DeliveryFailed, Links, Message, Notice
from api.notify.outbox import Outbox, PositionMoved, message_id
from api.notify.routing import Directory, route
from api.notify.settings import NotifyConfig, NotifyConfigError, NotifySettings
from observation.read_model.store import ReadModelError, ReadStore

log = logging.getLogger("hitlflow.notify")
T = TypeVar("T")
#: Notices routed per transaction.
ROUTE_BATCH = 500
#: Delivered messages are kept this long (at least a window), then dropped, hourly.
KEEP_DELIVERED_S = 7 * 24 * 3600.0
PURGE_EVERY_S = 3600.0


def build_channels(config: NotifyConfig) -> dict[str, Channel]:
    """Every configured channel's sender (raises :class:`NotifyConfigError`: a secret
    not set, a type whose module is not installed)."""
    out: dict[str, Channel] = {}
    for name, cfg in config.channels.items():
        try:
            out[name] = build_channel(name, cfg)
        except (ImportError, AttributeError):
            raise NotifyConfigError(f"channel {name}: type {cfg.type} is not available "
                                    f"({SENDERS[cfg.type]})") from None
    return out


def lease_for(config: NotifyConfig, settings: NotifySettings) -> float:
    """How long a claim holds a message: the settings' ``lease_s``, else the slowest
    channel's timeout and a margin (a send in progress is never sent twice at once)."""
    if settings.lease_s is not None:
        return settings.lease_s
    slowest = max((c.timeout_s for c in config.channels.values()), default=10.0)
    return slowest + 30.0


class Notifier:
    """One notifier over one read model's database."""

    def __init__(self, store: ReadStore, config: NotifyConfig, settings: NotifySettings,
                 *, data_dir: Path, base_url: str, channels: dict[str, Channel] | None = None,
                 people: PeopleStore | None = None) -> None:
        self.store, self.config, self.settings = store, config, settings
        self.outbox = Outbox(store)
        self.channels = build_channels(config) if channels is None else channels
        self.base_url = base_url
        self.people = people
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.lease_s = lease_for(config, settings)
        self.secret: bytes | None = None
        if config.action_links:
            try:
                self.secret = links.link_secret(data_dir)
            except links.LinkKeyError as err:  # messages still go, with page links only
                log.error("notifier: no action links: %s", err)
        self.sent = self.failures = 0

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if getattr(self.store, "inline", False):
            return fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    # -- routing --------------------------------------------------------------------------

    def _directory(self) -> Directory:
        if self.people is None:
            return Directory()
        try:
            return Directory(self.people.read())
        except PeopleFileError as err:
            log.warning("the people store cannot be read (%s): e-mail entries only", err)
            return Directory()

    def expand(self, body: dict[str, Any], directory: Directory | None = None,
               now: datetime | None = None) -> list[Message]:
        """A notice's messages, rendered (links included) as they will be sent."""
        notice = Notice.model_validate(body)
        now = now or datetime.now(UTC)
        out = []
        for t in route(notice, self.config, directory or Directory()):
            try:
                page_links = links.links_for(notice, t.person, self.config,
                                             base_url=self.base_url, secret=self.secret,
                                             now=now)
            except Exception as err:  # a link that cannot be made: the page link still goes
                log.warning("notice %s: no action links (%s)", notice.notice_id,
                            type(err).__name__)
                page_links = Links(page=links.page_url(self.config.public_url or self.base_url,
                                                       notice.session_id))
            out.append(Message(message_id=message_id(notice.notice_id, t.channel, t.recipient),
                               channel=t.channel, recipient=t.recipient, notice=notice,
                               links=page_links))
        return out

    def route_once(self) -> int:
        """Route one batch of new notices; how many were read."""
        directory: list[Directory] = []  # read once a round, when a notice needs it

        def expand(body: dict[str, Any]) -> list[Message]:
            if not directory:
                directory.append(self._directory())
            return self.expand(body, directory[0])

        try:
            return self.outbox.route(expand, window_s=self.config.window_s, limit=ROUTE_BATCH)
        except PositionMoved:  # another notifier routed them: read on from where it is
            return 1

    # -- delivery -------------------------------------------------------------------------

    async def _send(self, message: Message) -> None:
        channel = self.channels.get(message.channel)
        try:
            if channel is None:
                raise DeliveryFailed(f"channel {message.channel} is not configured",
                                     permanent=True)
            answer = await channel.send(message)
        except DeliveryFailed as err:
            self.failures += 1
            state = await self._db(self.outbox.failed, message.message_id, err.detail,
                                   permanent=err.permanent, backoff_s=self.settings.backoff_s,
                                   max_backoff_s=self.settings.max_backoff_s)
            log.info("message %s to %s: %s (%s)", message.message_id, message.channel,
                     err.detail, state)
            return
        except Exception as err:  # a sender's bug must not stop the others
            self.failures += 1
            await self._db(self.outbox.failed, message.message_id,
                           f"sender error: {type(err).__name__}", permanent=False,
                           backoff_s=self.settings.backoff_s,
                           max_backoff_s=self.settings.max_backoff_s)
            log.warning("message %s to %s: sender error %s", message.message_id,
                        message.channel, type(err).__name__)
            return
        self.sent += 1
        await self._db(self.outbox.delivered, message.message_id)
        log.debug("message %s to %s: %s", message.message_id, message.channel, answer)

    async def deliver_once(self) -> int:
        """Claim and send up to ``concurrency`` due messages at once; how many."""
        claimed = await self._db(self.outbox.claim, self.owner, self.settings.concurrency,
                                 self.lease_s)
        if claimed:
            await asyncio.gather(*(self._send(m) for m, _attempts in claimed))
        return len(claimed)

    # -- the loop -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, on_round: Callable[[], None] | None = None
                  ) -> None:
        """Route and deliver until ``stop`` is set."""
        purged_at = 0.0
        try:
            while not stop.is_set():
                busy = False
                try:
                    busy = await self._db(self.route_once) > 0
                    busy = await self.deliver_once() > 0 or busy
                    if (t := time.monotonic()) - purged_at >= PURGE_EVERY_S:
                        purged_at = t
                        await self._db(self.outbox.purge,
                                       max(KEEP_DELIVERED_S, self.config.window_s))
                except ReadModelError as err:  # the database is away: try again later
                    log.warning("notifier: %s", err)
                if on_round is not None:
                    on_round()
                if not busy:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.settings.poll_s)
        finally:
            for channel in self.channels.values():
                closing = getattr(channel, "aclose", None)
                if closing is not None:
                    with contextlib.suppress(Exception):
                        await closing()
