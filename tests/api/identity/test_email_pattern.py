"""An e-mail address's pattern means the same to the API's schema (JSON Schema's regex
is ECMA-262's) as to pydantic, which checks it: a value the schema admits is not
refused (schemathesis found U+0085 admitted by the schema and refused by pydantic,
whose ``\\s`` holds it; ECMA's ``\\s`` holds U+FEFF instead)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from pydantic import TypeAdapter, ValidationError

from api.http.routers.notifications import ChannelTest
from api.identity.people_store import Email

#: ECMA-262's WhiteSpace and LineTerminator: what ``\s`` is in the schema's regex.
ECMA_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
#: Every character an engine could read differently: controls, spaces, a few letters.
TRICKY = [chr(c) for c in [*range(0x00, 0xa1), 0x1680, *range(0x2000, 0x2030),
                           0x205f, 0x3000, 0xfeff, 0xe9, 0x4e2d]]


def as_ecma(pattern: str) -> re.Pattern[str]:
    """``pattern`` as an ECMA-262 engine reads it (its ``\\s``), in Python's ``re``."""
    return re.compile(pattern.replace(r"\s", ECMA_SPACE))


def schema_pattern() -> str:
    return ChannelTest.model_json_schema()["properties"]["to"]["anyOf"][0]["pattern"]


def valid(check: Callable[[str], object], value: str) -> bool:
    try:
        check(value)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("char", TRICKY, ids=lambda c: f"U+{ord(c):04X}")
def test_the_schema_and_pydantic_agree_on_each_character(char: str) -> None:
    value = f"a{char}b@example.com"
    admitted = as_ecma(schema_pattern()).search(value) is not None
    accepted = valid(lambda v: ChannelTest(channel="ops", to=v), value)
    assert admitted == accepted
    # the people file's addresses follow the same rule
    assert valid(TypeAdapter(Email).validate_python, value) == accepted


def test_addresses_with_spaces_or_control_characters_are_refused() -> None:
    for good in ("a@b", "jane.doe+hitl@example.com", "é@ü.example"):
        assert ChannelTest(channel="ops", to=good).to == good
    for bad in ("a b@c", "a@b c", "a\u0085b@c", "a\ufeff@c", "a\x00@b", "a@@b", "@b", "a@",
                "a\u2028b@c"):
        with pytest.raises(ValidationError):
            ChannelTest(channel="ops", to=bad)
