"""The webhook channel: Standard Webhooks (https://www.standardwebhooks.com), signed
with the ``standardwebhooks`` package.

Each message is one POST of a JSON body (``api/notify/schemas/webhook.schema.json``)
with the headers ``webhook-id`` (the message's stable id: receivers dedupe on it),
``webhook-timestamp`` (when this attempt was sent) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``). The body is made from
the stored message alone, so every attempt sends the same bytes.

A 2xx answer is delivered; 408, 429, 5xx and connection errors are tried again;
any other answer (a 3xx included: redirects are not followed) is permanent. Errors
never name the URL (it may hold a token) or the secret.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import httpx
from standardwebhooks import Webhook

from api.notify.model import DeliveryFailed, Message
from api.notify.settings import NotifyConfigError, WebhookChannel, secret_from_env
from workflows.canonical import canonical_json

#: The payload's ``type`` per notice kind.
EVENT_TYPES = {"opened": "hitlflow.request.opened", "reminded": "hitlflow.request.reminded",
               "escalated": "hitlflow.request.escalated",
               "expired": "hitlflow.request.expired",
               "auto_decided": "hitlflow.request.auto_decided",
               "ended": "hitlflow.session.ended"}
RETRIED = frozenset({408, 429})
USER_AGENT = "hitlflow-notifier"
MIN_SECRET = 16  # bytes of key (the specification: 24 to 64)


def payload(message: Message) -> dict[str, Any]:
    """The JSON body of ``message``: its notice's fields and links under ``data``."""
    notice = message.notice
    data = notice.model_dump(mode="json")
    data["links"] = message.links.model_dump(mode="json", exclude_none=True)
    return {"type": EVENT_TYPES[notice.kind], "id": message.message_id,
            "timestamp": notice.at, "data": data}


def body_of(message: Message) -> str:
    """The exact bytes sent (as text): canonical JSON, the same at every attempt."""
    return canonical_json(payload(message))


class WebhookSender:
    """One configured webhook channel."""

    def __init__(self, name: str, config: WebhookChannel) -> None:
        self.name = name
        self.config = config
        self.url = config.url or secret_from_env(config.url_env, f"channel {name}: url_env")
        secret = secret_from_env(config.secret_env, f"channel {name}: secret_env")
        try:
            raw = (secret or "").removeprefix("whsec_")
            if len(base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)) < MIN_SECRET:
                raise ValueError("too short")
            self._signer = Webhook(secret or "")
        except Exception:  # the package raises several kinds; none may say the secret
            raise NotifyConfigError(
                f"channel {name}: the secret in {config.secret_env} is not a Standard "
                f"Webhooks secret (whsec_<base64 of {MIN_SECRET} to 64 bytes>)") from None
        if not str(self.url).startswith(("http://", "https://")):
            raise NotifyConfigError(f"channel {name}: the URL must be http:// or https://")
        self._client: httpx.AsyncClient | None = None

    def headers(self, message: Message, body: str, now: datetime | None = None
                ) -> dict[str, str]:
        now = now or datetime.now(UTC)
        return {"webhook-id": message.message_id,
                "webhook-timestamp": str(int(now.timestamp())),
                "webhook-signature": self._signer.sign(message.message_id, now, body),
                "content-type": "application/json", "user-agent": USER_AGENT}

    async def send(self, message: Message) -> str:
        body = body_of(message)
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.config.timeout_s,
                                             follow_redirects=False)
        try:
            response = await self._client.post(str(self.url), content=body.encode(),
                                               headers=self.headers(message, body))
        except httpx.HTTPError as err:  # connect, timeout, protocol: the receiver may come back
            raise DeliveryFailed(f"no answer: {type(err).__name__}") from None
        status = response.status_code
        if 200 <= status < 300:
            return f"HTTP {status}"
        permanent = not (status in RETRIED or status >= 500)
        raise DeliveryFailed(f"HTTP {status}", permanent=permanent)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
