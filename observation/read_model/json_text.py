"""The read model's JSON columns, written fast and exactly as before.

Every JSON column (a contract's snapshot and transitions, a fact, a status change, the
session's pending request and status counts, a notice's body) is
:func:`workflows.canonical.canonical_json`'s text: sorted keys, no whitespace, raw
UTF-8. :func:`dumps` gives the same text, through ``orjson`` (C, several times faster)
where it provably writes the same characters, through ``canonical_json`` for the rest:

* ``orjson`` writes strings, integers, ``true``/``false``/``null``, lists and dicts with
  ``str`` keys (sorted by code point, as Python sorts them) exactly as the C ``json``
  encoder does with ``ensure_ascii=False`` (the same escapes, ``\\u00XX`` lowercase;
  tested over every code point in ``tests/observation/test_read_model_json.py``);
* it writes floats otherwise (``1e-05`` is ``0.00001``) and refuses what ``json``
  writes (lone surrogates, integers beyond 64 bits, non-``str`` keys): a value holding a
  float, a subclass of a builtin, a key that is not a ``str`` or anything else goes the
  exact way, and so does one ``orjson`` refuses.

:func:`dumps_typed` skips the walk for values that hold no float by their type (a
transition, a memory fact, the status counts); only their parts typed ``Any`` are
walked (a snapshot's ``result``, a status change's FCMP payloads).
"""

from __future__ import annotations

from typing import Any

import orjson

from workflows.canonical import canonical_json

_SORTED = orjson.OPT_SORT_KEYS


def plain(value: Any) -> bool:
    """Only ``str``, ``int``, ``bool``, ``None``, ``list``, ``tuple`` and ``dict`` with
    ``str`` keys (exact types, no subclasses): where ``orjson`` writes what ``json``
    writes (no float anywhere)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is dict:
        for k, v in value.items():
            if type(k) is not str:
                return False
            tv = type(v)
            if not (tv is str or tv is int or tv is bool or v is None or plain(v)):
                return False
        return True
    if t is list or t is tuple:
        for v in value:
            tv = type(v)
            if not (tv is str or tv is int or tv is bool or v is None or plain(v)):
                return False
        return True
    return False


def floatless(value: Any) -> bool:
    """:func:`plain`, False for a value nested too deep to walk (the exact path then
    says what it says of it)."""
    try:
        return plain(value)
    except RecursionError:
        return False


def dumps(value: Any) -> str:
    """``canonical_json(value)``, the same text, faster where that is provably so."""
    if floatless(value):
        try:
            return orjson.dumps(value, option=_SORTED).decode()
        except TypeError:  # JSONEncodeError: a lone surrogate, a huge integer, too deep
            pass
    return canonical_json(value)


def dumps_typed(value: Any) -> str:
    """:func:`dumps` of a value that holds no float by its type (a pydantic model's JSON
    dump whose fields are strings, integers, booleans, enums of strings and datetimes,
    a ``{str: int}``): not walked. What ``orjson`` refuses (a lone surrogate) goes the
    exact way."""
    try:
        return orjson.dumps(value, option=_SORTED).decode()
    except TypeError:
        return canonical_json(value)
