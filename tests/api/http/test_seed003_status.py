"""Seed 003's run-state spellings are accepted where a client passes a state in:
``GET /api/sessions?status=DONE`` lists hitlflow's ``succeeded`` sessions, and so on
(one table: ``workflows.statechart.SEED003_RUN_STATES``). No Temporal needed: the
list is served from the read model, here a fake that records the filter."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from api.http.deps import get_client
from api.http.errors import install as install_error_handlers
from api.http.routers.session_list import router
from workflows.statechart import SEED003_RUN_STATES, SessionStatus, status_from_client


class FakeStore:
    inline = True

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    def list_sessions(self, status, limit, page_token):
        self.asked.append(status)
        return [], None


def test_the_table_covers_every_seed_run_state():
    seed = ["CREATED", "CLONED_INPUTS", "INGESTED", "FACTS_READY", "PLAN_READY", "DRAFTING",
            "DRAFT_READY", "LINKING", "VALIDATING", "FIXING", "READY_FOR_PR", "PR_OPENED",
            "DONE", "FAILED", "CANCELLED"]
    assert list(SEED003_RUN_STATES) == seed
    assert status_from_client("DONE") == (SessionStatus.SUCCEEDED, True)
    assert status_from_client("CANCELLED") == (SessionStatus.CANCELED, True)
    assert status_from_client("cancelled") == (SessionStatus.CANCELED, True)
    assert status_from_client("waiting_user") == (SessionStatus.WAITING_USER, True)
    assert status_from_client("DRAFTING") == (None, True)
    with pytest.raises(ValueError, match="unknown status"):
        status_from_client("bogus")


@pytest.mark.parametrize("given,stored", [
    ("DONE", "succeeded"), ("CANCELLED", "canceled"), ("FAILED", "failed"),
    ("CREATED", "queued"), ("succeeded", "succeeded"), ("canceled", "canceled"),
    ("waiting_user", "waiting_user"), (None, None),
])
async def test_list_accepts_the_seeds_spelling(given, stored):
    app, store = FastAPI(), FakeStore()
    install_error_handlers(app)
    app.include_router(router)
    app.dependency_overrides[get_client] = lambda: None
    app.state.read_model = store
    params = {"status": given} if given else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as http:
        r = await http.get("/api/sessions", params=params)
        assert r.status_code == 200, r.text
        assert store.asked == [stored]
        # A seed state with no counterpart matches no session; a typo is refused.
        r = await http.get("/api/sessions", params={"status": "PR_OPENED"})
        assert r.status_code == 200 and r.json()["sessions"] == [] and store.asked == [stored]
        r = await http.get("/api/sessions", params={"status": "DONEE"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
