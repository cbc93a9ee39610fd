"""The people file (``api.identity.people_store``): what it keeps of a key, and every
broken file refused with the fix in the message, nothing written over it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from api.identity.people_store import (
    PEOPLE_FILE,
    PeopleFileError,
    PeopleStore,
    PersonError,
    parse_key,
)


@pytest.fixture
def store(tmp_path: Path) -> PeopleStore:
    return PeopleStore(tmp_path)


def test_a_key_is_shown_once_and_kept_only_hashed(store: PeopleStore):
    key = store.add("ada", "approver", ["staff", "ops"], "ada@example.com")
    key_id, secret = parse_key(key) or ("", "")
    raw = store.path.read_text()
    assert secret not in raw and key not in raw and key_id in raw
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    principal = store.principal_of(key)
    assert principal is not None
    assert (principal.issuer, principal.subject, principal.name, principal.role,
            principal.groups, principal.email, principal.kind) == (
        "local", "ada", "ada", "approver", ["staff", "ops"], "ada@example.com", "person")
    # Another store on the same file (the API's) finds the same person.
    assert PeopleStore(store.data_dir).principal_of(key) == principal


@pytest.mark.parametrize("wrong", [
    "",  # nothing
    "hfk_",  # no id
    "hfk_0123456789abcdef",  # no secret
    "hfk_0123456789abcdef_" + "x" * 43,  # an id nobody has
    "hfk_zzzz_" + "x" * 43,  # not an id at all
    "Bearer hfk_x",
])
def test_wrong_keys_sign_nobody_in(store: PeopleStore, wrong: str):
    store.add("ada", "viewer")
    assert store.principal_of(wrong) is None


def test_a_right_id_with_a_wrong_secret_signs_nobody_in(store: PeopleStore):
    key = store.add("ada", "viewer")
    assert store.principal_of(key[:-1] + ("A" if key[-1] != "A" else "B")) is None


def test_rotate_revokes_the_old_key_unless_told_to_keep_it(store: PeopleStore):
    first = store.add("ada", "approver")
    second = store.rotate("ada")
    assert store.principal_of(first) is None
    assert store.principal_of(second) is not None
    third = store.rotate("ada", keep_old=True)
    assert store.principal_of(second) is not None and store.principal_of(third) is not None
    assert len(store.read().find("ada").keys) == 2  # type: ignore[union-attr]


def test_remove_and_set_role_take_effect_at_the_next_lookup(store: PeopleStore):
    key = store.add("ada", "viewer")
    other = PeopleStore(store.data_dir)  # as the running API holds it (cached)
    assert other.principal_of(key).role == "viewer"  # type: ignore[union-attr]
    store.set_role("ada", "operator")
    assert other.principal_of(key).role == "operator"  # type: ignore[union-attr]
    store.remove("ada")
    assert other.principal_of(key) is None


@pytest.mark.parametrize(("call", "said"), [
    (lambda s: s.add("ada", "admin"), "already"),
    (lambda s: s.add("bad name", "admin"), "invalid name"),
    (lambda s: s.add("-dash", "admin"), "invalid name"),
    (lambda s: s.add("x" * 65, "admin"), "invalid name"),
    (lambda s: s.add("bob", "king"), "role"),
    (lambda s: s.add("bob", "viewer", ["a,b"]), "groups"),
    (lambda s: s.add("bob", "viewer", email="not-an-address"), "email"),
    (lambda s: s.remove("nobody"), "no person named 'nobody'"),
    (lambda s: s.rotate("nobody"), "no person named"),
    (lambda s: s.set_role("ada", "king"), "role"),
])
def test_a_change_that_cannot_be_made_changes_nothing(store: PeopleStore, call, said):
    store.add("ada", "viewer")
    before = store.path.read_bytes()
    with pytest.raises(PersonError, match=said):
        call(store)
    assert store.path.read_bytes() == before


def _broken(path: Path, how: str) -> str:
    """Break the people file at ``path`` ``how``; what the refusal must say."""
    if how == "not json":
        path.write_text("{not json")
        return "not valid JSON"
    if how == "wrong shape":
        path.write_text(json.dumps({"version": 1, "people": [{"name": "ada"}]}))
        return "not a people file: at people.0.role"
    if how == "unknown field":
        path.write_text(json.dumps({"version": 1, "people": [], "admins": ["ada"]}))
        return "not a people file"
    if how == "two of a name":
        person = {"name": "ada", "role": "admin", "keys": []}
        path.write_text(json.dumps({"version": 1, "people": [person, person]}))
        return "same name"
    if how == "a list":
        path.write_text("[]")
        return "not a people file"
    if how == "world-readable":
        os.chmod(path, 0o644)
        return "chmod 600"
    if how == "a symlink":
        target = path.with_name("elsewhere.json")
        path.rename(target)
        path.symlink_to(target)
        return "symbolic link"
    if how == "a directory":
        path.unlink()
        path.mkdir()
        return "not a regular file"
    raise AssertionError(how)


BROKEN = ["not json", "wrong shape", "unknown field", "two of a name", "a list",
          "world-readable", "a symlink", "a directory"]


@pytest.mark.parametrize("how", BROKEN)
def test_a_broken_people_file_is_refused_and_never_written_over(store: PeopleStore, how):
    key = store.add("ada", "admin")
    said = _broken(store.path, how)
    before = store.path.read_bytes() if store.path.is_file() else None
    for attempt in (store.read, lambda: store.principal_of(key),
                    lambda: store.add("bob", "viewer"), lambda: store.rotate("ada"),
                    lambda: store.remove("ada"), lambda: store.set_role("ada", "viewer")):
        with pytest.raises(PeopleFileError, match=said):
            attempt()
    after = store.path.read_bytes() if store.path.is_file() else None
    assert after == before
    assert sorted(p.name for p in store.data_dir.iterdir() if p.name.endswith(".tmp")) == []


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_people_file_of_another_user_is_refused(store: PeopleStore):
    store.add("ada", "admin")
    os.chown(store.path, 65534, -1)
    with pytest.raises(PeopleFileError, match="belongs to another user"):
        store.read()


def test_a_missing_file_is_nobody_and_the_first_add_creates_it_0600(tmp_path: Path):
    store = PeopleStore(tmp_path / "new")
    assert store.read().people == [] and not store.anyone_can_sign_in()
    store.add("ada", "admin")
    assert stat.S_IMODE((tmp_path / "new" / PEOPLE_FILE).stat().st_mode) == 0o600
    assert store.anyone_can_sign_in()
