"""Signed notes (C2SP ``signed-note``, Go's ``golang.org/x/mod/sumdb/note``) with
Ed25519 keys: what a checkpoint is (see ``checkpoint.py``). Pure: no I/O.

A signed note is a text ending in a newline, a blank line, and signature lines::

    — <key name> <base64(key id (4 bytes, big-endian) || Ed25519 signature (64 bytes))>

The signature covers the text's UTF-8 bytes up to and including its last newline
(not the blank line). ``key id = sha256(key name || 0x0A || 0x01 || public key)[:4]``.

Keys as text (the note package's encodings, so Go tools read them as they are):

* verifier (public) key: ``<name>+<key id, 8 hex>+<base64(0x01 || 32-byte public key)>``
* signer (private) key: ``PRIVATE+KEY+<name>+<key id, 8 hex>+<base64(0x01 || 32-byte seed)>``
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

ALG_ED25519 = b"\x01"
SIGNATURE_DASH = "\u2014 "  # em dash, space: how a signature line starts
PRIVATE_PREFIX = "PRIVATE+KEY+"
MAX_SIGNATURES = 100  # Go's note.Open limit; the spec requires at least 16
_KEY_ID = re.compile(r"[0-9a-f]{8}")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


class NoteKeyError(ValueError):
    """A key given as text (or in a file) that is not a valid Ed25519 note key."""


class NoteError(ValueError):
    """A note that is malformed, or not signed (validly) by the expected key."""


def valid_key_name(name: str) -> bool:
    """Non-empty, no (Unicode) whitespace, no ``+``."""
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ALG_ED25519 + public).digest()[:4]


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _key_parts(text: str, what: str, expected: str) -> tuple[str, bytes, bytes]:
    """``(name, key id, 32 key bytes)`` of ``<name>+<id>+<base64(0x01 || key)>``; the
    caller checks the id (it hashes the public key)."""
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise NoteKeyError(f"not a {what} (expected {expected})")
    name, hex_id, encoded = parts
    if not valid_key_name(name):
        raise NoteKeyError(f"{what}: {name!r} is not a key name (non-empty, no spaces, no +)")
    if not _KEY_ID.fullmatch(hex_id):
        raise NoteKeyError(f"{what}: {hex_id!r} is not a key id (8 lowercase hex digits)")
    try:
        raw = _b64decode(encoded)
    except (binascii.Error, UnicodeEncodeError):
        raise NoteKeyError(f"{what}: the key is not base64") from None
    if len(raw) != 33 or raw[:1] != ALG_ED25519:
        raise NoteKeyError(f"{what}: not an Ed25519 key (type byte 0x01 and 32 bytes)")
    return name, bytes.fromhex(hex_id), raw[1:]


@dataclass(frozen=True)
class Verifier:
    """A public key and its name: checks signatures."""

    name: str
    public: bytes  # 32 bytes, RFC 8032

    @cached_property  # computed once: the exporter signs a head at every wait
    def key_id(self) -> bytes:
        return key_id(self.name, self.public)

    def text(self) -> str:
        encoded = base64.b64encode(ALG_ED25519 + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        text = text.strip()
        if text.startswith(PRIVATE_PREFIX):
            raise NoteKeyError("this is a signer (private) key; give its verifier key "
                               "(`hitlflow log key` prints it)")
        name, given, public = _key_parts(text, "verifier key", "NAME+KEYID+BASE64, as "
                                         "`hitlflow log key` prints it")
        if key_id(name, public) != given:
            raise NoteKeyError(f"verifier key: key id {given.hex()} is not the hash of the "
                               "name and key (a damaged or edited key)")
        return cls(name, public)

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True, repr=False)
class Signer:
    """A private key (its 32-byte seed) and its name: signs notes."""

    name: str
    seed: bytes

    def __repr__(self) -> str:  # never print the secret
        return f"Signer({self.name!r}, key id {self.key_id.hex()})"

    @classmethod
    def generate(cls, name: str) -> Signer:
        if not valid_key_name(name):
            raise NoteKeyError(f"{name!r} is not a key name (non-empty, no spaces, no +)")
        return cls(name, Ed25519PrivateKey.generate().private_bytes_raw())

    # The key object, its verifier and key id are made once (cached_property writes
    # the instance's __dict__, which a frozen dataclass allows): loading the key and
    # hashing its id cost more than the signature the exporter makes at every wait.
    @cached_property
    def _private(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @cached_property
    def _verifier(self) -> Verifier:
        return Verifier(self.name, self._private.public_key().public_bytes_raw())

    def verifier(self) -> Verifier:
        return self._verifier

    @property
    def key_id(self) -> bytes:
        return self._verifier.key_id

    def text(self) -> str:
        encoded = base64.b64encode(ALG_ED25519 + self.seed).decode()
        return f"{PRIVATE_PREFIX}{self.name}+{self.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> Signer:
        text = text.strip()
        if not text.startswith(PRIVATE_PREFIX):
            raise NoteKeyError("not a signer key (expected PRIVATE+KEY+NAME+KEYID+BASE64, "
                               "as `hitlflow log keygen` writes)")
        name, given, seed = _key_parts(text[len(PRIVATE_PREFIX):], "signer key",
                                       "PRIVATE+KEY+NAME+KEYID+BASE64")
        signer = cls(name, seed)
        if signer.key_id != given:
            raise NoteKeyError(f"signer key: key id {given.hex()} is not the hash of the "
                               "name and key (a damaged or edited key)")
        return signer

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)


def sign_note(text: str, signer: Signer) -> bytes:
    """The signed note: ``text`` (ending in a newline), a blank line, one signature."""
    if not text.endswith("\n") or _CONTROL.search(text):
        raise NoteError("a note's text ends in a newline and has no control characters")
    data = text.encode()
    sig = base64.b64encode(signer.key_id + signer.sign(data)).decode()
    return data + f"\n{SIGNATURE_DASH}{signer.name} {sig}\n".encode()


def open_note(data: bytes, verifier: Verifier) -> str:
    """The text of a signed note whose signature by ``verifier``'s key verifies.

    Signatures of other keys are ignored (C2SP); one of this key that fails, a
    malformed note, or none of this key raise :class:`NoteError`."""
    try:
        note = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("not UTF-8 text") from None
    if _CONTROL.search(note):
        raise NoteError("has control characters (a signed note has none but newlines)")
    if not note.endswith("\n"):
        raise NoteError("does not end with a newline (cut short?)")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("has no blank line between the text and the signatures")
    text, lines = note[:split + 1], note[split + 2:].splitlines()
    if not lines:
        raise NoteError("has no signature lines")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"has more than {MAX_SIGNATURES} signatures")
    found, names = False, []
    for n, line in enumerate(lines, 1):
        name, _, sig = line.removeprefix(SIGNATURE_DASH).partition(" ")
        try:
            raw = _b64decode(sig) if line.startswith(SIGNATURE_DASH) else b""
        except (binascii.Error, UnicodeEncodeError):
            raw = b""
        if not valid_key_name(name) or len(raw) < 5:
            raise NoteError(f"signature line {n} is malformed (expected '\u2014 NAME "
                            "BASE64')")
        names.append(f"{name} ({raw[:4].hex()})")
        if name == verifier.name and raw[:4] == verifier.key_id:
            if not verifier.verify(text.encode(), raw[4:]):
                raise NoteError(f"the signature of {name} does not verify: the text or the "
                                "signature was changed")
            found = True
    if not found:
        raise NoteError(f"is not signed by the key {verifier.name} "
                        f"({verifier.key_id.hex()}); signed by: {', '.join(names)}")
    return text
