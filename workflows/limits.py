"""Limits on the JSON that reaches a session's history (docs/security.md, "Limits").

A worker decodes what history holds with pydantic-core, which refuses JSON nested
deeper than 200 levels: a session whose config, reply or model answer went deeper
could not be read back by its worker, and stuck. So JSON is held to ``max_depth``
levels of arrays and objects (``DEFAULT_MAX_DEPTH``; a setting may raise it up to
``MAX_DEPTH_CEILING``, which leaves room for the levels history wraps it in), and a
number JSON cannot carry (``1e400``, ``NaN``, ``Infinity``, an integer of more digits
than Python reads) is refused where it would otherwise become ``null`` or ``0``.

Pure, deterministic and iterative (no recursion, whatever the depth): the API's raw
body guard, the LLM activity and the workflow's own validators use it.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal

#: Levels of arrays and objects a JSON body (or a model's tool-call arguments) may have.
DEFAULT_MAX_DEPTH = 64
#: The most any setting may allow: with the levels history adds around a value, still
#: well under the 200 that a worker can decode.
MAX_DEPTH_CEILING = 128

# A JSON string, one structural character, or a bare word (a number, a literal, or
# something that is not JSON, which the parser will name). Colons carry nothing here.
# A string that never closes runs to the end of the text, so no match starts inside it
# again (else each escaped quote restarts a scan to the end: quadratic, seconds at 32 KB).
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)'
_TOKENS = re.compile(_STRING + r'|[\[\]{},]|[^\s\[\]{},:"]+', re.DOTALL)
_STRINGS = re.compile(_STRING, re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_SQUARE = str.maketrans("{}", "[]")
# Every number a parser might not read as written (an exponent of three digits or
# more, a mantissa of hundreds), and the words Python reads as numbers (JSON has none).
_SUSPECT_NUMBERS = re.compile(
    r"-?[0-9][0-9.]*[eE][+-]?[0-9]{3,}|[0-9.]{200,}(?:[eE][+-]?[0-9]+)?|NaN|Infinity")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_PATH_CHARS = 240


@dataclass(frozen=True)
class JsonProblem:
    """What exceeds a limit, and where (a JSONPath such as ``$.values.a[3]``)."""

    kind: Literal["depth", "number"]
    path: str
    message: str


def depth_message(max_depth: int, path: str) -> str:
    return f"nesting deeper than {max_depth} levels at {path}"


def number_message(path: str, why: str) -> str:
    return (f"a number JSON cannot carry at {path}: {why}; send it as a string if it is "
            "meant")


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _part(part: str | int) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if _NAME.fullmatch(part) else f"[{json.dumps(_clip(part))}]"


def _join(parts: list[str | int]) -> str:
    text = "$"
    for part in parts:
        text += _part(part)
        if len(text) > _PATH_CHARS:
            return text[:_PATH_CHARS] + "…"
    return text


def _key(token: str) -> str:
    try:
        key = json.loads(token)
    except ValueError:
        return token
    return key if isinstance(key, str) else token


def _number_problem(word: str) -> str | None:
    """Why a bare word that is a number cannot be carried as it was written, or None
    (for numbers that can, literals, and words that are not JSON at all)."""
    if word in ("NaN", "Infinity", "-Infinity"):
        return f"{word} is not a JSON number"
    match = _NUMBER.fullmatch(word)
    if match is None:
        return None
    if match.group(1) is None and match.group(2) is None:  # an integer
        digits, most = len(word.lstrip("-")), sys.get_int_max_str_digits()
        if most and digits > most:
            return f"an integer of {digits} digits (at most {most} are read)"
        return None
    value = float(word)
    if math.isinf(value):
        return (f"{_clip(word)} is beyond the range of a double (it would be read as "
                f"{'-' if value < 0 else ''}infinity)")
    mantissa = re.split("[eE]", word)[0]
    if value == 0.0 and any(c in "123456789" for c in mantissa):
        return f"{_clip(word)} is too small for a double (it would be read as 0)"
    return None


def _plainly_within(text: str, max_depth: int) -> bool:
    """A quick look, at the speed of ``re`` and ``str``: True when ``text`` is surely
    within the limits (no container past ``max_depth``, no number to look at)."""
    bare = _STRINGS.sub("", text)
    if any(_number_problem(m.group()) for m in _SUSPECT_NUMBERS.finditer(bare)):
        return False
    brackets = _NOT_BRACKETS.sub("", bare).translate(_SQUARE)
    for _ in range(max_depth):  # each pass takes away the innermost level
        if not brackets:
            return True
        brackets = brackets.replace("[]", "")
    return not brackets


def scan_json_text(text: str, max_depth: int = DEFAULT_MAX_DEPTH) -> JsonProblem | None:
    """The first limit JSON ``text`` exceeds, or None. Text that is not JSON passes as
    far as it goes (the parser refuses it after): this only looks for what a parser
    would accept and history could not hold."""
    if _plainly_within(text, max_depth):
        return None
    # One frame per open container: [is an object, its current key or index, a key is next]
    stack: list[list[Any]] = []
    for match in _TOKENS.finditer(text):
        token = match.group()
        first = token[0]
        if first in "[{":
            if len(stack) >= max_depth:
                path = _join([frame[1] for frame in stack if frame[1] is not None])
                return JsonProblem("depth", path, depth_message(max_depth, path))
            stack.append([True, None, True] if first == "{" else [False, 0, False])
        elif first in "]}":
            if not stack:
                return None
            stack.pop()
        elif first == ",":
            if stack:
                if stack[-1][0]:
                    stack[-1][2] = True
                else:
                    stack[-1][1] += 1
        elif first == '"':
            if stack and stack[-1][2]:
                stack[-1][1], stack[-1][2] = _key(token), False
        else:
            why = _number_problem(token)
            if why is not None:
                path = _join([frame[1] for frame in stack if frame[1] is not None])
                return JsonProblem("number", path, number_message(path, why))
    return None


def value_problem(value: Any, max_depth: int = DEFAULT_MAX_DEPTH,
                  root: list[str | int] | None = None) -> JsonProblem | None:
    """The same limits for a value already decoded (dicts, lists, floats): the first
    container past ``max_depth`` levels, or a float that is NaN or infinite. ``root``:
    where ``value`` sits in the document, its levels counted (``["values"]``: the
    value of a body's ``values``, two levels deep if it is an object)."""
    root = root or []
    # (value, its depth, its path as a linked list: (parent, part))
    todo: list[tuple[Any, int, tuple[Any, str | int] | None]] = [(value, len(root) + 1, None)]
    while todo:
        item, depth, link = todo.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                path = _join([*root, *_unlink(link)])
                return JsonProblem("depth", path, depth_message(max_depth, path))
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            todo.extend((v, depth + 1, (link, k)) for k, v in reversed(list(pairs)))
        elif isinstance(item, float) and not math.isfinite(item):
            path = _join([*root, *_unlink(link)])
            return JsonProblem("number", path, number_message(path, f"{item} is not a "
                                                                    "JSON number"))
    return None


def _unlink(link: tuple[Any, str | int] | None) -> list[str | int]:
    parts: list[str | int] = []
    while link is not None:
        link, part = link
        parts.append(part)
    return parts[::-1]
