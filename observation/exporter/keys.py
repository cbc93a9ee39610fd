"""The exporter's checkpoint key on disk.

``<data_dir>/checkpoint.key``: the signer key (``note.py``'s ``PRIVATE+KEY+...``
text and a newline), mode 0600, created by the exporter's first start when the
operator gave none; ``<data_dir>/checkpoint.pub``: its verifier key, written at
every start, which the API serves (``GET /api/checkpoint-key``).
"""

from __future__ import annotations

import logging
import os
import stat
import uuid
from pathlib import Path

from observation.exporter.files import atomic_write, fsync, fsync_dir
from observation.exporter.note import NoteKeyError, Signer, Verifier

log = logging.getLogger("hitlflow.exporter")
KEY_NAME, VERIFIER_NAME = "checkpoint.key", "checkpoint.pub"
#: The name of a key the exporter creates itself (``hitlflow log keygen NAME`` for another).
DEFAULT_KEY_NAME = "hitlflow.local"


def read_signer(path: Path) -> Signer:
    """The signer key in ``path``; :class:`NoteKeyError` names the file on any fault."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise NoteKeyError(f"checkpoint key {path}: {err.strerror or err}") from None
    try:
        signer = Signer.parse(data.decode("utf-8"))
    except (UnicodeDecodeError, NoteKeyError) as err:
        raise NoteKeyError(f"checkpoint key {path}: {err}") from None
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("checkpoint key %s is readable by others (mode %o): chmod 600 it",
                    path, mode)
    return signer


def write_signer(path: Path, signer: Signer) -> bool:
    """Write ``signer`` to ``path`` (mode 0600) unless a file is there; True if written.
    Written whole or not at all: a temporary file linked into place."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, (signer.text() + "\n").encode())
        fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    fsync_dir(path.parent)
    return True


def load_or_create_signer(data_dir: Path, name: str = DEFAULT_KEY_NAME) -> Signer:
    """``<data_dir>/checkpoint.key``, created (a new Ed25519 key named ``name``) if
    there is none."""
    path = data_dir / KEY_NAME
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        if write_signer(path, Signer.generate(name)):
            log.info("created the checkpoint key %s (mode 0600)", path)
    return read_signer(path)


def publish_verifier(data_dir: Path, verifier: Verifier) -> None:
    """``<data_dir>/checkpoint.pub``: the verifier key and a newline."""
    data = (verifier.text() + "\n").encode()
    path = data_dir / VERIFIER_NAME
    if not (path.is_file() and path.read_bytes() == data):
        atomic_write(path, data)


def read_verifier(text_or_path: str) -> Verifier:
    """A verifier key given as its text or as a file holding it."""
    path = Path(text_or_path)
    text = text_or_path
    try:
        is_file = path.is_file()
    except (OSError, ValueError):  # cannot name a file (too long, a NUL): the key's text
        is_file = False
    if is_file:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise NoteKeyError(f"{path}: not a readable key file ({err})") from None
    try:
        return Verifier.parse(text)
    except NoteKeyError as err:
        where = f"{path}: " if text is not text_or_path else ""
        raise NoteKeyError(f"{where}{err}") from None
