"""Signed checkpoints: ``runs/<session_id>/checkpoint``, a C2SP ``tlog-checkpoint``
(a signed note, ``note.py``) over the log's head, so that a rewrite of the whole
directory (lines, head and snapshot recomputed) no longer verifies::

    <key name>/<session_id>
    <size: the number of lines>
    <base64 of the 32-byte root: the last line's line_hash (v2), event_hash (v1)>

    — <key name> <base64(key id || Ed25519 signature of the three lines above)>

The root of an empty log is ``GENESIS`` (32 zero bytes). In v2 ``line_hash``
covers every byte of its line but itself and the ``line_hash`` of the line before,
so the root fixes every byte of lines 1..size (v1's ``event_hash`` does the same for
its lines). Unlike RFC 6962 the root is the head of a hash chain, not a Merkle
tree: consistency is checked by reading the log, not with a proof.

:func:`checkpoint_bytes` is pure; :func:`verify_checkpoint` only reads files.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from pathlib import Path

from observation.exporter.chain import GENESIS
from observation.exporter.note import NoteError, Signer, Verifier, open_note, sign_note
from observation.exporter.verify import LOG_NAME, ChainBrokenError, Verified, read_lines

CHECKPOINT_NAME = "checkpoint"
_SIZE = re.compile(r"0|[1-9][0-9]*")
MAX_CHECKPOINT_BYTES = 64 * 1024


def origin_of(key_name: str, session_id: str) -> str:
    """The log's identity in its checkpoints: one log per session, under the key's
    name."""
    return f"{key_name}/{session_id}"


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: str  # 64 hex

    def text(self) -> str:
        root = base64.b64encode(bytes.fromhex(self.root)).decode()
        return f"{self.origin}\n{self.size}\n{root}\n"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """The checkpoint in a note's text (extension lines are allowed and ignored)."""
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or not all(lines[:-1]):
            raise ValueError("its text is not three or more non-empty lines")
        origin, size, root = lines[:3]
        if not _SIZE.fullmatch(size):
            raise ValueError(f"line 2 ({size[:40]!r}) is not a tree size")
        try:
            raw = base64.b64decode(root.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raw = b""
        if len(raw) != 32:
            raise ValueError("line 3 is not the base64 of a 32-byte hash")
        return cls(origin, int(size), raw.hex())


def root_of(line: dict) -> str:
    """The hash a checkpoint signs for a log ending at ``line`` (a parsed line)."""
    return line.get("line_hash") or line["event_hash"]


def checkpoint_bytes(signer: Signer, session_id: str, size: int, root: str) -> bytes:
    return sign_note(Checkpoint(origin_of(signer.name, session_id), size, root).text(), signer)


def read_checkpoint(data: bytes, verifier: Verifier, origin: str, what: str) -> Checkpoint:
    """A checkpoint signed by ``verifier``'s key for ``origin``, else
    :class:`ChainBrokenError` (``CHECKPOINT_INVALID``)."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise ChainBrokenError(None, f"{what} is not a checkpoint (over "
                               f"{MAX_CHECKPOINT_BYTES} bytes)", "CHECKPOINT_INVALID")
    try:
        cp = Checkpoint.parse(open_note(data, verifier))
    except (NoteError, ValueError) as err:
        raise ChainBrokenError(None, f"{what} {err}", "CHECKPOINT_INVALID") from None
    if cp.origin != origin:
        raise ChainBrokenError(None, f"{what} is for the log {cp.origin!r}, not {origin!r} "
                               "(a checkpoint of another session)", "CHECKPOINT_INVALID")
    return cp


def root_at(log: Path, size: int) -> str | None:
    """The root of the first ``size`` lines of a verified log (None: it is shorter)."""
    if size == 0:
        return GENESIS
    for n, line in enumerate(read_lines(log), 1):
        if n == size:
            return root_of(json.loads(line))
    return None


def verify_checkpoint(run_dir: Path, verified: Verified, verifier: Verifier,
                      since: bytes | None = None) -> Checkpoint:
    """Check ``run_dir/checkpoint`` against a log ``verify_dir`` has just verified:
    signed by ``verifier``'s key, for this session, of exactly the log's lines and
    root. With ``since`` (an older checkpoint, as bytes), also that the log only grew
    from it: its root is the log's at its size."""
    path, log = run_dir / CHECKPOINT_NAME, run_dir / LOG_NAME
    origin = origin_of(verifier.name, run_dir.name)
    if not path.is_file():
        raise ChainBrokenError(None, f"{path} is missing: nothing outside the directory "
                               "vouches for this log", "CHECKPOINT_MISSING")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ChainBrokenError(None, f"{path} cannot be read: {err.strerror or err}",
                               "CHECKPOINT_INVALID") from None
    cp = read_checkpoint(data, verifier, origin, "the checkpoint")
    n = verified.events
    if cp.size != n:
        raise ChainBrokenError(min(cp.size, n) + 1, f"the checkpoint signs {cp.size} lines, "
                               f"the log has {n}" + (": lines after the signed ones were "
                               "added (if an exporter is writing this log, verify again)"
                               if cp.size < n else ": signed lines were removed"),
                               "CHECKPOINT_MISMATCH")
    if root_at(log, n) != cp.root:
        raise ChainBrokenError(n or None, "the signed root is not the log's hash at line "
                               f"{n}: the log was rewritten", "CHECKPOINT_MISMATCH")
    if since is not None:
        old = read_checkpoint(since, verifier, origin, "the --since checkpoint")
        if old.size > n:
            raise ChainBrokenError(n + 1, f"the log has {n} lines, fewer than the {old.size} "
                                   "of the older checkpoint: signed lines were removed",
                                   "CHECKPOINT_MISMATCH")
        if root_at(log, old.size) != old.root:
            raise ChainBrokenError(old.size or None, f"line {old.size} is not what the older "
                                   "checkpoint signed: the log was rewritten, it did not "
                                   "only grow", "CHECKPOINT_MISMATCH")
    return cp
