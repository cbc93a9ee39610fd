"""Files only their owner may read (people.json, the link key, the CLI's credentials):
read once, through one set of checks, each refusal saying what is wrong and how to
fix it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class PrivateFileError(Exception):
    """The file cannot be trusted or read; the message says why and what to do."""


def read_private(path: Path, *, what: str, limit: int) -> bytes | None:
    """The bytes of ``path`` (``what`` names it in messages), or None when it does not
    exist. Refused: a symbolic link, not a regular file, another user's, readable or
    writable by others, unreadable, or larger than ``limit`` bytes. The checks are made
    on the open file (``fstat``), so the file read is the file checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise PrivateFileError(f"{path} is a symbolic link: {what} must be a file of "
                                   "its own (remove the link)") from None
        raise PrivateFileError(f"{path} cannot be read: {err.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # (a directory cannot even be wrapped in a file)
        os.close(fd)
        raise PrivateFileError(f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if info.st_uid != os.getuid():
            raise PrivateFileError(f"{path} belongs to another user (uid {info.st_uid}): "
                                   "only the user who runs hitlflow may own it")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise PrivateFileError(f"{path} may be read or written by others (mode "
                                   f"{mode:o}): chmod 600 {path}")
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise PrivateFileError(f"{path} is larger than {limit} bytes: not {what}")
    return raw
