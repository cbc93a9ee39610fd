"""Canonical JSON: the one place that turns a value into the bytes that are hashed.

Two forms, each defined once:

- :func:`canonical_json`: sorted keys, no whitespace. What digests and idempotency keys
  hash (tool arguments, model answers, read-model columns).
- :func:`jcs`: RFC 8785 (JCS), the audit log's form (``docs/audit-log.md``). For values
  with no floats, only ASCII keys and safe integers (:func:`plain`) it is exactly
  :func:`canonical_json`; ``rfc8785`` writes the rest and refuses what JCS cannot.

Pure and deterministic: the workflow uses it too (``workflows/contract.py``).
"""

from __future__ import annotations

import json
from typing import Any

#: The largest integer a double holds exactly (RFC 8785 reads numbers as doubles).
MAX_SAFE_INT = 2**53 - 1

#: ``json.dumps`` sorted, compact, raw UTF-8: compiled once (the verifier's fast path).
canonical_text = json.JSONEncoder(ensure_ascii=False, sort_keys=True,
                                  separators=(",", ":")).encode


def canonical_json(value: Any, *, ascii_only: bool = False,
                   default: Any = None) -> str:
    """Sorted keys, no whitespace: the same value always gives the same text.
    ``ascii_only`` escapes non-ASCII (the form idempotency keys were first hashed in);
    ``default`` stringifies what JSON cannot carry instead of raising."""
    if not ascii_only and default is None:
        return canonical_text(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=ascii_only, default=default)


def plain(value: Any) -> bool:
    """No floats, ASCII keys, safe integers: where JCS is :func:`canonical_json`."""
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return -MAX_SAFE_INT <= value <= MAX_SAFE_INT
    if t is dict:
        return all(type(k) is str and k.isascii() and plain(v) for k, v in value.items())
    if t is list or t is tuple:
        return all(plain(v) for v in value)
    return False


def jcs(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``.

    Most events hold no floats and only ASCII keys; for those, JCS is exactly the C
    ``json.dumps`` with sorted keys, no spaces and raw UTF-8 (same escapes; code point
    order is UTF-16 order for ASCII), several times faster than ``rfc8785``, which
    does the rest (floats, non-ASCII keys) and raises on what JCS cannot encode."""
    if plain(value):
        try:
            return canonical_text(value).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 raises its own error for it
    import rfc8785  # only off the fast path; never in a workflow

    return rfc8785.dumps(value)
