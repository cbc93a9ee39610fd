"""Signed checkpoints: a rewrite of the whole run directory (lines, head and snapshot
recomputed) verifies without the key and fails with it; an auditor's older
checkpoint proves the log only grew; broken keys and checkpoints are clear errors."""

from __future__ import annotations

import base64
import os
import shutil
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature

from observation.exporter import (
    GENESIS,
    ChainBrokenError,
    LogWriter,
    export_history,
    verify_dir,
)
from observation.exporter.checkpoint import (
    CHECKPOINT_NAME,
    Checkpoint,
    checkpoint_bytes,
    verify_checkpoint,
)
from observation.exporter.decode import load_history
from observation.exporter.keys import (
    KEY_NAME,
    load_or_create_signer,
    read_signer,
    read_verifier,
    write_signer,
)
from observation.exporter.note import NoteError, NoteKeyError, Signer, open_note, sign_note
from observation.exporter.verify import Verified
from tests.support.logs import events_of, forged, rewrite

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())
SIGNER = Signer.generate("test.example/hitlflow")
KEY = SIGNER.verifier()


@pytest.fixture(scope="module")
def signed_dir(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    export_history(SID, EVENTS, runs, signer=SIGNER)
    return runs / SID


@pytest.fixture
def log_dir(signed_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / SID
    shutil.copytree(signed_dir, d)
    return d


def checkpoint_error(d: Path, since: bytes | None = None, key=KEY) -> ChainBrokenError:
    with pytest.raises(ChainBrokenError) as info:
        verify_checkpoint(d, verify_dir(d), key, since)
    assert str(info.value).startswith(info.value.code)
    return info.value


def test_notes_are_go_sumdb_notes():
    """Interop: the note package's own example key and signature (golang.org/x/mod)."""
    signer = Signer.parse("PRIVATE+KEY+PeterNeumann+c74f20a3+"
                          "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")
    text = ("If you think cryptography is the answer to your problem,\n"
            "then you don't know what your problem is.\n")
    note = sign_note(text, signer)
    assert note == (text + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInN"
                    "IuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n").encode()
    assert signer.verifier().text() == ("PeterNeumann+c74f20a3+"
                                        "ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
    assert open_note(note, signer.verifier()) == text
    # Signatures of other keys are ignored; one of this key must be there and verify.
    other = Signer.generate("someone.else")
    both = note + sign_note(text, other).split(b"\n\n", 1)[1]
    assert open_note(both, signer.verifier()) == text
    with pytest.raises(NoteError, match=r"not signed by the key someone\.else"):
        open_note(note, other.verifier())


def test_the_checkpoint_signs_the_head_of_the_log(log_dir):
    data = (log_dir / CHECKPOINT_NAME).read_bytes()
    text, sig = data.decode().split("\n\n")
    last = events_of(log_dir)[-1]
    assert text.split("\n") == [f"test.example/hitlflow/{SID}", "89",
                                base64.b64encode(bytes.fromhex(last["line_hash"])).decode()]
    assert sig.startswith("\u2014 test.example/hitlflow ") and sig.endswith("=\n")
    assert len(base64.b64decode(sig.split()[-1])) == 4 + 64  # key id, Ed25519 signature
    cp = verify_checkpoint(log_dir, verify_dir(log_dir), KEY)
    assert cp == Checkpoint(f"test.example/hitlflow/{SID}", 89, last["line_hash"])
    # The same history and key give the same bytes (Ed25519 signatures are deterministic).
    export_history(SID, EVENTS, log_dir.parent / "again", signer=SIGNER)
    assert (log_dir.parent / "again" / SID / CHECKPOINT_NAME).read_bytes() == data


def test_a_full_rewrite_verifies_without_the_key_and_fails_with_it(log_dir):
    events = forged(log_dir)
    rewrite(log_dir, events)
    assert verify_dir(log_dir).events == 89  # every hash, the head, the snapshot agree
    err = checkpoint_error(log_dir)
    assert err.code == "CHECKPOINT_MISMATCH" and err.line == 89 and "rewritten" in str(err)
    # Rewritten with one line fewer, or more: the signed size no longer matches.
    rewrite(log_dir, events[:-1])
    assert "signed lines were removed" in str(checkpoint_error(log_dir))
    run, event, n = events[-2]["event_id"].split(":")  # the next id of that history event
    rewrite(log_dir, [*events[:-1], {**events[-2], "event_id": f"{run}:{event}:{int(n) + 1}"},
                      events[-1]])
    assert "lines after the signed ones were added" in str(checkpoint_error(log_dir))


@pytest.mark.parametrize("damage, code, why", [
    (lambda b: b[:-10] + (b"A" if b[-10:-9] != b"A" else b"B") + b[-9:], "CHECKPOINT_INVALID",
     "does not verify"),
    (lambda b: b.replace(b"\n89\n", b"\n90\n"), "CHECKPOINT_INVALID", "does not verify"),
    (lambda b: b.split(b"\n\n")[0] + b"\n", "CHECKPOINT_INVALID", "no blank line"),
    (lambda b: b"\xff" + b, "CHECKPOINT_INVALID", "not UTF-8"),
    (lambda b: b[:-1], "CHECKPOINT_INVALID", "does not end with a newline"),
    (lambda b: b"", "CHECKPOINT_INVALID", "does not end with a newline"),
    (lambda b: b"x" * 70_000, "CHECKPOINT_INVALID", "over"),
    (lambda b: None, "CHECKPOINT_MISSING", "is missing"),
])
def test_a_tampered_or_missing_checkpoint_fails(log_dir, damage, code, why):
    path = log_dir / CHECKPOINT_NAME
    data = damage(path.read_bytes())
    if data is None:
        path.unlink()
    else:
        path.write_bytes(data)
    err = checkpoint_error(log_dir)
    assert err.code == code and why in str(err)


def test_a_checkpoint_of_another_session_or_key_fails(log_dir, tmp_path):
    # The whole directory copied under another session's name: its checkpoint names SID.
    other = tmp_path / "s-000000000000"
    shutil.copytree(log_dir, other)
    with pytest.raises(ChainBrokenError, match=r"CHECKPOINT_INVALID: .*another session"):
        verify_checkpoint(other, Verified(89, events_of(other)[-1]["event_hash"], 2), KEY)
    stranger = Signer.generate("test.example/hitlflow")  # the same name, another key
    (log_dir / CHECKPOINT_NAME).write_bytes(checkpoint_bytes(stranger, SID, 89,
                                                             events_of(log_dir)[-1]["line_hash"]))
    assert "is not signed by the key test.example/hitlflow" in str(checkpoint_error(log_dir))


def test_an_older_checkpoint_proves_the_log_only_grew(tmp_path):
    runs = tmp_path / "runs"
    export_history(SID, EVENTS[:len(EVENTS) // 2], runs, signer=SIGNER)
    d = runs / SID
    old = (d / CHECKPOINT_NAME).read_bytes()
    old_size = Checkpoint.parse(open_note(old, KEY)).size
    assert 5 < old_size < 89  # the forged line 5 is signed
    export_history(SID, EVENTS, runs, signer=SIGNER)  # the log grows to its end
    assert verify_checkpoint(d, verify_dir(d), KEY, since=old).size == 89
    # The key holder rewrites a signed line and signs the result: the new checkpoint
    # verifies, the auditor's older one shows the rewrite.
    rewrite(d, forged(d), SIGNER)
    assert verify_checkpoint(d, verify_dir(d), KEY).size == 89
    err = checkpoint_error(d, since=old)
    assert err.code == "CHECKPOINT_MISMATCH" and err.line == old_size
    assert "did not only grow" in str(err)
    # Cut back below the older checkpoint (and re-signed): lines were removed.
    rewrite(d, events_of(d)[:old_size - 1], SIGNER)
    err = checkpoint_error(d, since=old)
    assert "fewer than" in str(err) and err.line == old_size
    # An older checkpoint that is not this key's is no proof of anything.
    with pytest.raises(ChainBrokenError, match="--since checkpoint is not signed by"):
        verify_checkpoint(d, verify_dir(d), KEY, since=checkpoint_bytes(
            Signer.generate("x.example"), SID, 1, GENESIS))


def test_opening_a_log_never_signs_it_only_a_commit_after_history_does(log_dir):
    (log_dir / CHECKPOINT_NAME).unlink()
    (log_dir / "head").unlink()  # the writer rewrites the head on open
    LogWriter(log_dir, signer=SIGNER).open().close()
    assert (log_dir / "head").is_file() and not (log_dir / CHECKPOINT_NAME).exists()
    export_history(SID, EVENTS, log_dir.parent, signer=SIGNER)  # re-mapped: signed
    verify_checkpoint(log_dir, verify_dir(log_dir), KEY)


def test_the_key_file_is_created_once_with_mode_0600(tmp_path):
    old = os.umask(0)
    try:
        signer = load_or_create_signer(tmp_path / "data")
    finally:
        os.umask(old)
    path = tmp_path / "data" / KEY_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == signer.text() + "\n" and signer.name == "hitlflow.local"
    assert load_or_create_signer(tmp_path / "data").text() == signer.text()
    assert not write_signer(path, SIGNER)  # never overwritten
    assert read_signer(path).text() == signer.text()
    assert sorted(p.name for p in path.parent.iterdir()) == [KEY_NAME]  # no temp left


BROKEN_KEYS = [
    ("garbage", "not a verifier key"),
    ("", "not a verifier key"),
    ("x" * 5000, "not a verifier key"),  # cannot name a file: taken as the key's text
    ("a\x00b", "not a verifier key"),
    (KEY.text().replace("+", " +", 1), "not a key name"),
    (KEY.text().split("+")[0] + "+zzzzzzzz+" + KEY.text().split("+", 2)[2], "not a key id"),
    (KEY.text()[:-1], "not base64"),
    (KEY.text().split("+")[0] + "+00000000+" + KEY.text().split("+", 2)[2], "a damaged"),
    ("x.example+00000000+" + base64.b64encode(b"\x02" + bytes(32)).decode(),
     "not an Ed25519 key"),
    (SIGNER.text(), "this is a signer (private) key"),
]


# ids that do not hold the key generated at import: every process collecting the
# tests (pytest-xdist's workers) must name them alike
@pytest.mark.parametrize("text, why", BROKEN_KEYS,
                         ids=[f"{i}-{why}" for i, (_, why) in enumerate(BROKEN_KEYS)])
def test_a_broken_verifier_key_is_a_clear_error(text, why):
    with pytest.raises(NoteKeyError) as info:
        read_verifier(text)
    assert why in str(info.value)


def test_broken_key_files_are_clear_errors(tmp_path):
    f = tmp_path / "key"
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(NoteKeyError, match="key: not a readable key file"):
        read_verifier(str(f))
    f.write_text("PRIVATE+KEY+nope")
    with pytest.raises(NoteKeyError, match=f"checkpoint key {f}: not a signer key"):
        read_signer(f)
    with pytest.raises(NoteKeyError, match="No such file"):
        read_signer(tmp_path / "missing")
    f.write_text(KEY.text() + "\n")
    assert read_verifier(str(f)) == KEY  # a file holding the key, as `log key > f` writes


def test_the_readme_recipe_checks_a_checkpoint_independently(log_dir):
    """observation/exporter/README.md's checkpoint verifier, run as printed there."""
    readme = (Path(__file__).parents[2] / "docs/audit-log.md").read_text()
    recipe = next(block for block in readme.split("```python\n")[1:]
                  if "def check_checkpoint" in block).split("```", 1)[0]
    scope: dict = {}
    exec(recipe, scope)
    check = scope["check_checkpoint"]
    check(str(log_dir), KEY.text())
    signed = (log_dir / CHECKPOINT_NAME).read_bytes()
    (log_dir / CHECKPOINT_NAME).write_bytes(signed.replace(b"\n89\n", b"\n90\n"))
    with pytest.raises(InvalidSignature):
        check(str(log_dir), KEY.text())
    (log_dir / CHECKPOINT_NAME).write_bytes(signed)
    with pytest.raises(AssertionError, match="not signed by this key"):
        check(str(log_dir), Signer.generate("test.example/hitlflow").verifier().text())
    events = forged(log_dir)
    rewrite(log_dir, events)
    with pytest.raises(AssertionError, match="rewritten"):
        check(str(log_dir), KEY.text())
    rewrite(log_dir, events[:-1])
    with pytest.raises(AssertionError, match="whole log"):
        check(str(log_dir), KEY.text())
