"""The one reader of files only their owner may read (people.json, the link key, the
CLI's credentials): each refusal names what is wrong and how to fix it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from api.identity.private_file import PrivateFileError, read_private


def private(tmp_path: Path, data: bytes = b"secret") -> Path:
    path = tmp_path / "f"
    path.write_bytes(data)
    os.chmod(path, 0o600)
    return path


def test_a_private_file_is_read_and_a_missing_one_is_none(tmp_path: Path):
    assert read_private(private(tmp_path), what="the file", limit=100) == b"secret"
    assert read_private(tmp_path / "missing", what="the file", limit=100) is None


@pytest.mark.parametrize("how,said", [
    ("a symlink", "is a symbolic link: the test file must be a file of its own"),
    ("a directory", "is not a regular file"),
    ("group-readable", "may be read or written by others (mode 640): chmod 600"),
    ("too large", "is larger than 5 bytes: not the test file"),
])
def test_a_file_that_cannot_be_trusted_is_refused(tmp_path: Path, how: str, said: str):
    path = private(tmp_path)
    if how == "a symlink":
        target = tmp_path / "target"
        path.rename(target)
        path.symlink_to(target)
    elif how == "a directory":
        path.unlink()
        path.mkdir()
    elif how == "group-readable":
        os.chmod(path, 0o640)
    with pytest.raises(PrivateFileError, match=re.escape(said)):
        read_private(path, what="the test file", limit=5 if how == "too large" else 100)
