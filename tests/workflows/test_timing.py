"""A session's input may shorten its activities' heartbeat timeouts and retry
intervals (``Timing``: tests that lose a worker use it). Unset, every session
schedules exactly what it did before, and its input's JSON is what it was."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from pydantic import ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.mcp.tools import HEARTBEAT_EVERY_S, SDK_BEAT_AFTER_S
from workflows.activity_calls import (
    LIST_TOOLS_HEARTBEAT,
    LLM_HEARTBEAT,
    RETRY_FREELY,
    TOOL_HEARTBEAT,
    heartbeat,
    retry_freely,
)
from workflows.config import SessionConfig
from workflows.messages import SessionInput, Timing
from workflows.session_state import SessionState

CONFIG = SessionConfig.model_validate({"initial_message": "hi", "agent": {
    "llm": {"provider": "scripted", "responses": [{"text": "ok"}]}}})


def test_unset_every_activity_keeps_its_own_timeouts():
    for default in (TOOL_HEARTBEAT, LIST_TOOLS_HEARTBEAT, LLM_HEARTBEAT):
        assert heartbeat(default, None) == default
        assert heartbeat(default, Timing(retry_s=0.1)) == default
    assert retry_freely(None) is RETRY_FREELY
    assert retry_freely(Timing(heartbeat_s=10)) is RETRY_FREELY


def test_set_it_replaces_the_heartbeat_and_the_first_retry_interval_only():
    quick = Timing(heartbeat_s=12, retry_s=0.25)
    assert heartbeat(TOOL_HEARTBEAT, quick) == heartbeat(LLM_HEARTBEAT, quick) == \
        timedelta(seconds=12)
    policy = retry_freely(quick)
    assert policy.initial_interval == timedelta(seconds=0.25)
    assert (policy.maximum_interval, policy.maximum_attempts, policy.backoff_coefficient) \
        == (RETRY_FREELY.maximum_interval, RETRY_FREELY.maximum_attempts,
            RETRY_FREELY.backoff_coefficient)


def test_the_input_leaves_it_out_of_its_json_while_unset():
    plain = SessionInput(session_id="s-1", config=CONFIG)
    dumped = plain.model_dump(mode="json")
    assert "timing" not in dumped
    # What the data converter writes into history: the same keys as before Timing.
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([plain])
    assert "timing" not in json.loads(payload.data)
    assert set(json.loads(payload.data)) == {
        "session_id", "config", "state", "continue_as_new_after_events",
        "search_attributes", "behaviour"}
    quick = SessionInput(session_id="s-1", config=CONFIG, timing=Timing(heartbeat_s=10))
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([quick])
    assert json.loads(payload.data)["timing"] == {"heartbeat_s": 10, "retry_s": None}
    (back,) = pydantic_data_converter.payload_converter.from_payloads(
        [payload], [SessionInput])
    assert back == quick


def test_continue_as_new_carries_it():
    quick = SessionInput(session_id="s-1", config=CONFIG, timing=Timing(retry_s=0.1))
    state = SessionState(session_id="s-1", config=CONFIG)
    assert quick.carried(state).timing == Timing(retry_s=0.1)
    assert SessionInput(session_id="s-1", config=CONFIG).carried(state).timing is None


@pytest.mark.parametrize("bad", [
    {"heartbeat_s": 9.9},  # below the SDK heartbeat's start: calls would be cancelled
    {"heartbeat_s": 0},
    {"heartbeat_s": -1},
    {"heartbeat_s": 601},
    {"heartbeat_s": "soon"},
    {"retry_s": 0},
    {"retry_s": 61},
    {"retries": 3},  # unknown
])
def test_a_broken_timing_is_refused(bad):
    with pytest.raises(ValidationError):
        Timing.model_validate(bad)
    with pytest.raises(ValidationError):
        SessionInput.model_validate({"session_id": "s-1", "config": CONFIG.model_dump(),
                                     "timing": bad})


def test_the_shortest_heartbeat_timeout_outlasts_a_tool_calls_silent_start():
    """The worker times a heartbeat out locally on the SDK's heartbeats, which a tool
    call starts only SDK_BEAT_AFTER_S into an attempt (then every HEARTBEAT_EVERY_S):
    the smallest timeout allowed must leave room for the first of them."""
    shortest = Timing.model_fields["heartbeat_s"].metadata[0].ge
    assert shortest >= SDK_BEAT_AFTER_S + HEARTBEAT_EVERY_S
