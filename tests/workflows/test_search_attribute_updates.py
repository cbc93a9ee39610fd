"""The session's search attribute updates, built once (``workflows.search_attributes``):
the same updates ``value_set``/``value_unset`` build, so the commands are unchanged."""

from __future__ import annotations

from workflows.search_attributes import (
    SESSION_STATUS,
    WAITING_SINCE,
    WAITING_SINCE_UNSET,
    status_update,
)
from workflows.statechart import SessionStatus


def test_status_updates_are_the_sdks_and_built_once():
    for status in SessionStatus:
        update = status_update(status.value)
        assert update == SESSION_STATUS.value_set(status.value)
        assert update.key == SESSION_STATUS and update.value == status.value
        assert status_update(status.value) is update


def test_waiting_since_unset_is_the_sdks():
    assert WAITING_SINCE.value_unset() == WAITING_SINCE_UNSET
    assert WAITING_SINCE_UNSET.key == WAITING_SINCE and WAITING_SINCE_UNSET.value is None
