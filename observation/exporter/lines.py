"""What a log line is, with no dependency beyond the standard library: the hash
prefixes, the genesis hash, the format versions, how a line is read (every number
as a double), and the few event type names the verifier checks.

``hitlflow log verify`` needs only this, ``verify.py`` and ``fields.py`` (and
``workflows/canonical.py``), so it starts without the server side (no Temporal,
no pydantic). ``chain.py`` and ``model.py`` re-export these names;
``tests/observation/test_verify_fast.py`` checks the event type names are
``observation/event_types.py``'s.
"""

from __future__ import annotations

import json
from typing import Any

from workflows.canonical import MAX_SAFE_INT

HASH_PREFIX = b"hitlflow-log-v1\n"  # v1's event_hash
LINE_PREFIX = b"hitlflow-log-v2\n"  # v2's line_hash
GENESIS = "0" * 64
#: The format new logs are written in; a log already on disk is continued in its own.
LOG_VERSION = 2
LOG_VERSIONS = (1, 2)
#: The schema of an LLM answer's artifact (``ARTIFACT_WRITTEN.schema_id``).
LLM_OUTPUT_SCHEMA = "hitlflow/llm_output/v1"
#: The event types whose lines the verifier checks beyond the envelope (the names
#: of ``observation/event_types.py``).
RUN_CREATED = "RUN_CREATED"
SESSION_FORKED = "SESSION_FORKED"
RUN_CONTINUED_AS_NEW = "RUN_CONTINUED_AS_NEW"
LLM_CALL_FINISHED = "LLM_CALL_FINISHED"
ARTIFACT_WRITTEN = "ARTIFACT_WRITTEN"


def number(text: str) -> int | float:
    """A JSON integer token as the double it denotes (an ``int`` while that is exact)."""
    if len(text) < 16:  # at most 15 digits: below 2**53
        return int(text)
    value = float(text)
    return int(text) if abs(value) <= MAX_SAFE_INT else value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_json(data: bytes | str) -> Any:
    """A line (or any JSON text of the log) with every number read as a double, as
    RFC 8785 reads it: an integer token beyond +-(2**53 - 1) is a ``float``
    (``10000000000000000`` is the double 1e16 that JCS wrote), one within stays an
    ``int`` (the same number). ``NaN``/``Infinity`` are refused (``ValueError``)."""
    return json.loads(data, parse_int=number, parse_constant=_no_constant)
