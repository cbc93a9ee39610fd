"""The durable, append-only writer of one session's log directory.

``runs/<session_id>/`` holds ``events.ndjson`` (one line per event, each appended
with one ``write``; a commit fsyncs them, once per batch), ``artifacts/`` (written
before the line that names them, each durable with its directory entry), and the
files **at rest**: ``snapshot.json`` (the fold of the log), ``head`` (``last_seq``,
``last_hash``) and, with a :class:`Signer`, ``checkpoint`` (``checkpoint.py``).
Each is written to a temporary file, fsynced and renamed over the old one, after
the lines it covers are durable; the rename is not fsynced: a crash may leave the
previous one, whole, which open repairs from the log. The head never points past a
line on disk; lines after it that a crash lost or tore are cut on open and
re-exported from history, which is where they come from. One writer per
directory, enforced by ``flock`` on ``.lock``.

The files at rest are not rewritten at every commit (issue 28: the snapshot grows
with the session, and a head and a signature per batch cost more than the batch):
a commit makes the lines durable (one fsync) and tells the observer; the three are
written together (:meth:`LogWriter.write_at_rest`) when the caller asks (the
follower: when no event comes for a moment, at a wait for the person not answered
at once, at the end),
by a commit when ``snapshot_every_s`` passed since they were last written, and by
:meth:`LogWriter.close`. So at rest (a session ended, parked or closed) they are
the same bytes as ever (``hitlflow log replay``, ``hitlflow log verify --key``);
while a session is followed they may lag the log by a few seconds (the head is
then behind the last line, never past it: ``verify --live`` checks the lines up to
it, the read model's catch-up accepts it when that line hashes to it), and after a
crash they are rebuilt from the log on open (the log is the truth).

On open a torn last line (no newline, or not JSON) is cut off, the rest of the
log is verified and folded into the snapshot, and a lagging head is rewritten.
A log keeps the format version of its first line (``log_version``): a log begun in
v1 is continued in v1, a new one is written in ``LOG_VERSION`` (or the version of
its first line, given by the caller's :class:`Chain`); a line of another
version is refused (:class:`LogError`), so a file is never mixed.
Any write or fsync error stops the writer for good (:class:`LogWriteError`).
An optional :class:`LogObserver` (telemetry) is told every line and every commit
(after the fsync). With a :class:`Signer`, the files at rest end with
``checkpoint``, written after ``head`` once a commit that follows appended or
re-mapped lines allowed it (``sign``); opening never signs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import time
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import Any, Protocol

import orjson

from observation.event_types import END_TYPES
from observation.exporter import files
from observation.exporter.chain import GENESIS, LOG_VERSION, Chain, line_bytes, read_json
from observation.exporter.checkpoint import CHECKPOINT_NAME, checkpoint_bytes
from observation.exporter.files import atomic_write, cut_torn_tail, fsync_dir
from observation.exporter.model import Artifact, LogEvent
from observation.exporter.note import Signer
from observation.exporter.snapshot import LogSnapshot, ReplayError
from observation.exporter.verify import (
    HEAD_NAME,
    LOG_NAME,
    SNAPSHOT_NAME,
    ChainBrokenError,
    line_version,
    read_head,
    read_lines,
    verify_lines,
)

log = logging.getLogger("hitlflow.exporter")
LOCK_NAME = ".lock"
#: A commit rewrites the files at rest (``snapshot.json``, ``head``, ``checkpoint``)
#: when they were last written this long ago (else they are written on idle, at a
#: wait, at the end and on close; see the docstring).
SNAPSHOT_EVERY_S = 5.0


class LogError(Exception):
    """The log directory cannot be written."""


class LogLockedError(LogError):
    """Another exporter holds the directory's lock."""


class LogCorruptError(LogError):
    """The log on disk fails verification (beyond a torn last line): nothing is written."""


class LogWriteError(LogError):
    """A write or fsync failed: the writer stops, the exporter must stop too."""


