"""Verify a big log on every core: its bytes split into ranges at line boundaries, each
range checked by :func:`verify.verify_lines` in its own process, the ranges' seams
proved by the parent; on anything else, nothing: the caller verifies serially.
(``verify.verify_ranges`` runs it with ``verify._range``, a range's checks: this
module imports nothing of ``verify``.)

**A range.** A worker process opens the log, reads the line just before its range
(the seed) and seeds :func:`verify_lines` (a :class:`verify.Start`) with what serial
verification knows after that line: its ``event_hash`` and ``line_hash``, its version,
its ``seq`` (the range's first line number, provisional), its Temporal run and history
event id, whether line 1 was a fork's (for line 2's rule), the session's trace and
span. It then reads its own lines, up to the range's end, through every check of
:func:`verify_lines` and the artifact files of its ``ARTIFACT_WRITTEN`` lines, and
returns a small :class:`Summary`: the seed's bytes and its last line's, the count,
the last ``event_hash``, and what the field checks (``fields.LineFields``) could not
know from within the range, taken as assumptions (:class:`RangeFields`):

* a new Temporal run it entered was not seen before the range (``runs_before``);
* a run change before the range's first ``RUN_CONTINUED_AS_NEW``: the one before the
  range named that run;
* an LLM artifact whose ``LLM_CALL_FINISHED`` is not in the range: the last one of
  its call before the range has its ``sha256`` as ``output_hash``;

and what a later range needs of it: the runs it left, the last run named by a
``RUN_CONTINUED_AS_NEW`` in it, the ``output_hash`` of each call it finished.

**The seams.** The parent takes the summaries in order and checks: range 1 starts at
byte 0; every range passed and read its range to the end; each later range's seed is
byte for byte the last line the range before verified (so every seeded value is what
serial verification has at that point) and its first line number follows that
range's count; each assumption holds against the state folded from the ranges before;
the log has not changed size. Then every line passed every check serial
verification makes, with the same state, so serial verification gives the same
:class:`verify.Verified` (count, last hash, version) and the same fork lineage.
Anything else, a failure, an assumption that does not hold, a process that cannot
start or dies, and :func:`verify_ranges` returns None: the caller verifies from line
1 serially, so every error is exactly the serial one (code, line, text).

Processes start by ``fork`` (where the platform has it; else None: serial); they
read the file themselves, the parent reads only a few bytes around each boundary.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from observation.exporter import ids
from observation.exporter.fields import EVENT_ID_RE, LineFields
from observation.exporter.lines import GENESIS, SESSION_FORKED

_CHUNK = 1 << 16
#: ``continued_to`` not known within a range (before its first RUN_CONTINUED_AS_NEW).
_UNSET: Any = object()


class RangeFields(LineFields):
    """``LineFields`` for a range after the first: seeded from the line before it, and
    what it cannot decide within the range taken as an assumption for the parent."""

    def __init__(self, session: str) -> None:
        super().__init__(session, True)
        self.seeded = False
        self.entered: list[str] = []  # runs entered after the range's first line's
        self.assumed_continued: list[str] = []  # runs the last CAN before must name
        self.assumed_outputs: list[tuple[Any, str]] = []  # (call_id, sha256) from before

    def seed(self, obj: dict[str, Any]) -> None:
        """The state after line ``obj["seq"]`` (``obj``), as ``check`` leaves it."""
        m = EVENT_ID_RE.fullmatch(obj["event_id"])
        if m is None:
            raise ValueError("the seed's event_id is not a history event's")
        run, hev, k = m.group(1), int(m.group(2)), int(m.group(3))
        session = self.session
        assert session is not None
        self.trace, self.root = ids.trace_id(session), ids.session_span(session)
        self.run, self.last = run, (hev, k, obj["seq"])
        self.next_id = f"{run}:{hev}:{k + 1}"
        self.forked = obj["seq"] == 1 and obj["type"] == SESSION_FORKED and \
            obj["payload"].get("session_id") == obj["run_id"]
        self.continued_to, self.seeded = _UNSET, True

    def _new_run(self, run: str, eid: str, n: int) -> None:
        if self.run is not None:
            self.entered.append(run)
            if self.continued_to is _UNSET:  # named before the range, or by no one
                self.assumed_continued.append(run)
                self.continued_to = run
        super()._new_run(run, eid, n)

    def _output_of(self, call: Any, sha256: str) -> tuple[Any, int] | None:
        found = self.outputs.get(call)
        if found is None and self.seeded:  # its LLM_CALL_FINISHED is before the range
            self.assumed_outputs.append((call, sha256))
            return sha256, 0
        return found


@dataclass
class Summary:
    """What a range's worker returns (``error``: why it did not pass, else None)."""
    start: int
    error: str | None = None
    seed: bytes | None = None  # the line before the range, as read
    first: int = 1  # the range's first line number (the seed's seq + 1)
    count: int = 0
    last_line: bytes | None = None  # the range's last line, as verified
    last_hash: str = GENESIS
    version: int | None = None
    lineage: dict[str, Any] | None = None  # line 1's SESSION_FORKED payload
    entered: list[str] = field(default_factory=list)
    assumed_continued: list[str] = field(default_factory=list)
    assumed_outputs: list[tuple[Any, str]] = field(default_factory=list)
    runs_left: set[str] = field(default_factory=set)
    continued: tuple[bool, Any] = (False, None)  # (set within the range, its value)
    outputs: dict[Any, Any] = field(default_factory=dict)


