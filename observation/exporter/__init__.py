"""The history exporter: Temporal history -> hash-chained NDJSON log, snapshot, artifacts.

See docs/audit-log.md for the exact bytes. Public API:

* mapping (pure): :func:`map_history`, :class:`SessionMapper`, :class:`MappedEvent`
* chain (pure): :class:`Chain`, :class:`LogEvent`, :func:`line_bytes`, ``GENESIS``
* the log snapshot, ``snapshot.json`` (pure): :class:`LogSnapshot`, :func:`snapshot_bytes`
* event types: declared in ``observation/event_types.py`` (``SEED_TYPES``, ``is_sse``)
* verify: :func:`verify_dir`, :func:`verify_lines`, :class:`ChainBrokenError`
* I/O: :class:`LogWriter`, :func:`export_session`, :func:`session_events`,
  :class:`Exporter`, :class:`Wakeups`, :func:`run_exporter`

Each name loads its module when first used (PEP 562), so ``hitlflow log verify``,
which needs only ``verify.py``, starts without Temporal or the server side
(``tests/observation/test_verify_fast.py`` checks it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module that defines it.
_WHERE = {
    "SEED_TYPES": "observation.event_types",
    "SSE_TYPES": "observation.event_types",
    "is_sse": "observation.event_types",
    "GENESIS": "observation.exporter.chain",
    "HASH_PREFIX": "observation.exporter.chain",
    "LOG_VERSION": "observation.exporter.chain",
    "Chain": "observation.exporter.chain",
    "hash_body": "observation.exporter.chain",
    "line_bytes": "observation.exporter.chain",
    "line_hash": "observation.exporter.chain",
    "seed_hash": "observation.exporter.chain",
    "MappingError": "observation.exporter.decode",
    "LogFeed": "observation.exporter.feed",
    "ExportResult": "observation.exporter.follower",
    "LogDivergedError": "observation.exporter.follower",
    "SessionExport": "observation.exporter.follower",
    "export_history": "observation.exporter.follower",
    "export_session": "observation.exporter.follower",
    "history_events": "observation.exporter.follower",
    "session_events": "observation.exporter.follower",
    "stream_head": "observation.exporter.follower",
    "LogCorruptError": "observation.exporter.log",
    "LogError": "observation.exporter.log",
    "LogLockedError": "observation.exporter.log",
    "LogWriteError": "observation.exporter.log",
    "LogWriter": "observation.exporter.log",
    "SessionMapper": "observation.exporter.mapping",
    "map_history": "observation.exporter.mapping",
    "Artifact": "observation.exporter.model",
    "LogEvent": "observation.exporter.model",
    "MappedEvent": "observation.exporter.model",
    "StreamHead": "observation.exporter.model",
    "Exporter": "observation.exporter.service",
    "Wakeups": "observation.exporter.service",
    "run_exporter": "observation.exporter.service",
    "LogSnapshot": "observation.exporter.snapshot",
    "ReplayError": "observation.exporter.snapshot",
    "snapshot_bytes": "observation.exporter.snapshot",
    "ChainBrokenError": "observation.exporter.verify",
    "Verified": "observation.exporter.verify",
    "verify_dir": "observation.exporter.verify",
    "verify_lines": "observation.exporter.verify",
}


if TYPE_CHECKING:  # what type checkers and readers see
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
