"""Action links (``api.notify.links``): the key file's rules, tokens that verify only as
signed and only until they expire, and which messages carry approve/reject links."""

from __future__ import annotations

import base64
import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from api.notify.links import (
    KEY_BYTES,
    LINK_KEY_NAME,
    LinkError,
    LinkKeyError,
    action_token,
    link_secret,
    links_for,
    verify,
)
from api.notify.model import Notice
from api.notify.settings import NotifyConfig
from workflows.people import Principal, PrincipalRef

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
KEY = b"k" * 32
ANN = Principal(issuer="local", subject="ann", name="Ann", groups=["staff"],
                role="approver", email="ann@example.com")
DIGEST = "sha256:" + "ab" * 32


def notice(**changes: object) -> Notice:
    base = {"notice_id": "s-1:7", "kind": "opened", "session_id": "s-1", "seq": 7,
            "at": NOW.isoformat(), "request_id": "req-1", "request_kind": "approval",
            "prompt": "Approve delete_note?", "digest": DIGEST,
            "asked": {"tool": "delete_note", "arguments": {"name": "old"}}}
    return Notice.model_validate({**base, **changes})


def token(decision: str = "approve", ttl_s: float = 3600, key: bytes = KEY) -> str:
    return action_token(notice(), ANN, decision, secret=key, now=NOW,  # type: ignore[arg-type]
                        ttl_s=ttl_s)


def parts(t: str) -> tuple[str, dict, str]:
    prefix, body, mac = t.split(".")
    return prefix, json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))), mac


