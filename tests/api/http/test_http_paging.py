"""Paging input over real HTTP: a cursor the API never gave out is a 400 at once, on
every paged endpoint and both list paths (read model, `stuck=` through Temporal
visibility); the ones it gave out page on. Every paged answer says `next_cursor`; the
session list says `next_page_token` too and takes `page_token` (deprecated, until the
next release), and the tokens of the release before still page."""

from __future__ import annotations

import hashlib

from api.http.paging import encode_cursor
from api.http.routers.session_list import visibility_cursor
from observation.read_model.list_token import session_list_token
from observation.tokens import decode_token, encode_token
from tests.api.http_support import HttpStack, confirm_body, error_of, listed, session_until, waiting

GARBAGE = ["abc", "00", "AAAA", "null", "!!", "%", "a=", "====", "x" * 4096]


def spellings(token: str) -> list[str]:
    """Other spellings of a token the API gave out: a lenient base64 decoder reads
    them as the same token (padding, characters outside the alphabet)."""
    return [token + "=", token + "==", token + "!", "!!" + token, token[:2] + "." + token[2:],
            token + "\n"]


async def _two_sessions(http_stack: HttpStack) -> list[str]:
    http = http_stack.http
    sids = [(await http.post("/api/sessions", json=confirm_body())).json()["session_id"]
            for _ in range(2)]
    for sid in sids:
        await session_until(http, sid, waiting("confirm"))  # in the read model, a contract
        await listed(http, sid, "waiting_user")
    return sids


async def test_page_tokens_the_api_never_gave_out_are_400(http_stack: HttpStack):
    http = http_stack.http
    await _two_sessions(http_stack)
    first = (await http.get("/api/sessions", params={"limit": 1})).json()
    token = first["next_page_token"]
    assert token is not None and token == first["next_cursor"]
    r = await http.get("/api/sessions", params={"limit": 1, "page_token": token})
    assert r.status_code == 200 and r.json()["sessions"] != first["sessions"], r.text
    # An empty token is none: the first page.
    r = await http.get("/api/sessions", params={"limit": 1, "page_token": ""})
    assert r.status_code == 200 and r.json()["sessions"] == first["sessions"]

    stuck_page = (await http.get("/api/sessions", params={"limit": 1, "stuck": "false"})).json()
    stuck_token = stuck_page["next_page_token"]
    assert stuck_token is not None and stuck_token == stuck_page["next_cursor"]
    r = await http.get("/api/sessions", params={"limit": 1, "stuck": "false",
                                                "page_token": stuck_token})
    assert r.status_code == 200 and r.json()["sessions"] != stuck_page["sessions"], r.text

    forged = [
        encode_token(b'["x","y"]'),                                   # not a time, nor an id
        session_list_token("2026-01-01T00:00:00+00:00", "../etc"),     # not a session id
        encode_token(b'["2026-01-01T00:00:00+00:00", "s-1"]'),         # not its spelling
        encode_token(b'{"CloseTime":"x"}'),                            # Temporal's kind
    ]
    # Temporal's own kind of token, with the API's digest in front (as the API would
    # wrap it): Temporal refuses it, and that is the answer at once, not retried.
    wrapped = visibility_cursor(b'{"CloseTime":"x"}')
    position = decode_token(wrapped).decode().split(":", 2)[2]
    wrong_digest = encode_token(f"visibility:{'0' * 12}:{position}".encode())
    for params, bad in [
        *[({}, t) for t in GARBAGE + spellings(token) + forged + [stuck_token]],
        *[({"stuck": "false"}, t) for t in GARBAGE + spellings(stuck_token) + [token]],
        ({"stuck": "true"}, "abc"),
        ({"stuck": "false"}, wrapped),
        ({"stuck": "false"}, wrong_digest),
    ]:
        r = await http.get("/api/sessions", params={**params, "limit": 1, "page_token": bad})
        assert r.status_code == 400, (params, bad, r.status_code, r.text)
        err = error_of(r)
        assert err["code"] == "invalid_page_token" and "page_token" in err["message"], err
        if bad not in spellings(token) + spellings(stuck_token):  # the same under `cursor`
            r = await http.get("/api/sessions", params={**params, "limit": 1, "cursor": bad})
            assert r.status_code == 400 and error_of(r)["code"] == "invalid_cursor", r.text


