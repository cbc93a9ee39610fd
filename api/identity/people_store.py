"""The people of ``local`` mode and their keys: ``<data_dir>/people.json``.

A person has a name (their subject), a role, groups, an e-mail address maybe, and
keys. A key is ``hfk_<key_id>_<secret>`` (``secrets.token_urlsafe(32)``: 256 random
bits); it is shown once, when it is made, and kept only as the sha256 of its secret
(enough for a random secret of that size: nothing to slow down a guess of it), found
by its ``key_id`` and compared in constant time.

The file is written atomically (a new file renamed over the old one) with mode 0600,
under a lock so two ``hitlflow people`` commands do not lose each other's change. It is
refused, with the fix in the message, when it is a symbolic link, not a regular file of
this user, readable by others, not JSON or not the shape below; a refused file is never
written over. The API reads it again whenever it changes (its inode, size or time), so
a person added while it runs may sign in, and a person removed (or a key rotated) is
refused at their next request.

Shape::

    {"version": 1, "people": [{"name": "ada", "role": "approver", "groups": ["staff"],
      "email": "ada@example.com", "keys": [{"key_id": "...", "sha256": "...",
      "created_at": "..."}]}]}
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from api.identity.private_file import PrivateFileError, read_private
from workflows.people import Principal, Role

PEOPLE_FILE = "people.json"
MAX_PEOPLE_FILE_BYTES = 16 * 1024 * 1024
#: What a person's name may be: it is their subject, in logs and session configs.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
KEY_PREFIX = "hfk_"
#: The issuer of local people's principals.
LOCAL_ISSUER = "local"
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Group = Annotated[str, StringConstraints(pattern=r"^[^,\s](?:[^,]{0,198}[^,\s])?$")]
#: A character of an e-mail address's two sides: no "@", no whitespace, no control
#: character. Spelled out, so that the pattern means the same to JSON Schema's regex
#: (ECMA-262, what the API's schema promises) as to pydantic's: their ``\s`` differ
#: at U+0085 and U+FEFF.
EMAIL_CHAR = r"[^@\s\u0000-\u001f\u007f-\u009f\ufeff]"
Email = Annotated[str, StringConstraints(
    pattern=rf"^{EMAIL_CHAR}{{1,200}}@{EMAIL_CHAR}{{1,119}}$")]


class PeopleFileError(Exception):
    """The people file cannot be used (read or written); the message says how to fix it."""


class PersonError(Exception):
    """A change that cannot be made (no such person, one of that name already, ...)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoredKey(_Strict):
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: datetime


class Person(_Strict):
    name: Name
    role: Role
    groups: list[Group] = Field(default_factory=list, max_length=200)
    email: Email | None = None
    keys: list[StoredKey] = Field(default_factory=list, max_length=100)

    def principal(self) -> Principal:
        return Principal(issuer=LOCAL_ISSUER, subject=self.name, name=self.name,
                         groups=list(self.groups), role=self.role, kind="person",
                         email=self.email)


class PeopleDoc(_Strict):
    version: Literal[1] = 1
    people: list[Person] = Field(default_factory=list, max_length=10_000)

    @model_validator(mode="after")
    def _unique(self) -> PeopleDoc:
        names = [p.name for p in self.people]
        if len(set(names)) != len(names):
            raise ValueError("two people have the same name")
        ids = [k.key_id for p in self.people for k in p.keys]
        if len(set(ids)) != len(ids):
            raise ValueError("two keys have the same key_id")
        return self

    def find(self, name: str) -> Person | None:
        return next((p for p in self.people if p.name == name), None)


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key() -> tuple[str, StoredKey]:
    """A new key (shown once) and what is kept of it."""
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    return (f"{KEY_PREFIX}{key_id}_{secret}",
            StoredKey(key_id=key_id, sha256=_sha256(secret), created_at=datetime.now(UTC)))


def parse_key(key: str) -> tuple[str, str] | None:
    """``(key_id, secret)`` of a well-formed key, else None."""
    if not key.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = key[len(KEY_PREFIX):].partition("_")
    if not sep or not _KEY_ID.match(key_id) or not 20 <= len(secret) <= 200:
        return None
    return key_id, secret


def is_key(value: str) -> bool:
    return value.startswith(KEY_PREFIX)


@dataclass(frozen=True)
class _Index:
    """A read of the file: key_id -> (sha256 of the secret, the person's principal)."""

    signature: tuple[int, ...] | None
    keys: dict[str, tuple[bytes, Principal]]
    doc: PeopleDoc


def _signature(path: Path) -> tuple[int, ...] | None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
            info.st_mode, info.st_uid)