def reencoded(claims: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()


# -- tokens -----------------------------------------------------------------------------


def test_a_token_round_trips_with_everything_it_is_bound_to():
    claims = verify(KEY, token("reject"), NOW + timedelta(seconds=10))
    assert (claims.session_id, claims.request_id, claims.digest, claims.decision) == (
        "s-1", "req-1", DIGEST, "reject")
    r = claims.recipient
    assert (r.issuer, r.subject, r.name, r.email, r.groups, r.role) == (
        "local", "ann", "Ann", "ann@example.com", ["staff"], "approver")
    assert r.principal().kind == "person" and r.principal().subject == "ann"
    assert claims.exp - claims.iat == 3600
    # Each token has its own id: two links for the same thing are two tokens.
    assert verify(KEY, token(), NOW).jti != verify(KEY, token(), NOW).jti


@pytest.mark.parametrize("change", [
    {"decision": "approve"}, {"request_id": "req-2"}, {"digest": "sha256:" + "00" * 32},
    {"session_id": "s-2"}, {"exp": 4_000_000_000},
    {"recipient": {"issuer": "local", "subject": "mallory", "name": "", "email": None,
                   "groups": [], "role": "admin"}},
])
def test_a_changed_claim_breaks_the_signature(change: dict):
    prefix, claims, mac = parts(token("reject"))
    forged = f"{prefix}.{reencoded({**claims, **change})}.{mac}"
    with pytest.raises(LinkError) as err:
        verify(KEY, forged, NOW)
    assert err.value.reason == "bad_signature"


def test_another_key_does_not_verify():
    with pytest.raises(LinkError) as err:
        verify(b"x" * 32, token(), NOW)
    assert err.value.reason == "bad_signature"


def test_an_expired_token_is_refused_at_its_expiry():
    t = token(ttl_s=60)
    assert verify(KEY, t, NOW + timedelta(seconds=59)).decision == "approve"
    for later in (60, 3600):
        with pytest.raises(LinkError) as err:
            verify(KEY, t, NOW + timedelta(seconds=later))
        assert err.value.reason == "expired" and "expired at" in err.value.message


@pytest.mark.parametrize("broken", [
    "", "hfl1", "hfl1..", "hfl1.a.b.c", "hfl2.eyJ9.AAAA", "hfl1.e*J9.AAAA", "hfl1.eyJ9.AA=A",
    "x" * 9000, "hfl1.." + "A" * 43, "\u00e9.\u00e9.\u00e9",
])
def test_a_malformed_token_says_so(broken: str):
    with pytest.raises(LinkError) as err:
        verify(KEY, broken, NOW)
    assert err.value.reason == "malformed"


def test_a_cut_token_is_malformed_or_unsigned_never_accepted():
    t = token()
    for cut in (t[:-1], t[:len(t) // 2], t[: t.rindex(".")]):
        with pytest.raises(LinkError) as err:
            verify(KEY, cut, NOW)
        assert err.value.reason in ("malformed", "bad_signature")


# -- the key file -----------------------------------------------------------------------


def test_the_key_is_made_once_with_mode_0600(tmp_path: Path):
    key = link_secret(tmp_path / "data")
    path = tmp_path / "data" / LINK_KEY_NAME
    assert len(key) == KEY_BYTES and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert link_secret(tmp_path / "data") == key  # the same key at every start
    assert [p.name for p in path.parent.iterdir()] == [LINK_KEY_NAME]  # no leftovers


def test_a_symlinked_key_is_refused_and_left_alone(tmp_path: Path):
    real = tmp_path / "elsewhere"
    real.write_bytes(b"s" * 32)
    os.chmod(real, 0o600)
    (tmp_path / LINK_KEY_NAME).symlink_to(real)
    with pytest.raises(LinkKeyError, match="symbolic link"):
        link_secret(tmp_path)
    assert real.read_bytes() == b"s" * 32 and (tmp_path / LINK_KEY_NAME).is_symlink()


def test_a_key_readable_by_others_is_refused(tmp_path: Path):
    path = tmp_path / LINK_KEY_NAME
    path.write_bytes(b"s" * 32)
    os.chmod(path, 0o644)
    with pytest.raises(LinkKeyError, match="chmod 600"):
        link_secret(tmp_path)
    assert path.read_bytes() == b"s" * 32


def test_a_key_of_the_wrong_size_or_a_directory_is_refused(tmp_path: Path):
    path = tmp_path / LINK_KEY_NAME
    path.write_bytes(b"short")
    os.chmod(path, 0o600)
    with pytest.raises(LinkKeyError, match="32-byte key"):
        link_secret(tmp_path)
    assert path.read_bytes() == b"short"
    other = tmp_path / "d"
    (other / LINK_KEY_NAME).mkdir(parents=True)
    with pytest.raises(LinkKeyError):
        link_secret(other)


# -- which links a message carries ------------------------------------------------------


def config(**changes: object) -> NotifyConfig:
    return NotifyConfig.model_validate({"action_links": True, "link_ttl_s": 600, **changes})


def test_an_approval_gets_signed_approve_and_reject_links_in_the_fragment():
    links = links_for(notice(), ANN, config(), base_url="http://127.0.0.1:8000/",
                      secret=KEY, now=NOW)
    assert links.page == "http://127.0.0.1:8000/#/s/s-1"
    for url, decision in ((links.approve, "approve"), (links.reject, "reject")):
        assert url is not None
        split = urlsplit(url)
        assert (split.scheme, split.netloc, split.path, split.query) == (
            "http", "127.0.0.1:8000", "/act", "")  # nothing a server would see
        assert split.fragment.startswith("t=")
        claims = verify(KEY, split.fragment[2:], NOW)
        assert (claims.decision, claims.request_id, claims.digest,
                claims.recipient.subject) == (decision, "req-1", DIGEST, "ann")
        assert claims.exp - claims.iat == 600


def test_the_public_url_wins_over_the_api_s():
    links = links_for(notice(), ANN, config(public_url="https://hitl.example.com"),
                      base_url="http://127.0.0.1:8000", secret=KEY, now=NOW)
    assert links.page == "https://hitl.example.com/#/s/s-1"
    assert links.approve is not None and links.approve.startswith("https://hitl.example.com/act#t=")


@pytest.mark.parametrize("kind", ["opened", "reminded", "escalated"])
def test_each_notice_of_an_open_request_carries_them(kind: str):
    links = links_for(notice(kind=kind), ANN, config(), base_url="http://h",
                      secret=KEY, now=NOW)
    assert links.approve and links.reject


@pytest.mark.parametrize(("why", "n", "who", "cfg", "secret"), [
    ("links off", notice(), ANN, config(action_links=False), KEY),
    ("no key", notice(), ANN, config(), None),
    ("no person", notice(), None, config(), KEY),
    ("a service", notice(), Principal(issuer="hitlflow", subject="service:api-token",
                                      role="operator", kind="service"), config(), KEY),
    ("a confirm", notice(request_kind="confirm"), ANN, config(), KEY),
    ("a plan step", notice(request_kind="step"), ANN, config(), KEY),
    ("a form", notice(request_kind="form"), ANN, config(), KEY),
    ("no digest", notice(digest=None), ANN, config(), KEY),
    ("expired", notice(kind="expired"), ANN, config(), KEY),
    ("auto-decided", notice(kind="auto_decided"), ANN, config(), KEY),
    ("ended", notice(kind="ended", request_id=None, request_kind=None), ANN, config(), KEY),
])
def test_otherwise_only_the_page(why: str, n: Notice, who: PrincipalRef | None,
                                 cfg: NotifyConfig, secret: bytes | None):
    links = links_for(n, who, cfg, base_url="http://h", secret=secret, now=NOW)
    assert (links.page, links.approve, links.reject) == ("http://h/#/s/s-1", None, None), why


def test_a_bare_principal_ref_is_bound_as_it_is():
    ref = PrincipalRef(issuer="https://idp.example", subject="u-1", name="Uma")
    links = links_for(notice(), ref, config(), base_url="http://h", secret=KEY, now=NOW)
    assert links.approve is not None
    claims = verify(KEY, links.approve.split("#t=", 1)[1], NOW)
    assert (claims.recipient.issuer, claims.recipient.subject, claims.recipient.name) == (
        "https://idp.example", "u-1", "Uma")


def test_a_token_too_long_to_verify_is_not_sent():
    many = ANN.model_copy(update={"groups": [f"group-{i:03d}-" + "x" * 150 for i in range(60)]})
    links = links_for(notice(), many, config(), base_url="http://h", secret=KEY, now=NOW)
    assert (links.approve, links.reject) == (None, None) and links.page == "http://h/#/s/s-1"