async def test_the_session_list_pages_by_cursor_and_by_the_old_names_and_tokens(
        http_stack: HttpStack):
    http = http_stack.http
    await _two_sessions(http_stack)
    for params in [{}, {"stuck": "false"}]:
        first = (await http.get("/api/sessions", params={**params, "limit": 1})).json()
        cursor = first["next_cursor"]
        assert cursor and first["next_page_token"] == cursor  # the old name, same token
        second = await http.get("/api/sessions", params={**params, "limit": 1,
                                                         "cursor": cursor})
        assert second.status_code == 200, second.text
        assert second.json()["sessions"] and second.json()["sessions"] != first["sessions"]
        old_name = await http.get("/api/sessions", params={**params, "limit": 1,
                                                           "page_token": cursor})
        assert old_name.json()["sessions"] == second.json()["sessions"]
        # The token the release before gave out for the same place.
        position = decode_token(cursor).decode().split(":", 2)[2]
        if params:  # Temporal's token behind a tag and a digest
            temporal = decode_token(position)
            old = encode_token(b"v1" + hashlib.sha256(b"v1" + temporal).digest()[:8] + temporal)
        else:  # the bare position
            old = encode_token(position.encode())
        legacy = await http.get("/api/sessions", params={**params, "limit": 1,
                                                         "page_token": old})
        assert legacy.status_code == 200, (params, legacy.text)
        assert legacy.json()["sessions"] == second.json()["sessions"]


async def test_the_schema_marks_the_old_paging_names_deprecated(http_stack: HttpStack):
    schema = (await http_stack.http.get("/openapi.json")).json()
    listing = schema["paths"]["/api/sessions"]["get"]
    params = {p["name"]: p for p in listing["parameters"]}
    assert params["page_token"].get("deprecated") is True
    assert not params["cursor"].get("deprecated")
    fields = schema["components"]["schemas"]["SessionList"]["properties"]
    assert fields["next_page_token"].get("deprecated") is True
    assert "deprecated" not in fields["next_cursor"]
    paged = [name for name, model in schema["components"]["schemas"].items()
             if "next_cursor" in model.get("properties", {})]
    assert sorted(paged) == ["HistoryPage", "MemoryPage", "SessionList", "SessionView",
                             "TimelinePage"]


def test_a_session_s_cursors_keep_their_spelling_from_before():
    """The cursors of a session's lists were ``<list>:<digest of the session>:<offset>``
    already: one given out before this release still pages."""
    before = encode_token(
        f"contracts:{hashlib.sha256(b's-1').hexdigest()[:12]}:7".encode())
    assert encode_cursor("contracts", "s-1", 7) == before


async def test_cursors_the_api_never_gave_out_are_400_on_every_paged_endpoint(
        http_stack: HttpStack):
    http = http_stack.http
    sid = (await _two_sessions(http_stack))[0]
    for path, listing in [(f"/api/sessions/{sid}", "contracts"),
                          (f"/api/sessions/{sid}/memory", "memory"),
                          (f"/api/sessions/{sid}/history", "history"),
                          (f"/api/execution/{sid}/timeline", "timeline")]:
        cursor = encode_cursor(listing, sid, 0)
        tag = decode_token(cursor).decode().rpartition(":")[0]
        for consistency in ["read_model", "live"]:
            ok = await http.get(path, params={"cursor": cursor, "consistency": consistency})
            assert ok.status_code == 200, (path, ok.text)
            empty = await http.get(path, params={"cursor": "", "consistency": consistency})
            assert empty.status_code == 200, (path, empty.text)  # none: the first page
        wrong = [encode_token(f"{tag}:{n}".encode()) for n in ["00", "+0", " 0", "\u0660", "-0"]]
        for bad in GARBAGE[:-1] + spellings(cursor) + wrong:
            for consistency in ["read_model", "live"]:
                r = await http.get(path, params={"cursor": bad, "consistency": consistency})
                assert r.status_code == 400, (path, bad, consistency, r.status_code, r.text)
                assert error_of(r)["code"] == "invalid_cursor"
        for limit in ["0", "-1", "501", "x", "1.5", ""]:
            r = await http.get(path, params={"limit": limit})
            assert r.status_code == 422, (path, limit, r.text)
            error_of(r)
