"""The binding payloads' parts computed here (seed 003): LLM_CALL_STARTED, the
hashes and the cost of LLM_CALL_FINISHED. Pure and free of openai and jsonschema:
the exporter recomputes a call's LLM_CALL_STARTED from its input with this module."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import orjson

from activities.llm.wire import ToolNames, openai_tools
from workflows.canonical import canonical_json
from workflows.io import LLMCallInput, LLMCallStarted, TokenUsage, ToolSpec

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


def tool_schema_hash(tools: list[ToolSpec]) -> str | None:
    """LLM_CALL_STARTED's ``tool_schema_hash``: of the ``tools`` payload sent (None: none)."""
    payload = openai_tools(tools, ToolNames.build(tools))
    return sha256_json(payload) if payload else None


def llm_call_started(input: LLMCallInput, prompt_json: bytes | None = None,
                     schema_hash: Callable[[list[ToolSpec]], str | None] = tool_schema_hash,
                     ) -> LLMCallStarted:
    """LLM_CALL_STARTED for a call input: pure, so an exporter can recompute it.
    ``prompt_json``: ``canonical_bytes`` of the messages as dumped (``prompt_hash``
    hashes it), when the caller has it already; ``schema_hash``: the tools' hash
    (:func:`tool_schema_hash`, or the exporter's, which keeps the last one)."""
    llm = input.llm
    if prompt_json is None:
        prompt_json = messages_json([canonical_bytes(m.model_dump(mode="json"))
                                     for m in input.messages])
    return LLMCallStarted(
        call_id=input.call_id,
        model=llm.model,
        provider_base_url=SCRIPTED_BASE_URL if llm.provider == "scripted" else str(llm.base_url),
        prompt_hash=hashlib.sha256(prompt_json).hexdigest(),
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        tool_schema_hash=schema_hash(input.tools),
        response_format="text",
    )


def messages_json(each: list[bytes]) -> bytes:
    """``canonical_bytes`` of a list, from its items' (``[``, the items, ``,``-joined,
    ``]``: the text ``canonical_json`` writes for a list)."""
    return b"[" + b",".join(each) + b"]"