def boundaries(path: Path, size: int, jobs: int) -> list[int]:
    """The ranges' first bytes: 0, then just after the first newline at or after each
    ``k * size / jobs`` (fewer when a line spans more than one range)."""
    starts = [0]
    with path.open("rb") as f:
        for k in range(1, jobs):
            at = max(size * k // jobs, starts[-1] + 1)
            nl = _newline_from(f, at - 1, size)
            if nl is None or nl + 1 >= size:
                break
            starts.append(nl + 1)
    return starts


def _newline_from(f: IO[bytes], pos: int, size: int) -> int | None:
    f.seek(pos)
    while pos < size:
        chunk = f.read(_CHUNK)
        if not chunk:
            return None
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i
        pos += len(chunk)
    return None


def line_before(f: IO[bytes], start: int) -> bytes:
    """The line that ends at byte ``start`` (its newline at ``start - 1``), as read."""
    nl, lo, parts = start - 1, start - 1, []
    while lo > 0:
        at = max(0, lo - _CHUNK)
        f.seek(at)
        chunk = f.read(lo - at)
        i = chunk.rfind(b"\n")
        if i >= 0:
            parts.append(chunk[i + 1:])
            break
        parts.append(chunk)
        lo = at
    parts.reverse()
    f.seek(nl)
    return b"".join(parts) + f.read(1)


def lines_to(f: IO[bytes], size: int, seen: list[bytes]) -> Iterator[bytes]:
    """The lines of the next ``size`` bytes; the last one put in ``seen`` when they
    end exactly there."""
    for line in f:
        size -= len(line)
        if size < 0:
            return  # a line runs past the range: the file changed; the count tells
        yield line
        if size == 0:
            seen.append(line)
            return


#: A range's checks (``verify._range``): fill in the summary, or raise.
RangeCheck = Callable[[Summary, Path, int, int, str, "Path | None"], None]


def verify_range(check: RangeCheck, path: str, start: int, end: int, session: str,
                 run_dir: str | None) -> Summary:
    """Bytes ``[start, end)`` of the log at ``path`` (whole lines) through ``check``;
    ``run_dir``: check the artifact files there (None: not). Never raises: a failure is
    the summary's ``error``."""
    out = Summary(start)
    try:
        check(out, Path(path), start, end, session,
              Path(run_dir) if run_dir is not None else None)
    except Exception as err:  # anything: the parent then verifies serially
        out.error = f"{type(err).__name__}: {err}"
    return out


def summarise(out: Summary, fields: RangeFields) -> None:
    """What the range's field checks assumed and what later ranges need of them."""
    out.entered, out.assumed_continued = fields.entered, fields.assumed_continued
    out.assumed_outputs, out.runs_left = fields.assumed_outputs, fields.runs_before
    out.continued = (fields.continued_to is not _UNSET,
                     None if fields.continued_to is _UNSET else fields.continued_to)
    out.outputs = {call: found[0] for call, found in fields.outputs.items()}


@dataclass(frozen=True)
class RangesVerified:
    events: int
    last_hash: str
    log_version: int | None
    lineage: dict[str, Any] | None
    ranges: int


def run_ranges(check: RangeCheck, log: Path, session: str, run_dir: Path | None,
               jobs: int) -> RangesVerified | None:
    """``log`` verified in up to ``jobs`` ranges, one process each, by ``check``: what
    serial verification would find, or None when the ranges could not prove it (a
    failure, an assumption that does not hold, no processes): verify serially then."""
    size = log.stat().st_size
    if jobs < 2 or size < 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    starts = boundaries(log, size, jobs)
    if len(starts) < 2:
        return None
    ends = [*starts[1:], size]
    try:
        with ProcessPoolExecutor(len(starts), multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(verify_range, check, str(log), s, e, session,
                                   None if run_dir is None else str(run_dir))
                       for s, e in zip(starts, ends, strict=True)]
            summaries = [f.result() for f in futures]
    except Exception:  # cannot fork, a worker died (BrokenProcessPool), ...: serially
        return None
    if log.stat().st_size != size:
        return None
    return seams(summaries)


def seams(summaries: list[Summary]) -> RangesVerified | None:
    """The ranges' summaries joined, each assumption checked against what the ranges
    before hold; None when any does not hold or a range did not pass."""
    runs_before: set[str] = set()
    continued: Any = None  # LineFields' start: no RUN_CONTINUED_AS_NEW yet
    outputs: dict[Any, Any] = {}
    count, prev = 0, None
    for r in summaries:
        if r.error is not None or r.count < 1:
            return None
        if prev is None:
            if r.start != 0 or r.seed is not None or r.first != 1:
                return None
        elif r.seed is None or r.seed != prev.last_line or r.first != count + 1:
            return None
        if any(run in runs_before for run in r.entered) or \
                any(run != continued for run in r.assumed_continued):
            return None
        for call, sha in r.assumed_outputs:
            if call not in outputs or outputs[call] != sha:
                return None
        runs_before |= r.runs_left
        if r.continued[0]:
            continued = r.continued[1]
        outputs.update(r.outputs)
        count, prev = count + r.count, r
    assert prev is not None
    return RangesVerified(count, prev.last_hash, prev.version, summaries[0].lineage,
                          len(summaries))
