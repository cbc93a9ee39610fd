"""Read sessions' exported logs incrementally into their folds (``log_view.py``).

The exporter only appends whole lines (``JCS + "\\n"``), so each session keeps the
byte offset it has folded up to and, on the next read, folds only what was
appended since. A torn last line (no newline yet) is left for the next read. If
the file shrank, or the bytes before the offset are not the ones folded, or a new
line does not chain on (``seq``, ``prev_hash``), the log was rewritten: the fold
starts again from the first line. Sessions are kept in a bounded LRU.

Only reads files. Thread-safe: the API calls it from worker threads.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from observation.exporter.verify import LOG_NAME
from observation.log_view import SessionLogView

T = TypeVar("T")


class LogUnreadableError(ValueError):
    """The log does not fold even when read from its first line."""


class _Rewritten(Exception):
    pass


class SessionLogReader:
    """One session's log, folded up to ``offset``."""

    def __init__(self, path: Path, session_id: str) -> None:
        self.path, self.session_id = path, session_id
        self.lock = threading.Lock()
        self.refolds = -1  # how often the fold started again (the first time is not one)
        self._reset()

    def _reset(self) -> None:
        self.view = SessionLogView(self.session_id)
        self.offset = 0
        self.last_line = b""
        self.refolds += 1

    def refresh(self) -> SessionLogView | None:
        """Fold what was appended since the last call; None when there is no log."""
        try:
            with self.path.open("rb") as f:
                try:
                    self._read(f)
                except _Rewritten:
                    self._reset()
                    f.seek(0)
                    try:
                        self._read(f)
                    except _Rewritten as err:
                        self._reset()
                        raise LogUnreadableError(f"{self.path}: {err}") from None
        except FileNotFoundError:
            self._reset()
            return None
        return self.view

    def _read(self, f: BinaryIO) -> None:
        start = self.offset - len(self.last_line)
        f.seek(start)
        data = f.read()
        if not data.startswith(self.last_line):
            raise _Rewritten("the lines already folded changed")
        end = data.rfind(b"\n") + 1  # a torn last line waits for its newline
        if end <= len(self.last_line):
            return
        view = self.view
        pos = len(self.last_line)
        # Split on "\n" only: the exporter ends lines so (JCS escapes it in strings).
        for line in (part + b"\n" for part in data[pos:end - 1].split(b"\n")):
            try:
                event = json.loads(line)
                chained = (event["seq"] == view.last_seq + 1
                           and event["prev_hash"] == view.last_hash)
            except (ValueError, KeyError, TypeError):
                raise _Rewritten(f"line {view.last_seq + 1} is not a log event") from None
            if not chained:
                raise _Rewritten(f"line {view.last_seq + 1} does not chain on")
            try:
                view.apply(event)
            except (ValueError, KeyError, TypeError) as err:
                raise _Rewritten(f"line {view.last_seq + 1}: {err}") from None
            self.last_line = line
            pos += len(line)
        self.offset = start + pos


class LogViews:
    """The folds of up to ``capacity`` sessions' logs under ``runs_dir``."""

    def __init__(self, runs_dir: Path, capacity: int = 256) -> None:
        self.runs_dir, self.capacity = runs_dir, capacity
        self._readers: OrderedDict[str, SessionLogReader] = OrderedDict()
        self._lock = threading.Lock()

    def _reader(self, session_id: str) -> SessionLogReader:
        with self._lock:
            reader = self._readers.get(session_id)
            if reader is None:
                reader = SessionLogReader(self.runs_dir / session_id / LOG_NAME, session_id)
                self._readers[session_id] = reader
            self._readers.move_to_end(session_id)
            while len(self._readers) > self.capacity:
                self._readers.popitem(last=False)
            return reader

    def read(self, session_id: str, use: Callable[[SessionLogView | None], T]) -> T:
        """``use(view)`` on the session's fold brought up to date (None: no log yet),
        holding the session's lock: the view must not leak out of ``use``.
        ``session_id`` must already be validated (it names a directory)."""
        reader = self._reader(session_id)
        with reader.lock:
            return use(reader.refresh())
