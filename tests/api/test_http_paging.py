"""Paging input over real HTTP: a page token or cursor the API never gave out is a
400 at once, on every paged endpoint and both list paths (read model, `stuck=`
through Temporal visibility); the ones it gave out page on."""

from __future__ import annotations

from api.http.paging import encode_cursor
from api.http.routers.sessions import _visibility_token
from observation.read_model.store import encode_page_token
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
    assert token is not None
    r = await http.get("/api/sessions", params={"limit": 1, "page_token": token})
    assert r.status_code == 200 and r.json()["sessions"] != first["sessions"], r.text
    # An empty token is none: the first page.
    r = await http.get("/api/sessions", params={"limit": 1, "page_token": ""})
    assert r.status_code == 200 and r.json()["sessions"] == first["sessions"]

    stuck_page = (await http.get("/api/sessions", params={"limit": 1, "stuck": "false"})).json()
    stuck_token = stuck_page["next_page_token"]
    assert stuck_token is not None
    r = await http.get("/api/sessions", params={"limit": 1, "stuck": "false",
                                                "page_token": stuck_token})
    assert r.status_code == 200 and r.json()["sessions"] != stuck_page["sessions"], r.text

    forged = [
        encode_token(b'["x","y"]'),                                   # not a time, nor an id
        encode_page_token("2026-01-01T00:00:00+00:00", "../etc"),      # not a session id
        encode_token(b'["2026-01-01T00:00:00+00:00", "s-1"]'),         # not its spelling
        encode_token(b'{"CloseTime":"x"}'),                            # Temporal's kind
    ]
    # Temporal's own kind of token, with the API's digest in front (as the API would
    # wrap it): Temporal refuses it, and that is the answer at once, not retried.
    wrapped = _visibility_token(b'{"CloseTime":"x"}')
    raw = decode_token(wrapped)
    for params, bad in [
        *[({}, t) for t in GARBAGE + spellings(token) + forged + [stuck_token]],
        *[({"stuck": "false"}, t) for t in GARBAGE + spellings(stuck_token) + [token]],
        ({"stuck": "true"}, "abc"),
        ({"stuck": "false"}, wrapped),
        ({"stuck": "false"}, encode_token(raw[:2] + bytes(8) + raw[10:])),  # wrong digest
    ]:
        r = await http.get("/api/sessions", params={**params, "limit": 1, "page_token": bad})
        assert r.status_code == 400, (params, bad, r.status_code, r.text)
        err = error_of(r)
        assert err["code"] == "invalid_page_token" and "page_token" in err["message"], err


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
