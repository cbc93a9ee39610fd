"""Telemetry as the exporter writes the logs, and from the logs alone.

* :class:`SessionTelemetry` is the exporter's :class:`~observation.exporter.log.LogObserver`
  for one session: the LogWriter tells it every line (the ones already on disk
  when it opens, then each appended one) and each commit; at each commit it
  upserts the runs that changed into the store (in the exporter service through
  one background thread, off the log's path) and hands the runs that ended in
  new lines to the span sink (OpenTelemetry): spans of open sessions go out as
  their operations end, not when the session ends. A replayed line never
  re-exports a span. It never raises: a store error is logged and retried at the
  next commit; a line that does not project stops telemetry for that session
  (logged), never the log.
* :class:`Telemetry` makes one observer per session (``Exporter(observers=...)``).
* :func:`sync_store` brings the store up to the logs under ``runs/`` (at exporter
  start: sessions that ended while no exporter ran); :func:`rebuild_store` makes a
  new store from the logs alone (``hitlflow telemetry rebuild``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from observation.exporter.verify import LOG_NAME, read_head, read_lines, verify_lines
from observation.telemetry.model import Run, TelemetryRun
from observation.telemetry.otel import SpanSink, TelemetryConfigError, otlp_exporter_from_env
from observation.telemetry.project import ProjectionError, TelemetryProjector
from observation.telemetry.store import STORE_NAME, TelemetryStore, TelemetryStoreError
from observation.telemetry.writer import BackgroundWriter

log = logging.getLogger("hitlflow.telemetry")


class RunSink(Protocol):
    def upsert(self, runs: Iterable[TelemetryRun | Run],
               progress: tuple[str, int, str] | None = None) -> None: ...


class SessionTelemetry:
    """``store``: a :class:`TelemetryStore` (writes in the caller's thread) or a
    :class:`BackgroundWriter` (the exporter service: off the log's path)."""

    def __init__(self, session_id: str, store: RunSink | None,
                 spans: SpanSink | None) -> None:
        self.session_id, self.store, self.spans = session_id, store, spans
        self.projector = TelemetryProjector(session_id)
        self.head: tuple[int, str] | None = None
        self.dirty: set[str] = set()
        self.ended: set[str] = set()  # runs whose end is known (exported or replayed)
        self.to_export: list[str] = []
        self.broken: str | None = None

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        if self.broken is not None:
            return
        try:
            changed = self.projector.apply(event)
        except (ProjectionError, KeyError, TypeError, ValueError) as err:
            self.broken = f"line {event.get('seq')}: {type(err).__name__}: {err}"
            log.error("telemetry of session %s stops: %s", self.session_id, self.broken)
            return
        self.head = (int(event["seq"]), str(event["event_hash"]))
        self.dirty |= changed
        for rid in changed:
            if rid not in self.ended and self.projector.runs[rid].ended:
                self.ended.add(rid)
                if not replayed:
                    self.to_export.append(rid)

    def commit(self) -> None:
        if self.broken is not None:
            return
        runs = self.projector.runs
        if self.store is not None and self.dirty and self.head is not None:
            try:
                self.store.upsert([runs[r] for r in self.dirty if r in runs],  # what changed
                                  (self.session_id, *self.head))
                self.dirty.clear()
            except TelemetryStoreError as err:  # kept dirty: the next commit retries
                log.warning("telemetry of session %s: %s", self.session_id, err)
        if self.spans is not None and self.to_export:
            export, self.to_export = self.to_export, []
            try:
                self.spans.export(runs[r] for r in export)
            except Exception as err:  # an exporter's bug must not stop the log
                log.warning("telemetry of session %s: span export failed: %s",
                            self.session_id, err)


class Telemetry:
    """The exporter's telemetry: a store, a span sink, or both (or neither). With
    ``background``, store writes go through one :class:`BackgroundWriter` thread."""

    def __init__(self, store: TelemetryStore | None = None, spans: SpanSink | None = None,
                 *, background: bool = False) -> None:
        self.store, self.spans = store, spans
        self.writer = BackgroundWriter(store) if background and store is not None else None

    def observer(self, session_id: str) -> SessionTelemetry | None:
        if self.store is None and self.spans is None:
            return None
        return SessionTelemetry(session_id, self.writer or self.store, self.spans)

    def flush(self) -> None:
        """Everything handed over so far is in the store and sent to the span exporter."""
        if self.writer is not None:
            self.writer.flush()
        if self.spans is not None:
            self.spans.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.spans is not None:
            self.spans.shutdown()
        if self.store is not None:
            self.store.close()


def replay_log(run_dir: Path) -> tuple[TelemetryProjector, tuple[int, str] | None]:
    """The runs of one log file, verified line by line (raises ChainBrokenError)."""
    projector, head = TelemetryProjector(run_dir.name), None
    for event in verify_lines(read_lines(run_dir / LOG_NAME)):
        projector.apply(event)
        head = (int(event["seq"]), str(event["event_hash"]))
    return projector, head


def sync_store(store: TelemetryStore, runs_dir: Path, *, every: bool = False
               ) -> tuple[int, dict[str, str]]:
    """Project every log under ``runs_dir`` whose head the store has not reflected
    yet (``every``: all of them) into the store; ``(sessions synced, errors)``."""
    done, errors = store.progress(), {}
    synced = 0
    dirs = sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []
    for run_dir in dirs:
        if not (run_dir / LOG_NAME).is_file():
            continue
        if not every and done.get(run_dir.name) == read_head(run_dir):
            continue
        try:
            projector, head = replay_log(run_dir)
            if head is not None:
                store.upsert(projector.runs.values(), (run_dir.name, *head))
                synced += 1
        except (ValueError, KeyError, TypeError, OSError) as err:  # ChainBroken, Projection
            errors[run_dir.name] = f"{type(err).__name__}: {err}"
    return synced, errors


def rebuild_store(data_dir: Path) -> tuple[int, dict[str, str]]:
    """A new ``telemetry.sqlite`` from the logs under ``runs/`` alone, put in place
    of the old one (which is not read: it may be corrupt). Run it while no exporter
    writes the store."""
    path = data_dir / STORE_NAME
    tmp = data_dir / f".{STORE_NAME}.rebuild"
    for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        stale.unlink(missing_ok=True)
    with TelemetryStore.open(tmp) as store:
        result = sync_store(store, data_dir / "runs", every=True)
    for stale in (Path(f"{path}-wal"), Path(f"{path}-shm")):  # the old file's, not ours
        stale.unlink(missing_ok=True)
    os.replace(tmp, path)
    return result


def start_telemetry(data_dir: Path, env: Mapping[str, str] | None = None) -> Telemetry:
    """The exporter service's telemetry: the store under ``data_dir`` brought up to
    the logs, and OTLP spans when the environment asks for them. A store that
    cannot be used, or an OTLP set-up that fails, is logged and left out: the logs
    are exported all the same."""
    store: TelemetryStore | None = None
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        store = TelemetryStore.open(data_dir / STORE_NAME)
        synced, errors = sync_store(store, data_dir / "runs")
        for sid, err in errors.items():
            log.error("telemetry: the log of session %s does not project: %s", sid, err)
        if synced:
            log.info("telemetry: %d session logs projected into %s", synced, store.path)
    except TelemetryStoreError as err:
        log.error("telemetry store left out: %s", err)
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
            store = None
    spans = None
    try:
        exporter = otlp_exporter_from_env(env)
        spans = SpanSink(exporter) if exporter is not None else None
    except TelemetryConfigError as err:
        log.error("OpenTelemetry export left out: %s", err)
    return Telemetry(store, spans, background=True)
