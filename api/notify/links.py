"""Links in messages: the request's page in the inbox and, where allowed, signed,
expiring, one-time approve and reject links bound to the session, the request, the
digest of what is asked, the decision and the person they were sent to.

(Contract stub: the page link only; the action links come with issue 26's links part.)
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from api.notify.model import Links, Notice
from api.notify.settings import NotifyConfig
from workflows.people import PrincipalRef


def page_url(base_url: str, session_id: str) -> str:
    return f"{base_url.rstrip('/')}/#/s/{quote(session_id, safe='')}"


def link_secret(data_dir: Path) -> bytes:
    """The key action links are signed with: ``<data_dir>/link-key`` (made once,
    mode 0600)."""
    raise NotImplementedError


def links_for(notice: Notice, recipient: PrincipalRef | None, config: NotifyConfig, *,
              base_url: str, secret: bytes | None, now: datetime) -> Links:
    """The links of one message: the page always; approve/reject for an approval
    request when ``config.action_links``, a ``secret`` and a ``recipient`` person."""
    return Links(page=page_url(config.public_url or base_url, notice.session_id))
