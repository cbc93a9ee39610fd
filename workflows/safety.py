"""Tool safety classes, derived from MCP annotations with the spec's defaults.

MCP spec defaults: ``readOnlyHint`` absent means false; ``destructiveHint``
absent on a tool that is not read-only means **true**; ``idempotentHint``
absent means false. A per-tool override in the session config wins.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class SafetyClass(StrEnum):
    READ_ONLY = "read_only"  # runs freely, retried freely
    IRREVERSIBLE = "irreversible"  # asks the person first, runs at most once
    AT_MOST_ONCE = "at_most_once"  # runs without asking, never twice (a commit)
    REVERSIBLE = "reversible"  # not read-only, not destructive, idempotent: retried freely


class ToolAnnotations(BaseModel):
    model_config = ConfigDict(frozen=True)
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None


def classify(annotations: ToolAnnotations | None, override: str | None = None) -> SafetyClass:
    if override is not None:
        return SafetyClass(override)
    a = annotations or ToolAnnotations()
    if a.read_only_hint is True:
        return SafetyClass.READ_ONLY
    if a.destructive_hint is not False:
        return SafetyClass.IRREVERSIBLE
    if a.idempotent_hint is True:
        return SafetyClass.REVERSIBLE
    return SafetyClass.AT_MOST_ONCE


def needs_approval(safety: SafetyClass) -> bool:
    return safety is SafetyClass.IRREVERSIBLE


def at_most_once(safety: SafetyClass) -> bool:
    """No automatic retry, one run per idempotency key."""
    return safety in (SafetyClass.IRREVERSIBLE, SafetyClass.AT_MOST_ONCE)
