"""URLs in messages: a PostgreSQL URL without its password (the read model's store
and the cluster's delta bus name their database in errors and logs)."""

from __future__ import annotations


def redact(url: str) -> str:
    """The URL without its password (for messages)."""
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, _, cred = head.partition("://")
    user = cred.split(":", 1)[0]
    return f"{scheme}://{user}:***@{tail}"
