"""The history exporter: Temporal history -> hash-chained NDJSON log, snapshot, artifacts.

See docs/audit-log.md for the exact bytes. Public API:

* mapping (pure): :func:`map_history`, :class:`SessionMapper`, :class:`MappedEvent`
* chain (pure): :class:`Chain`, :class:`LogEvent`, :func:`line_bytes`, ``GENESIS``
* the log snapshot, ``snapshot.json`` (pure): :class:`LogSnapshot`, :func:`snapshot_bytes`
* event types: declared in ``observation/event_types.py`` (``SEED_TYPES``, ``is_sse``)
* verify: :func:`verify_dir`, :func:`verify_lines`, :class:`ChainBrokenError`
* I/O: :class:`LogWriter`, :func:`export_session`, :func:`session_events`,
  :class:`Exporter`, :class:`Wakeups`, :func:`run_exporter`
"""

from observation.event_types import SEED_TYPES, SSE_TYPES, is_sse
from observation.exporter.chain import (
    GENESIS,
    HASH_PREFIX,
    LOG_VERSION,
    Chain,
    hash_body,
    line_bytes,
    line_hash,
    seed_hash,
)
from observation.exporter.decode import MappingError
from observation.exporter.feed import LogFeed
from observation.exporter.follower import (
    ExportResult,
    LogDivergedError,
    SessionExport,
    export_history,
    export_session,
    history_events,
    session_events,
    stream_head,
)
from observation.exporter.log import (
    LogCorruptError,
    LogError,
    LogLockedError,
    LogWriteError,
    LogWriter,
)
from observation.exporter.mapping import SessionMapper, map_history
from observation.exporter.model import Artifact, LogEvent, MappedEvent, StreamHead
from observation.exporter.service import Exporter, Wakeups, run_exporter
from observation.exporter.snapshot import LogSnapshot, ReplayError, snapshot_bytes
from observation.exporter.verify import ChainBrokenError, Verified, verify_dir, verify_lines

__all__ = [
    "GENESIS", "HASH_PREFIX", "LOG_VERSION", "SEED_TYPES", "SSE_TYPES", "Artifact", "Chain",
    "ChainBrokenError", "ExportResult", "Exporter", "LogCorruptError", "LogDivergedError",
    "LogError", "LogEvent", "LogFeed", "LogLockedError", "LogSnapshot", "LogWriteError",
    "LogWriter", "MappedEvent", "MappingError", "ReplayError", "SessionExport", "SessionMapper",
    "StreamHead", "Verified", "Wakeups",
    "export_history", "export_session", "hash_body", "history_events", "is_sse",
    "line_bytes", "line_hash", "map_history", "run_exporter", "seed_hash", "session_events",
    "snapshot_bytes", "stream_head",
    "verify_dir", "verify_lines",
]
