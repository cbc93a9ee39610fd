"""``verify_dir`` on several processes (``verify_parallel``) gives exactly the serial
answer: the same ``Verified`` on good logs (the saved histories' and logs of several
Temporal runs, cut anywhere: a RUN_CONTINUED_AS_NEW, an LLM call and its artifact,
line 1 and 2 on either side of a seam), the same error (code, line, text) on every
forgery the serial tests make, placed at, just before and just after a seam; and
``hitlflow log verify --jobs`` refuses what is not a number of processes."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import rfc8785
from typer.testing import CliRunner

from observation.exporter import ChainBrokenError, export_history, line_hash, seed_hash
from observation.exporter.decode import load_history
from observation.exporter.verify import (
    MAX_JOBS,
    Verified,
    check_range,
    verify_dir,
    verify_ranges,
)
from observation.exporter.verify_parallel import boundaries, seams
from tests.support.cli import log_app

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
NAMES = sorted(p.stem for p in HISTORIES.glob("*.json"))
LLM = "hitlflow/llm_output/v1"


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    runs = tmp_path_factory.mktemp("runs")
    out = {}
    for name in NAMES:
        sid, events = load_history((HISTORIES / f"{name}.json").read_text())
        export_history(sid, events, runs)
        out[name] = runs / sid
    return out


def lines_of(d: Path) -> list[bytes]:
    return (d / "events.ndjson").read_bytes().splitlines(keepends=True)


def events_of(d: Path) -> list[dict]:
    return [json.loads(x) for x in lines_of(d)]


def write_log(d: Path, events: list[dict]) -> None:
    """``events`` as the log of ``d``, every hash, ``seq``, ``prev_hash``, the head and
    the snapshot's head recomputed (a forger's rewrite: only the field checks, and
    the artifacts, can refuse it)."""
    prev = prev_line = "0" * 64
    out = []
    for n, e in enumerate(events, 1):
        e = {k: v for k, v in e.items() if k != "line_hash"} | {"seq": n, "prev_hash": prev}
        e["event_hash"] = seed_hash(e)
        e["line_hash"] = line_hash(e, prev_line)
        prev, prev_line = e["event_hash"], e["line_hash"]
        out.append(rfc8785.dumps(e) + b"\n")
    (d / "events.ndjson").write_bytes(b"".join(out))
    head = {"last_hash": prev, "last_seq": len(out)}
    (d / "head").write_text(json.dumps(head, indent=2, sort_keys=True) + "\n")
    snap = json.loads((d / "snapshot.json").read_text())
    (d / "snapshot.json").write_text(json.dumps({**snap, "head": head}, indent=2,
                                                sort_keys=True) + "\n")


def runs_of(demo: list[dict], reps: int) -> list[dict]:
    """The demo's lines, then its lines after RUN_CREATED ``reps`` times more, each
    time in a new Temporal run that a RUN_CONTINUED_AS_NEW at the end of the one before
    names (as a long session's log reads)."""
    out, run = list(demo), demo[0]["event_id"].split(":")[0]
    for r in range(1, reps + 1):
        new = f"run-{r}"
        last = out[-1]
        hev = max(int(e["event_id"].split(":")[1]) for e in out if e["event_id"].startswith(
            run + ":"))
        out.append({**last, "type": "RUN_CONTINUED_AS_NEW", "event_id": f"{run}:{hev + 1}:0",
                    "payload": {"temporal_run_id": run, "new_temporal_run_id": new}})
        for e in demo[1:]:
            _, event, k = e["event_id"].split(":")
            out.append({**e, "event_id": f"{new}:{event}:{k}"})
        run = new
    return out


@pytest.fixture(scope="module")
def multi(exported, tmp_path_factory) -> dict[int, Path]:
    """The demo's log in 1, 2 and 4 Temporal runs (89, 178 and 356 lines)."""
    demo, out = events_of(exported["demo"]), {}
    for reps in (0, 1, 3):
        d = tmp_path_factory.mktemp(f"multi{reps}") / exported["demo"].name
        shutil.copytree(exported["demo"], d)
        write_log(d, runs_of(demo, reps))
        out[reps] = d
    return out


def outcome(d: Path, **kw) -> Verified | tuple:
    """``verify_dir``'s answer: the ``Verified``, or the error as all it says; and the
    directory unchanged."""
    before = tree(d)
    try:
        answer: Verified | tuple = verify_dir(d, **kw)
    except ChainBrokenError as err:
        answer = (err.code, err.line, err.reason, str(err))
    assert tree(d) == before, "verify changed a file"
    return answer


def parallel(d: Path, jobs: int) -> Verified | tuple:
    return outcome(d, jobs=jobs, parallel_bytes=0)


def cut_at(d: Path, *after: int) -> Verified | None:
    """The ranges' answer with seams right after lines ``after`` (verified here, in
    this process, as the workers would): a ``Verified`` or None (serially, then)."""
    data = (d / "events.ndjson").read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    starts = [0, *(ends[k - 1] for k in after)]
    summaries = [check_range(d / "events.ndjson", s, e, d.name, d)
                 for s, e in zip(starts, [*starts[1:], len(data)], strict=True)]
    joined = seams(summaries)
    return None if joined is None else Verified(joined.events, joined.last_hash,
                                                joined.log_version)


# -- good logs: the same Verified, by the ranges (not by falling back) ----------------


@pytest.mark.parametrize("jobs", [2, 3, 4])
def test_good_logs_verify_the_same_on_several_processes(exported, multi, jobs):
    for d in [*exported.values(), *multi.values()]:
        serial = outcome(d, jobs=1)
        assert isinstance(serial, Verified)
        assert parallel(d, jobs) == serial, d
        assert outcome(d, jobs=jobs, parallel_bytes=0, artifacts=False) == serial
        ranged = verify_ranges(d / "events.ndjson", d.name, d, jobs)
        assert ranged is not None and ranged.ranges == jobs, d  # no fallback
        assert (ranged.events, ranged.last_hash, ranged.log_version) == (
            serial.events, serial.last_hash, serial.log_version)


def test_a_seam_after_any_line_proves_the_same_answer(multi):
    """Every place a seam can fall in a log of two runs: between an LLM call and its
    artifact, either side of the RUN_CONTINUED_AS_NEW, after line 1 or 2."""
    d = multi[1]
    serial = outcome(d, jobs=1)
    n = serial.events
    for k in range(1, n):
        assert cut_at(d, k) == serial, k
    for k in range(1, n - 2, 7):
        assert cut_at(d, k, k + 1, k + 2) == serial, k


def test_a_v1_log_verifies_the_same_on_several_processes(exported, tmp_path):
    from observation.exporter import Chain, LogWriter, map_history

    sid, events = load_history((HISTORIES / "demo.json").read_text())
    d = tmp_path / sid
    chain = Chain(version=1)
    with LogWriter(d) as w:
        for m in map_history(sid, events):
            w.append(chain.link(m), m.artifact)
        w.commit()
    serial = outcome(d, jobs=1)
    assert serial.log_version == 1 and serial.events == 89
    assert parallel(d, 3) == serial
    assert all(cut_at(d, k) == serial for k in range(1, 89))


def test_a_forks_first_lines_on_either_side_of_a_seam(exported, tmp_path):
    """A fork's log starts with its SESSION_FORKED and its RUN_CREATED on line 2: a
    seam after line 1 seeds that rule; the link to the parent is checked after."""
    d = tmp_path / exported["demo"].name
    shutil.copytree(exported["demo"], d)
    demo = events_of(d)
    forked = {**demo[0], "type": "SESSION_FORKED",
              "payload": {"session_id": d.name, "parent_session_id": "s-parent0",
                          "parent_seq": 5, "parent_line_hash": "a" * 64}}
    run = demo[0]["event_id"].split(":")[0]
    demo[0] = {**demo[0], "event_id": f"{run}:1:1"}  # RUN_CREATED: the same history event
    write_log(d, [forked, *demo])
    serial = outcome(d, jobs=1)
    assert serial[0] == "EVENT_CHAIN_BROKEN" and "parent session s-parent0" in serial[2]
    assert parallel(d, 2) == parallel(d, 4) == serial
    unlinked = outcome(d, jobs=1, parent=False)
    assert isinstance(unlinked, Verified) and unlinked.events == 90
    for k in (1, 2, 3):
        assert cut_at(d, k) == unlinked
    write_log(d, [forked, *demo[1:3], demo[0], *demo[3:]])  # line 2 is not RUN_CREATED
    serial = outcome(d, jobs=1, parent=False)
    assert serial[1] == 2 and "line 2 is" in serial[2]
    assert cut_at(d, 1) is None and cut_at(d, 2) is None
    assert outcome(d, jobs=2, parallel_bytes=0, parent=False) == serial


def test_a_live_log_is_verified_on_one_process_up_to_its_head(multi, tmp_path):
    """``live``: the lines up to the head, a batch in flight after it (here a torn
    line) not read, whatever ``jobs`` says."""
    d = tmp_path / multi[1].name
    shutil.copytree(multi[1], d)
    with (d / "events.ndjson").open("ab") as f:
        f.write(b'{"torn": ')
    serial = outcome(d, jobs=1, live=True)
    assert isinstance(serial, Verified) and serial.events == len(lines_of(multi[1]))
    assert outcome(d, jobs=4, parallel_bytes=0, live=True) == serial
    assert "torn" in outcome(d, jobs=1)[2] and outcome(d, jobs=3, parallel_bytes=0) == \
        outcome(d, jobs=1)


# -- forgeries: the serial error, wherever the seam falls --------------------------


def raw(edit: Callable[[list[bytes], int], list[bytes]]) -> Callable[[Path, int], None]:
    """A forgery of the log's bytes, nothing recomputed."""
    def apply(d: Path, k: int) -> None:
        (d / "events.ndjson").write_bytes(b"".join(edit(lines_of(d), k)))
    return apply


def rewritten(edit: Callable[[list[dict], int], list[dict]]) -> Callable[[Path, int], None]:
    """A forger's rewrite: ``edit`` of the events, every hash and head recomputed."""
    def apply(d: Path, k: int) -> None:
        write_log(d, edit(events_of(d), k))
    return apply


def flip(lines: list[bytes], k: int) -> list[bytes]:
    line = bytearray(lines[k - 1])
    line[len(line) // 2] ^= 0x01
    return [*lines[:k - 1], bytes(line), *lines[k:]]


def with_field(k_events: list[dict], k: int, **fields) -> list[dict]:
    return [*k_events[:k - 1], {**k_events[k - 1], **fields}, *k_events[k:]]


def wrong_head(d: Path, k: int) -> None:
    head = (d / "head").read_bytes()
    (d / "head").write_bytes(head.replace(b'"last_hash": "', b'"last_hash": "0'))


def tail_cut(d: Path, k: int) -> None:
    lines = lines_of(d)
    (d / "events.ndjson").write_bytes(b"".join(lines[:k]))


def snapshot_short(d: Path, k: int) -> None:
    snap = json.loads((d / "snapshot.json").read_text())
    snap["head"]["last_seq"] -= 1
    (d / "snapshot.json").write_text(json.dumps(snap))


def artifact_changed(d: Path, k: int) -> None:
    e = next(e for e in events_of(d)[k - 1:] if e["type"] == "ARTIFACT_WRITTEN")
    art = d / e["payload"]["path"]
    art.write_bytes(art.read_bytes() + b" ")


#: name -> the forgery of a log (a directory) at line k.
FORGERIES: dict[str, Callable[[Path, int], None]] = {
    "a flipped byte": raw(flip),
    "a deleted line": raw(lambda lines, k: lines[:k - 1] + lines[k:]),
    "two lines swapped": raw(lambda lines, k: [*lines[:k - 1], lines[k], lines[k - 1],
                                               *lines[k + 1:]]),
    "a line inserted twice": raw(lambda lines, k: [*lines[:k], lines[k - 1], *lines[k:]]),
    "garbage": raw(lambda lines, k: [*lines[:k - 1], b"not json\n", *lines[k:]]),
    "an envelope field edited": raw(lambda lines, k: [
        *lines[:k - 1], rfc8785.dumps({**json.loads(lines[k - 1]), "span_id": "0" * 16})
        + b"\n", *lines[k:]]),
    "a torn tail": raw(lambda lines, k: [*lines[:-1], lines[-1][:40]]),
    "a line of another session": rewritten(lambda ev, k: with_field(ev, k, run_id="s-x")),
    "a wrong trace_id": rewritten(lambda ev, k: with_field(ev, k, trace_id="e" * 32)),
    "a malformed ts": rewritten(lambda ev, k: with_field(ev, k, ts="yesterday")),
    "a copied line re-chained": rewritten(lambda ev, k: [*ev[:k], ev[k - 1], *ev[k:]]),
    "an event id seen before": rewritten(
        lambda ev, k: with_field(ev, k, event_id=ev[k - 10]["event_id"])),
    "a second RUN_CREATED": rewritten(lambda ev, k: with_field(ev, k, type="RUN_CREATED")),
    "a moved line re-chained": rewritten(lambda ev, k: [*ev[:k - 1], *ev[k:k + 3],
                                                        ev[k - 1], *ev[k + 3:]]),
    "the head's last_hash": wrong_head,
    "lines lost from the tail": tail_cut,
    "snapshot.json's head": snapshot_short,
    "an artifact file changed": artifact_changed,
}


def forged_copy(src: Path, tmp: Path, forgery: Callable[[Path, int], None], k: int) -> Path:
    d = tmp / f"{k}" / src.name
    shutil.copytree(src, d)
    forgery(d, k)
    return d


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forgery_at_a_seam_gets_the_serial_error(multi, tmp_path, name):
    """Each forgery at lines around the seams ``verify_dir`` makes for 2, 3 and 4
    processes (the processes' answer) and with seams placed right before, at and
    after it (the ranges' answer: never a pass where serial fails)."""
    src = multi[1]
    data = (src / "events.ndjson").read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    for jobs in (2, 3, 4):
        seam = boundaries(src / "events.ndjson", len(data), jobs)[1]
        first = ends.index(seam) + 2  # the second range's first line
        for k in (first - 1, first, first + 1):
            d = forged_copy(src, tmp_path / f"j{jobs}", FORGERIES[name], k)
            serial = outcome(d, jobs=1)
            assert not isinstance(serial, Verified), (name, k)
            assert parallel(d, jobs) == serial, (name, jobs, k)
            n = len(lines_of(d))
            for cut in {max(1, min(n - 1, c)) for c in (k - 2, k - 1, k, k + 1)}:
                if name in AFTER_THE_LINES:  # the lines pass; the parent's checks fail
                    assert cut_at(d, cut) == Verified(n, json.loads(lines_of(d)[-1])[
                        "event_hash"], 2), (name, k, cut)
                else:
                    assert cut_at(d, cut) is None, (name, k, cut)


#: Forgeries of what verify_dir checks after the lines (the head, snapshot.json).
AFTER_THE_LINES = {"the head's last_hash", "lines lost from the tail", "snapshot.json's head"}


def test_an_llm_artifact_across_a_seam_is_checked_against_the_call_before(multi, tmp_path):
    """A forger edits an LLM answer and its ARTIFACT_WRITTEN line (re-chaining the
    rest); the call's LLM_CALL_FINISHED, on the seam's other side, still says the
    truth: the ranges cannot prove the line, and the answer is the serial one."""
    d = tmp_path / multi[1].name
    shutil.copytree(multi[1], d)
    events = events_of(d)
    k = next(n for n, e in enumerate(events, 1) if e["type"] == "ARTIFACT_WRITTEN"
             and e["payload"]["schema_id"] == LLM and n > 100)
    assert events[k - 2]["type"] == "LLM_CALL_FINISHED"
    forged = (d / events[k - 1]["payload"]["path"]).read_bytes().replace(b"draft", b"plan")
    (d / "artifacts" / "llm" / "forged.json").write_bytes(forged)  # this line's alone
    payload = {**events[k - 1]["payload"], "sha256": hashlib.sha256(forged).hexdigest(),
               "size": len(forged), "path": "artifacts/llm/forged.json"}
    write_log(d, with_field(events, k, payload=payload))
    serial = outcome(d, jobs=1)
    assert serial[:2] == ("ARTIFACT_MISMATCH", k) and "output_hash" in serial[2]
    assert cut_at(d, k - 1) is None  # the seam between the call and its artifact
    assert cut_at(d, k - 3) is None and cut_at(d, k) is None
    for jobs in (2, 3, 4):
        assert parallel(d, jobs) == serial


def test_runs_across_a_seam(multi, tmp_path):
    """A run repeated after a later one, and a new run the RUN_CONTINUED_AS_NEW before
    does not name, with the run change just after a seam: the ranges cannot prove it
    (the one before knows the runs), and the answer is the serial one."""
    events = events_of(multi[3])
    can = [n for n, e in enumerate(events, 1) if e["type"] == "RUN_CONTINUED_AS_NEW"]
    # The fourth run's first line claims the first run: seen before.
    repeated = [*events[:can[2]], {**events[can[2]], "event_id": events[can[2] - 1]
                                   ["event_id"].replace("run-2", events[0]["event_id"]
                                                        .split(":")[0])}, *events[can[2] + 1:]]
    # The second CAN names another run than the one that follows.
    unnamed = with_field(events, can[1], payload={"temporal_run_id": "run-1",
                                                  "new_temporal_run_id": "run-9"})
    # The third CAN names the first run, and the fourth run's lines claim it: named,
    # but seen before (only the parent, knowing the runs before the seam, can tell).
    first = events[0]["event_id"].split(":")[0]
    renamed = with_field(events, can[2], payload={"temporal_run_id": "run-2",
                                                  "new_temporal_run_id": first})
    renamed[can[2]:] = [{**e, "event_id": e["event_id"].replace("run-3", first)}
                        for e in renamed[can[2]:]]
    for i, forged in enumerate((repeated, unnamed, renamed)):
        d = tmp_path / str(i) / multi[3].name
        shutil.copytree(multi[3], d)
        write_log(d, forged)
        serial = outcome(d, jobs=1)
        assert serial[0] == "EVENT_CHAIN_BROKEN", serial
        assert ("without the RUN_CONTINUED_AS_NEW" if i == 1 else "again after a later run"
                ) in serial[2]
        line = serial[1]
        for cut in (line - 1, line - 2, can[0], can[0] + 1):
            assert cut_at(d, cut) is None, (i, cut)
        for jobs in (2, 3, 4):
            assert parallel(d, jobs) == serial


# -- the command line ---------------------------------------------------------------


@pytest.mark.parametrize("jobs", ["0", "-1", str(MAX_JOBS + 1), "100000", "two", ""])
def test_log_verify_refuses_a_bad_number_of_jobs(exported, jobs):
    r = CliRunner().invoke(log_app(), ["log", "verify", str(exported["demo"]), "--jobs", jobs])
    assert r.exit_code == 2, r.output
    assert "--jobs" in r.output and "OK:" not in r.output


@pytest.mark.parametrize("jobs", ["1", "3", str(MAX_JOBS)])
def test_log_verify_with_jobs(exported, tmp_path, jobs):
    r = CliRunner().invoke(log_app(), ["log", "verify", str(exported["demo"]), "--jobs", jobs])
    assert r.exit_code == 0 and "OK: 89 events, log format v2" in r.output, r.output
    d = tmp_path / exported["demo"].name
    shutil.copytree(exported["demo"], d)
    raw(flip)(d, 40)
    r = CliRunner().invoke(log_app(), ["log", "verify", str(d), "-j", jobs])
    assert r.exit_code == 1 and "EVENT_CHAIN_BROKEN: line 40: " in r.output, r.output


def test_verify_dir_refuses_a_bad_number_of_jobs(exported):
    from api.cli.log import JOBS_MAX

    assert JOBS_MAX == MAX_JOBS
    for jobs in (0, -3, MAX_JOBS + 1):
        with pytest.raises(ValueError, match="jobs must be"):
            verify_dir(exported["demo"], jobs=jobs)
