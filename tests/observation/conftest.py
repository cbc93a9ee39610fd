"""Fixtures the observation tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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