def _read_checked(path: Path) -> PeopleDoc:
    """The file's people, after the checks of the module's docstring; none when it does
    not exist."""
    try:
        raw = read_private(path, what="the people file", limit=MAX_PEOPLE_FILE_BYTES)
    except PrivateFileError as err:
        raise PeopleFileError(str(err)) from None
    if raw is None:
        return PeopleDoc()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise PeopleFileError(f"{path} is not valid JSON ({err}): fix it, or move it away "
                              "and add the people again") from None
    try:
        return PeopleDoc.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top level"
        raise PeopleFileError(f"{path} is not a people file: at {where}: {first['msg']} "
                              f"({err.error_count()} problem(s))") from None


class PeopleStore:
    """``<data_dir>/people.json``: read (cached until the file changes), and changed."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / PEOPLE_FILE
        self._index: _Index | None = None

    # -- reading ------------------------------------------------------------------------

    def read(self) -> PeopleDoc:
        """The people as the file says now (raises :class:`PeopleFileError`)."""
        return self._current().doc

    def _current(self) -> _Index:
        signature = _signature(self.path)
        index = self._index
        if index is not None and index.signature == signature:
            return index
        doc = _read_checked(self.path)
        keys: dict[str, tuple[bytes, Principal]] = {}
        for person in doc.people:
            principal = person.principal()
            for key in person.keys:
                keys[key.key_id] = (key.sha256.encode(), principal)
        self._index = _Index(signature, keys, doc)
        return self._index

    def principal_of(self, key: str) -> Principal | None:
        """The principal a key signs in, or None for a key that is malformed, unknown,
        revoked or wrong (the same answer for each: a caller learns nothing of which).
        Raises :class:`PeopleFileError` when the file cannot be used."""
        parsed = parse_key(key)
        if parsed is None:
            return None
        key_id, secret = parsed
        found = self._current().keys.get(key_id)
        digest = _sha256(secret).encode()
        if found is None:
            hmac.compare_digest(digest, digest)  # the same work either way
            return None
        return found[1] if hmac.compare_digest(digest, found[0]) else None

    def anyone_can_sign_in(self) -> bool:
        return any(p.keys for p in self.read().people)

    # -- changing -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[PeopleDoc]:
        """The people under the file's lock; the doc, changed in the block, is written
        when the block ends without an error."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock_path = self.data_dir / (PEOPLE_FILE + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as err:
            raise PeopleFileError(f"{lock_path} cannot be opened: {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._index = None
            doc = _read_checked(self.path).model_copy(deep=True)
            yield doc
            self._write(PeopleDoc.model_validate(doc.model_dump()))
        finally:
            os.close(fd)

    def _write(self, doc: PeopleDoc) -> None:
        text = json.dumps(doc.model_dump(mode="json"), indent=2) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.data_dir, prefix=".people.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:  # mkstemp: mode 0600
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._index = None

    @staticmethod
    def _person(doc: PeopleDoc, name: str) -> Person:
        person = doc.find(name)
        if person is None:
            known = ", ".join(p.name for p in doc.people) or "nobody yet"
            raise PersonError(f"no person named {name!r} (known: {known})")
        return person

    def add(self, name: str, role: Role, groups: list[str] | None = None,
            email: str | None = None) -> str:
        """Add a person with a new key; returns the key (its only showing)."""
        key, stored = new_key()
        try:
            person = Person(name=name, role=role, groups=groups or [], email=email,
                            keys=[stored])
        except ValidationError as err:
            raise PersonError(_first_problem(err)) from None
        with self._locked() as doc:
            if doc.find(name) is not None:
                raise PersonError(f"there is a person named {name!r} already (`people "
                                  "rotate` gives them a new key)")
            doc.people.append(person)
        return key

    def remove(self, name: str) -> Person:
        with self._locked() as doc:
            person = self._person(doc, name)
            doc.people.remove(person)
        return person

    def rotate(self, name: str, keep_old: bool = False) -> str:
        """A new key for ``name``; their other keys stop working unless ``keep_old``."""
        key, stored = new_key()
        with self._locked() as doc:
            person = self._person(doc, name)
            person.keys = [*(person.keys if keep_old else []), stored]
        return key

    def set_role(self, name: str, role: Role) -> Person:
        with self._locked() as doc:
            person = self._person(doc, name)
            try:
                person.role = Person.model_validate({**person.model_dump(), "role": role}).role
            except ValidationError as err:
                raise PersonError(_first_problem(err)) from None
        return person


def _first_problem(err: ValidationError) -> str:
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    if field == "name":
        return (f"invalid name {first.get('input')!r}: letters, digits and _ . @ -, "
                "starting with a letter or digit, at most 64")
    return f"invalid {field}: {first['msg']} (got {first.get('input')!r})"
