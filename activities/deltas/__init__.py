"""Streamed tokens: the model's text as it is written, to whoever watches the session.

The LLM activity publishes each piece of text it receives (``DeltaBus.publish``)
and says when the call ended (``DeltaBus.finish``); the API's SSE stream
subscribes (``DeltaBus.subscribe``) and sends them as ephemeral ``text.delta``
events. Nothing here reaches the history or the log: the final text stays one
``text`` event, as before. A subscriber that comes while a call is being written
gets the text so far first (a :class:`TextDelta` with ``text`` set), then deltas.

Implementations: :class:`InProcessDeltaBus` (publisher and subscribers in one
process; ``hitlflow up``'s API, fed by its worker process's
``activities.deltas.pipe.PipeDeltaBus``),
``activities.deltas.postgres.PostgresDeltaBus`` (a cluster: workers and API
processes share the PostgreSQL read model; ``cluster_delta_bus``) and
:class:`NullDeltaBus` (nobody listens). The bus is passed in by the entry points
(``api.runtime.worker``, ``api.http.app.run_api``, ``api.cli.stack``), never imported from
``api/``.
"""

from __future__ import annotations

from typing import Any

from activities.deltas.bus import (
    LLM_CALL_SCHEDULED,
    QUEUE_DELTAS,
    DeltaBus,
    InProcessDeltaBus,
    NullDeltaBus,
    TextDelta,
    call_scheduled,
    split_text,
)

__all__ = ["LLM_CALL_SCHEDULED", "QUEUE_DELTAS", "DeltaBus", "InProcessDeltaBus",
           "NullDeltaBus", "TextDelta", "call_scheduled", "cluster_delta_bus", "split_text"]


def cluster_delta_bus(read_model_url: str | None) -> Any:
    """The bus separate worker and API processes share: PostgreSQL ``LISTEN``/``NOTIFY``
    when the read model is in PostgreSQL, else None (no transport: no deltas)."""
    if read_model_url and read_model_url.startswith(("postgresql://", "postgres://")):
        from activities.deltas.postgres import PostgresDeltaBus

        return PostgresDeltaBus(read_model_url)
    return None
