"""The chain makes each v2 line once (issue 28): the bytes it leaves for the writer are
``JCS(line) + "\\n"`` exactly, its hashes are the reference formulas' (``seed_hash``,
``line_hash``), and a line it calls exact reads back with orjson as ``read_json``
reads it, over generated payloads."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observation.exporter import Chain, MappedEvent, line_hash, seed_hash
from observation.exporter.chain import jsonable, read_json
from workflows.canonical import jcs

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
value = st.recursive(
    st.none() | st.booleans() | st.integers() | text
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e16, 1e21, 1e-7, -0.0, 1.0, 2.0**53, 2**64]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        text | st.sampled_from(["\ue000", "\U0001f600", "é"]), inner, max_size=3),
    max_leaves=15)


def mapped(payload: object, n: int, ids: str) -> MappedEvent:
    return MappedEvent(event_id=f"r{ids}:{n + 1}:0", run_id="s-x", ts="2026-11-26T10:00:00"
                       ".000000Z", type="T" + ids, payload={"v": jsonable(payload)},
                       trace_id="t" * 32, span_id="a" * 16,
                       parent_span_id=None if n % 2 else "b" * 16)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(payloads=st.lists(value, min_size=1, max_size=5), ids=text)
def test_the_line_made_once_is_the_reference_line(payloads, ids):
    chain, prev, prev_line = Chain(), "0" * 64, "0" * 64
    for n, payload in enumerate(payloads):
        e = chain.link(mapped(payload, n, ids))
        line = e.line()
        assert chain.line == jcs(line) + b"\n"
        body = {k: v for k, v in line.items() if k != "line_hash"}
        assert e.prev_hash == prev and e.event_hash == seed_hash(body)
        assert e.line_hash == line_hash(body, prev_line)
        if chain.exact:
            assert orjson.loads(chain.line) == read_json(chain.line)
        prev, prev_line = e.event_hash, e.line_hash