class LogObserver(Protocol):
    """Told every line of the log in order, as a dict read from its bytes: those on
    disk when the writer opens (``replayed``), then each appended one; and each
    commit (after the batch's fsync; the files at rest may come later). Telemetry is one
    (``observation.telemetry``). It must not raise: the log comes first."""

    def event(self, event: dict[str, Any], replayed: bool) -> None: ...

    def commit(self) -> None: ...

    # Optional: ``call_scheduled(call_id)``, an LLM call was scheduled after the lines
    # told so far (not a line of the log; the SSE feed passes it on to its streams).


class LogWriter:
    def __init__(self, run_dir: Path, observer: LogObserver | None = None,
                 signer: Signer | None = None) -> None:
        self.run_dir = run_dir
        self.observer = observer
        self.signer = signer  # signs the head in ``checkpoint`` with the files at rest
        self.snapshot = LogSnapshot(run_dir.name)
        self.last_seq, self.last_hash, self.last_type = 0, GENESIS, ""
        self.last_line_hash: str | None = None  # v2 lines only
        self.log_version = LOG_VERSION  # of the log on disk once open (new: LOG_VERSION)
        self._lock_fd: int | None = None
        self._log_fd: int | None = None
        self._failed: BaseException | None = None
        self._unsynced = False  # lines written since the last fsync
        self.lost_head: tuple[int, str] | None = None  # (last_seq, last_hash) beyond the log
        self.snapshot_every_s = SNAPSHOT_EVERY_S
        self._snapshot_at = -float("inf")  # when snapshot.json was last written (monotonic)
        self._on_disk_seq: dict[str, int | None] = {HEAD_NAME: None, SNAPSHOT_NAME: None}
        # The lines up to the head were checked against history (a commit said ``sign``):
        # the files at rest then end with a signed ``checkpoint``. Opening never signs.
        self._signable = False
        self._signed_seq: int | None = None  # the head ``checkpoint`` signs, once written
        self._size = 0  # bytes of events.ndjson this writer knows of
        self._left: tuple[int, int, int] | None = None  # the log's (inode, size, mtime) at close
        self._root: Path | None = None  # run_dir resolved (_put_artifact)

    # -- open / close -------------------------------------------------------------------

    def open(self) -> LogWriter:
        if not self.run_dir.is_dir():
            self.run_dir.mkdir(parents=True)
            fsync_dir(self.run_dir.parent)
        self._lock()
        try:
            self._load()
        except BaseException:
            self.close()
            raise
        return self

    def _lock(self) -> None:
        path = self.run_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LogLockedError(f"{self.run_dir} is being written by another exporter "
                                     f"(it holds the lock on {path})") from None
            raise
        self._lock_fd = fd

    def _load(self) -> None:
        for name in (SNAPSHOT_NAME, HEAD_NAME, CHECKPOINT_NAME):  # a write a crash cut short
            with contextlib.suppress(FileNotFoundError):
                (self.run_dir / f".{name}.tmp").unlink()
        path = self.run_dir / LOG_NAME
        if path.exists():
            cut = cut_torn_tail(path)
            if cut:
                log.warning("%s: cut a torn last line (%d bytes); it is re-exported", path, cut)
            try:
                for event in verify_lines(read_lines(path), self.run_dir.resolve().name):
                    self.snapshot.apply(event)
                    if self.observer is not None:
                        self.observer.event(event, True)
                    self.last_seq, self.last_hash = event["seq"], event["event_hash"]
                    self.last_type, self.last_line_hash = event["type"], event.get("line_hash")
                    self.log_version = line_version(event)
            except (ChainBrokenError, ReplayError) as err:
                raise LogCorruptError(f"{path}: {err}; nothing was written (check it with "
                                      "`hitlflow log verify`, move it aside to re-export)"
                                      ) from None
        self._find_lost_tail()
        self._log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._log_fd).st_size
        fsync_dir(self.run_dir)
        for name, data in ((HEAD_NAME, self._head_bytes()),
                           (SNAPSHOT_NAME, self.snapshot.to_bytes())):
            if self._on_disk(name, data):
                self._on_disk_seq[name] = self.last_seq
        new = self.last_seq == 0 and not any(
            (self.run_dir / n).exists() for n in (HEAD_NAME, SNAPSHOT_NAME))
        # Stale after a crash: rebuilt from the log (lines not yet checked: unsigned). A
        # new log's come with its first commit or its close (no fsyncs on open).
        if None in self._on_disk_seq.values() and not new:
            self.commit(sign=False, snapshot=True)
        self._snapshot_at = time.monotonic()  # the period of the files at rest starts

    def resume(self) -> LogWriter:
        """Open again after :meth:`close`, keeping the state in memory (no re-read, no
        re-verification, the observer not told the lines again) when the directory is
        as this writer left it: the log the same file, size and mtime, ``head`` and
        ``snapshot.json`` the ones it wrote. Else :class:`LogError`, and nothing is
        held: the caller opens a new writer (which reads and checks it all)."""
        if self._failed is not None or self._left is None or self._log_fd is not None:
            raise LogError(f"{self.run_dir}: this writer cannot resume")
        self._lock()
        try:
            path = self.run_dir / LOG_NAME
            st = path.stat()
            if (st.st_ino, st.st_size, st.st_mtime_ns) != self._left or not self._on_disk(
                    HEAD_NAME, self._head_bytes()) or self.snapshot_stale or not (
                    self.run_dir / SNAPSHOT_NAME).is_file():
                raise LogError(f"{self.run_dir}: changed since this writer closed it")
            self._log_fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            self.close()
            raise
        self._left = None
        return self

    def _find_lost_tail(self) -> None:
        """A head beyond the log means lines were lost: they are re-exported from
        history, and the line at the old head must hash to the old head."""
        head = read_head(self.run_dir)
        if head is None:
            return
        seq, digest = head
        if seq > self.last_seq:
            log.warning("%s: the head says %d events, the log has %d: re-exporting the rest",
                        self.run_dir, seq, self.last_seq)
            self.lost_head = (seq, digest)

    def _on_disk(self, name: str, data: bytes) -> bool:
        path = self.run_dir / name
        return path.is_file() and path.read_bytes() == data

    @property
    def snapshot_stale(self) -> bool:
        """``snapshot.json`` on disk is behind the committed head."""
        return self._on_disk_seq[SNAPSHOT_NAME] != self.last_seq

    @property
    def at_rest_stale(self) -> bool:
        """A file at rest (``snapshot.json``, ``head``, ``checkpoint`` once the lines
        may be signed) is behind the last line."""
        return self.snapshot_stale or self._on_disk_seq[HEAD_NAME] != self.last_seq or (
            self._signable and self.signer is not None and self._signed_seq != self.last_seq)

    @property
    def at_rest_due_in(self) -> float:
        """Seconds until ``snapshot_every_s`` passed since the files at rest were last
        written (0: it has)."""
        return max(0.0, self.snapshot_every_s - (time.monotonic() - self._snapshot_at))

    def write_at_rest(self) -> None:
        """Write the files at rest that lag the log now: ``snapshot.json``, then
        ``head``, then (lines checked against history, a signer given) ``checkpoint``,
        each atomically, each only when it changed (the follower calls it on idle and
        at a wait; a commit every ``snapshot_every_s``; close). Nothing while lines
        wait for their commit: the head never names a line that is not durable."""
        self._guard()
        if self._unsynced:
            return
        try:
            if self.snapshot_stale:
                self._put(SNAPSHOT_NAME, self.snapshot.to_bytes())
            if self._on_disk_seq[HEAD_NAME] != self.last_seq:
                self._put(HEAD_NAME, self._head_bytes())
            if self._signable and self.signer is not None \
                    and self._signed_seq != self.last_seq:
                checkpoint = self._checkpoint_bytes()
                # The first time: it may be on disk already (a finished log reopened).
                if checkpoint is not None and (self._signed_seq is not None or not
                                               self._on_disk(CHECKPOINT_NAME, checkpoint)):
                    atomic_write(self.run_dir / CHECKPOINT_NAME, checkpoint, sync_dir=False)
                self._signed_seq = self.last_seq
        except OSError as err:
            self._failed = err
            raise LogWriteError(f"{self.run_dir}: writing the head, snapshot or checkpoint "
                                f"failed: {err}") from err
        self._snapshot_at = time.monotonic()

    def _put(self, name: str, data: bytes) -> None:
        atomic_write(self.run_dir / name, data, sync_dir=False)  # see the docstring
        self._on_disk_seq[name] = self.last_seq

    def close(self) -> None:
        """Release the log; the files at rest are brought up to the last line first
        when every line is committed (a failed writer leaves them: they are rebuilt on
        open)."""
        if self._log_fd is not None and self._failed is None and not self._unsynced \
                and self.at_rest_stale:
            try:
                self.write_at_rest()
            except LogWriteError as err:
                log.warning("%s", err)
        if self._log_fd is not None and self._failed is None and not self._unsynced:
            with contextlib.suppress(OSError):
                st = os.fstat(self._log_fd)
                self._left = (st.st_ino, st.st_size, st.st_mtime_ns)
        for fd in (self._log_fd, self._lock_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._log_fd = self._lock_fd = None

    def __enter__(self) -> LogWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def finished(self) -> bool:
        """The log ends with RUN_COMPLETED or RUN_FAILED: nothing more will come."""
        return self.last_type in END_TYPES

    # -- writing ----------------------------------------------------------------------

    def chain(self) -> Chain:
        """A chain from line 1 in this log's format version (re-mapping starts there)."""
        return Chain(version=self.log_version)

    def _guard(self) -> None:
        if self._failed is not None:
            raise LogWriteError(f"{self.run_dir}: the writer stopped after a write error: "
                                f"{self._failed}")
        if self._log_fd is None:
            raise LogError(f"{self.run_dir}: the writer is not open")

    def append(self, event: LogEvent, artifact: Artifact | None = None,
               data: bytes | None = None, exact: bool = False) -> None:
        """Append ``event``'s line. ``data``: its bytes as :class:`Chain` made them
        (else encoded here); ``exact``: they read back as the very values (no float,
        no integer beyond 2^53 - 1, ASCII keys), so orjson reads them for the
        snapshot and the observers (else :func:`read_json`, numbers as doubles)."""
        self._guard()
        if self.last_seq == 0:  # an empty log takes the version of its first line
            self.log_version = event.log_version
        if event.log_version != self.log_version:
            raise LogError(f"{self.run_dir}: the log is in format v{self.log_version}; a "
                           f"v{event.log_version} line would make a mixed file (refused)")
        if event.seq != self.last_seq + 1 or event.prev_hash != self.last_hash:
            raise LogError(f"{self.run_dir}: event seq {event.seq} does not follow "
                           f"seq {self.last_seq}")
        if self.lost_head is not None and self.lost_head[0] == event.seq:
            if self.lost_head[1] != event.event_hash:
                raise LogCorruptError(f"{self.run_dir}: line {event.seq} re-exported from "
                                      "history does not hash to the head written before")
            self.lost_head = None
        if data is None:
            data = line_bytes(event)
        try:
            if artifact is not None:
                self._put_artifact(artifact)
            if os.write(self._log_fd, data) != len(data):  # type: ignore[arg-type]
                raise OSError(errno.EIO, "short write")
            self._unsynced = True
        except OSError as err:
            self._failed = err
            raise LogWriteError(f"{self.run_dir}: writing line {event.seq} failed: {err}"
                                ) from err
        parsed = orjson.loads(data) if exact else read_json(data)  # as replay reads it
        self.snapshot.apply(parsed)
        if self.observer is not None:
            self.observer.event(parsed, False)
        self.last_seq, self.last_hash, self.last_type = event.seq, event.event_hash, event.type
        self.last_line_hash = event.line_hash

    def write_artifact(self, artifact: Artifact) -> None:
        """Write an artifact file unless it is there with these bytes already."""
        self._guard()
        try:
            self._put_artifact(artifact)
        except OSError as err:
            self._failed = err
            raise LogWriteError(f"{self.run_dir}: writing {artifact.path} failed: {err}"
                                ) from err

    def _put_artifact(self, artifact: Artifact) -> None:
        """Write ``artifact`` unless its file holds these bytes already. Its path must
        stay in ``artifacts/`` once resolved (no ``..``, no symlink out): a path of
        plain names under ``artifacts/`` whose folders are all there as real folders
        (``lstat``: no symlink) and whose file is not a symlink resolves to itself, so
        it is written as the reference (:meth:`_put_artifact_resolved`) would write it
        without resolving every part of the path through pathlib again (a few ``lstat``
        instead); any other path takes the reference."""
        root = self._root
        if root is None:  # the run directory's real path, once (the writer holds its lock)
            root = self._root = self.run_dir.resolve()
        parts = artifact.path.split("/")
        if len(parts) < 2 or parts[0] != "artifacts" or not self._put_plain(
                f"{root}/", parts, artifact.content):
            self._put_artifact_resolved(root, artifact)

    @staticmethod
    def _put_plain(root: str, parts: list[str], content: bytes) -> bool:
        """The fast path of :meth:`_put_artifact`; False: not taken, nothing written."""
        path = root
        for i, part in enumerate(parts):
            if part in ("", ".", "..") or "\0" in part:
                return False
            path += part
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                if i < len(parts) - 1:  # a folder to make: the reference makes it
                    return False
                atomic_write(Path(path), content)
                return True
            if i < len(parts) - 1:
                if not S_ISDIR(mode):  # a symlink, or not a folder
                    return False
                path += "/"
            elif not S_ISREG(mode):
                return False
        with open(path, "rb") as f:
            if f.read() == content:
                return True
        atomic_write(Path(path), content)
        return True

    def _put_artifact_resolved(self, root: Path, artifact: Artifact) -> None:
        path = (root / artifact.path).resolve()
        if not path.is_relative_to(root / "artifacts"):
            raise LogError(f"artifact path {artifact.path!r} leaves the artifacts folder")
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True)
            for d in (path.parent.parent, root):  # make the new folders' entries durable
                fsync_dir(d)
        elif path.is_file() and path.read_bytes() == artifact.content:
            return
        atomic_write(path, artifact.content)

    def _head_bytes(self) -> bytes:
        head = {"last_hash": self.last_hash, "last_seq": self.last_seq}
        return (json.dumps(head, indent=2, sort_keys=True) + "\n").encode()

    def _checkpoint_bytes(self) -> bytes | None:
        if self.signer is None:
            return None
        return checkpoint_bytes(self.signer, self.run_dir.name, self.last_seq,
                                self.last_line_hash or self.last_hash)

    @property
    def checkpoint_due(self) -> bool:
        """A signer is given and ``checkpoint`` does not sign the head yet."""
        data = self._checkpoint_bytes()
        return data is not None and not self._on_disk(CHECKPOINT_NAME, data)

    def commit(self, sign: bool = True, snapshot: bool | None = None) -> None:
        """Make the new lines durable (one fsync) and tell the observer; then write
        the files at rest (:meth:`write_at_rest`) when ``snapshot`` (None: when they
        were last written ``snapshot_every_s`` ago). ``sign``: the caller checked the
        lines against history, so the files at rest may end with a signed
        ``checkpoint`` (opening does not)."""
        self._guard()
        if sign:
            self._signable = True
        if self._unsynced:
            try:
                files.fsync(self._log_fd)  # type: ignore[arg-type]
            except OSError as err:
                self._failed = err
                raise LogWriteError(f"{self.run_dir}: making the lines durable failed: {err}"
                                    ) from err
            self._unsynced = False
        if self.observer is not None:
            self.observer.commit()
        if snapshot is None:
            snapshot = time.monotonic() - self._snapshot_at >= self.snapshot_every_s
        if snapshot and self.at_rest_stale:
            self.write_at_rest()
