"""Durable file operations: fsync, atomic replace, cutting a torn last line."""

from __future__ import annotations

import json
import os
from pathlib import Path


def fsync(fd: int) -> None:
    """``os.fsync``; the tests replace it to simulate a failing disk."""
    os.fsync(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Write-temp, fsync, rename, fsync the directory (``sync_dir``; without it a crash
    may leave the previous file whole: for what is rebuilt from the log on open)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def cut_torn_tail(path: Path) -> int:
    """Cut a last line without a newline, or one that is not JSON; return bytes cut."""
    with path.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        pos, start = size, 0
        while pos > 0:
            pos = max(0, pos - 65536)
            f.seek(pos)
            i = f.read(size - pos).rfind(b"\n", 0, size - pos - 1)
            if i >= 0:
                start = pos + i + 1
                break
        f.seek(start)
        last = f.read()
        if not last or (last.endswith(b"\n") and _is_json(last)):
            return 0
        f.truncate(start)
        f.flush()
        fsync(f.fileno())
        return size - start
