"""Fixtures the observation tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from observation.exporter import export_history
from observation.exporter.decode import load_history
from observation.read_model import open_store
from observation.read_model.store import ReadStore
from tests.support.postgres import postgres_url


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path
               ) -> Iterator[Callable[[], ReadStore]]:
    """Makes read stores, each test on SQLite and on PostgreSQL (a new database each);
    closed at the end."""
    stores: list[ReadStore] = []

    def make() -> ReadStore:
        if request.param == "sqlite":
            store = open_store(tmp_path / f"db{len(stores)}")
        else:
            store = open_store(tmp_path, postgres_url())
        stores.append(store)
        return store

    yield make
    for s in stores:
        s.close()


@pytest.fixture(scope="module")
def demo_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """The lines of the saved demo session's log, exported afresh (each with its
    newline)."""
    histories = Path(__file__).resolve().parents[1] / "workflows" / "histories"
    sid, events = load_history((histories / "demo.json").read_text())
    runs = tmp_path_factory.mktemp("runs")
    export_history(sid, events, runs)
    return (runs / sid / "events.ndjson").read_bytes().splitlines(keepends=True)
