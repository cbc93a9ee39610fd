"""The binding payloads' parts computed here (seed 003): LLM_CALL_STARTED, the
hashes and the cost of LLM_CALL_FINISHED. Pure and free of openai and jsonschema:
the exporter recomputes a call's LLM_CALL_STARTED from its input with this module."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from activities.llm.wire import ToolNames, openai_tools
from workflows.canonical import canonical_json
from workflows.io import LLMCallInput, LLMCallStarted, TokenUsage

SCRIPTED_BASE_URL = "scripted://"

# List prices in USD per million tokens: (input, output). A model not listed here
# (after stripping a date suffix such as ``-2024-08-06``) gets ``api_cost_usd=None``.
PRICES_USD_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4-turbo": (10.00, 30.00),
    "gpt-3.5-turbo": (0.50, 1.50),
}
_DATE_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def api_cost_usd(model: str, usage: TokenUsage) -> float | None:
    price = PRICES_USD_PER_MTOK.get(model) or PRICES_USD_PER_MTOK.get(_DATE_SUFFIX.sub("", model))
    if price is None:
        return None
    cost = (usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000
    return round(cost, 8)


# -- hashing --------------------------------------------------------------------------


def canonical_bytes(value: Any) -> bytes:
    """``canonical_json(value).encode("utf-8")``: by orjson (sorted keys) where it
    writes that very text, a value of exactly str, int, bool, None, list and dicts
    with str keys, no float (orjson writes a double's digits in another form), an
    integer beyond 64 bits or a lone surrogate refused by orjson and left to the
    reference, which writes the one and raises on the other, as before
    (``tests/observation/test_hotpath.py``)."""
    if _orjson_exact(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass
    return canonical_json(value).encode("utf-8")


def _orjson_exact(value: Any) -> bool:
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is dict:
        for k, v in value.items():  # noqa: SIM110 (a loop: faster than all())
            if type(k) is not str or not _orjson_exact(v):
                return False
        return True
    if t is list:
        for v in value:  # noqa: SIM110
            if not _orjson_exact(v):
                return False
        return True
    return False


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def llm_call_started(input: LLMCallInput) -> LLMCallStarted:
    """LLM_CALL_STARTED for a call input: pure, so an exporter can recompute it."""
    llm = input.llm
    tools_payload = openai_tools(input.tools, ToolNames.build(input.tools))
    return LLMCallStarted(
        call_id=input.call_id,
        model=llm.model,
        provider_base_url=SCRIPTED_BASE_URL if llm.provider == "scripted" else str(llm.base_url),
        prompt_hash=sha256_json([m.model_dump(mode="json") for m in input.messages]),
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        tool_schema_hash=sha256_json(tools_payload) if tools_payload else None,
        response_format="text",
    )
