"""The read model: every session's current view, kept by the exporter next to the
log and served by the API (see ``store.py``, its list's page token in
``list_token.py``; rows from the log fold in ``rows.py``; the exporter's hook, the
start-up catch-up and the rebuild in ``sync.py``)."""

from __future__ import annotations

from pathlib import Path

from observation.read_model.store import ReadModelError, ReadStore


def open_store(data_dir: Path, url: str | None = None) -> ReadStore:
    """PostgreSQL when ``url`` is given (``postgresql://...``), else SQLite in
    ``data_dir``."""
    if url:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ReadModelError(f"unsupported read model URL (postgresql:// only): {url!r}")
        from observation.read_model.postgres import PostgresStore
        return PostgresStore(url)
    from observation.read_model.sqlite import SqliteStore
    return SqliteStore.in_dir(data_dir)


__all__ = ["ReadModelError", "ReadStore", "open_store"]
