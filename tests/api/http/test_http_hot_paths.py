"""What the request path keeps between requests (issue 28): a fork's lineage once its
log's first line is durable, and the Content-Type decisions of the JSON limits."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.datastructures import Headers

from api.http.app import create_app
from api.http.limits import parsed_as_json
from api.http.routers.sessions import LINEAGES_KEPT, _lineage
from api.settings import HitlflowSettings
from observation import event_types as ev
from observation.exporter.verify import LOG_NAME


def write_log(data: Path, session_id: str, first: dict | None) -> None:
    run = data / "runs" / session_id
    run.mkdir(parents=True, exist_ok=True)
    (run / LOG_NAME).write_text("" if first is None else json.dumps(first) + "\n")


def fork_line(parent: str) -> dict:
    return {"seq": 1, "type": ev.SESSION_FORKED, "payload": {
        "parent_session_id": parent, "parent_seq": 7, "parent_line_hash": "ab" * 32}}


def test_a_lineage_is_kept_once_line_1_is_durable_and_read_until_then(tmp_path: Path) -> None:
    state = create_app(HitlflowSettings(data_dir=tmp_path, api_token="t" * 40)).state
    # No log yet, and the read model has no line of it: nothing is kept.
    assert _lineage(state, "s-new", 0) is None
    write_log(tmp_path, "s-new", fork_line("s-parent"))
    assert _lineage(state, "s-new", 0) == {"session_id": "s-parent", "seq": 7,
                                           "line_hash": "ab" * 32}
    # Durable (seq >= 1): kept; the file is not read again.
    assert _lineage(state, "s-new", 3)["session_id"] == "s-parent"
    write_log(tmp_path, "s-new", fork_line("s-other"))
    assert _lineage(state, "s-new", 0)["session_id"] == "s-parent"
    # A session that is no fork is kept as such once durable.
    write_log(tmp_path, "s-plain", {"seq": 1, "type": "session.started", "payload": {}})
    assert _lineage(state, "s-plain", 1) is None
    write_log(tmp_path, "s-plain", fork_line("s-parent"))
    assert _lineage(state, "s-plain", 1) is None


def test_the_lineages_kept_are_bounded(tmp_path: Path) -> None:
    state = create_app(HitlflowSettings(data_dir=tmp_path, api_token="t" * 40)).state
    for i in range(LINEAGES_KEPT + 10):
        _lineage(state, f"s-{i}", 1)
    assert len(state.lineages) == LINEAGES_KEPT
    assert "s-0" not in state.lineages and f"s-{LINEAGES_KEPT + 9}" in state.lineages


def test_content_types_are_decided_as_fastapi_does_cached_or_not() -> None:
    cases = {None: True, "": True, "application/json": True,
             "application/json; charset=utf-8": True, "Application/JSON": True,
             "application/merge-patch+json": True, "application/jsonx": False,
             "text/plain": False, "text/json": False, "application/x-www-form-urlencoded":
             False, "multipart/form-data; boundary=x": False, "garbage": False}
    for _ in range(2):  # the second time from the cache
        for value, expected in cases.items():
            headers = Headers(raw=[] if value is None else [(b"content-type", value.encode())])
            assert parsed_as_json(headers) is expected, value
