"""What each field of a log line must be, line after line: what the exporter writes
(``ids.py``, ``mapping.py``, ``activities.py``), beyond what the hashes cover.

* ``run_id`` is the session (the run directory's name, else line 1's), and line 1 is
  its ``RUN_CREATED`` (the only one), or a fork's ``SESSION_FORKED`` and line 2 its
  ``RUN_CREATED``;
* ``trace_id`` is ``ids.trace_id(session)``; ``span_id`` and ``parent_span_id`` are
  16 lowercase hex digits, and only the session's span (``ids.session_span``) has no
  parent;
* ``ts`` is ISO 8601 UTC with microseconds (``YYYY-MM-DDTHH:MM:SS.ffffffZ``), a real
  time;
* ``event_id`` is ``<Temporal run id>:<history event id>:<n>``: unique and in history
  order (event ids rise within a run, ``n`` counts 0, 1, ... per history event), a
  new run only after the ``RUN_CONTINUED_AS_NEW`` that names it;
* an LLM answer's ``ARTIFACT_WRITTEN.sha256`` is the ``output_hash`` of the
  ``LLM_CALL_FINISHED`` of its call before it (the file is then hashed against it).

Pure: no I/O. :class:`FieldError` names the line; ``verify.py`` reports it.
"""

from __future__ import annotations

import re
from datetime import datetime
from operator import itemgetter
from typing import Any

from observation.exporter import ids
from observation.exporter import lines as ev
from observation.exporter.lines import LLM_OUTPUT_SCHEMA

TS_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
EVENT_ID_RE = re.compile(r"([^:]+):([1-9][0-9]*):(0|[1-9][0-9]*)")
HEX16_RE = re.compile(r"[0-9a-f]{16}")
ARTIFACT_TYPES = frozenset({ev.LLM_CALL_FINISHED, ev.ARTIFACT_WRITTEN})
#: The types checked on any line beyond the first two.
_FIRST_TYPES = frozenset({ev.RUN_CREATED, ev.SESSION_FORKED})
#: What :meth:`LineFields.check` reads of every line, in one call.
_FIELDS = itemgetter("run_id", "trace_id", "span_id", "parent_span_id", "ts", "event_id",
                     "type")


class FieldError(ValueError):
    def __init__(self, line: int, reason: str, code: str = "EVENT_CHAIN_BROKEN"):
        self.line, self.reason, self.code = line, reason, code
        super().__init__(reason)


class LineFields:
    """The checks of one log, fed its lines in order (``check``)."""

    def __init__(self, session_id: str | None, from_dir: bool) -> None:
        self.session, self.from_dir = session_id, from_dir
        self.trace = self.root = ""
        self.run: str | None = None
        self.last: tuple[int, int, int] = (0, 0, 0)  # (history event id, n, line)
        self.runs_before: set[str] = set()
        self.continued_to: str | None = None
        self.outputs: dict[Any, tuple[Any, int]] = {}  # call_id -> (output_hash, line)
        self.spans: set[str] = set()  # span ids seen well-formed
        self.ts = ""  # the last ts seen well-formed
        self.next_id: str | None = None  # the next line's event_id if of the same history event
        self.forked = False  # line 1 is a fork's SESSION_FORKED

    def _session(self, obj: dict[str, Any], n: int) -> None:
        if self.session is None:
            self.session = obj["run_id"]
        self.trace, self.root = ids.trace_id(self.session), ids.session_span(self.session)
        p = obj["payload"]
        if obj["type"] == ev.SESSION_FORKED and p.get("session_id") == obj["run_id"]:
            self.forked = True  # a fork: its lineage, then its RUN_CREATED (issue 27)
            return
        if obj["type"] != ev.RUN_CREATED or p.get("session_id") != obj["run_id"]:
            raise FieldError(n, f"line 1 is {obj['type']} (session_id "
                             f"{p.get('session_id')!r}), not the RUN_CREATED of "
                             f"session {obj['run_id']}: a log starts with its session")

    def check(self, obj: dict[str, Any], n: int) -> None:
        run_id, trace, span, parent, ts, eid, kind = _FIELDS(obj)
        if n <= 2 or kind in _FIRST_TYPES:
            self._first(obj, n)
        if run_id != self.session:
            where = "this directory's session" if self.from_dir else "the log's session"
            raise FieldError(n, f"run_id {run_id!r} is not {where} "
                             f"{self.session!r} (a line or log of another session)")
        if trace != self.trace:
            raise FieldError(n, f"trace_id {trace!r} is not the session's "
                             f"({self.trace}: sha256('hitlflow-trace-v1\\n' + "
                             "session_id)[:32])")
        spans = self.spans
        if parent is None or span == self.root:
            if parent is not None or span != self.root:
                raise FieldError(n, "only the session's span has no parent_span_id (and "
                                 "it has none)")
        elif span not in spans or parent not in spans:
            if HEX16_RE.fullmatch(span) is None or HEX16_RE.fullmatch(parent) is None:
                raise FieldError(n, "span_id/parent_span_id is not 16 lowercase hex "
                                 "digits")
            spans.update((span, parent))
        if ts != self.ts:  # lines of one history event share it
            self._ts(ts, n)
            self.ts = ts
        if eid == self.next_id:  # the next line of the same history event: n + 1
            hev, k, _ = self.last
            self.last = (hev, k + 1, n)
            self.next_id = f"{self.run}:{hev}:{k + 2}"
            if kind == ev.RUN_CONTINUED_AS_NEW:
                self.continued_to = obj["payload"].get("new_temporal_run_id")
        else:
            self._event_id(obj, n)
        if kind in ARTIFACT_TYPES:
            self._artifact(obj, n)

    def _first(self, obj: dict[str, Any], n: int) -> None:
        """Lines 1 and 2, and a RUN_CREATED or SESSION_FORKED anywhere."""
        if n == 1:
            self._session(obj, n)
        elif n == 2 and self.forked:
            if obj["type"] != ev.RUN_CREATED:
                raise FieldError(n, f"line 2 is {obj['type']}, not the RUN_CREATED that "
                                 "follows a fork's SESSION_FORKED")
        elif obj["type"] == ev.RUN_CREATED:
            raise FieldError(n, "a second RUN_CREATED: a log holds one session")
        elif obj["type"] == ev.SESSION_FORKED:
            raise FieldError(n, "SESSION_FORKED after line 1: only a fork's first line "
                             "names its parent")

    @staticmethod
    def _ts(ts: str, n: int) -> None:
        try:
            if TS_RE.fullmatch(ts) is None:
                raise ValueError("not of the form")
            datetime.fromisoformat(ts[:-1])
        except ValueError:
            raise FieldError(n, f"ts {ts!r} is not ISO 8601 UTC with microseconds "
                             "(YYYY-MM-DDTHH:MM:SS.ffffffZ, a real time)") from None

    def _event_id(self, obj: dict[str, Any], n: int) -> None:
        eid = obj["event_id"]
        m = EVENT_ID_RE.fullmatch(eid)
        if m is None:
            raise FieldError(n, f"event_id {eid!r} is not <Temporal run id>:"
                             "<history event id>:<n>")
        run, hev_text, k_text = m.groups()
        hev, k = int(hev_text), int(k_text)
        if run != self.run:
            self._new_run(run, eid, n)
        last_hev, last_k, last_line = self.last
        if last_line and (hev < last_hev or (hev == last_hev and k <= last_k)):
            what = f"repeats line {last_line}'s" if (hev, k) == (last_hev, last_k) else \
                f"goes back from line {last_line}'s {run}:{last_hev}:{last_k}"
            raise FieldError(n, f"event_id {eid!r} {what}: event ids are unique and in "
                             "history order")
        if k != (last_k + 1 if hev == last_hev else 0):
            raise FieldError(n, f"event_id {eid!r}: n counts 0, 1, ... per history "
                             "event (a line is missing or added)")
        self.last = (hev, k, n)
        self.next_id = f"{run}:{hev}:{k + 1}"  # what check() takes at once
        if obj["type"] == ev.RUN_CONTINUED_AS_NEW:
            self.continued_to = obj["payload"].get("new_temporal_run_id")

    def _new_run(self, run: str, eid: str, n: int) -> None:
        """Line ``n`` (``event_id`` ``eid``) is of Temporal run ``run``, not of the
        line before's: a run not seen before, named by the last RUN_CONTINUED_AS_NEW."""
        if run in self.runs_before:
            raise FieldError(n, f"event_id {eid!r}: Temporal run {run} again "
                             "after a later run (a repeated or moved line)")
        if self.run is not None and run != self.continued_to:
            raise FieldError(n, f"event_id {eid!r}: a new Temporal run without "
                             "the RUN_CONTINUED_AS_NEW that names it")
        if self.run is not None:
            self.runs_before.add(self.run)
        self.run, self.last = run, (0, 0, 0)

    def _output_of(self, call: Any, sha256: str) -> tuple[Any, int] | None:
        """``(output_hash, line)`` of call ``call``'s LLM_CALL_FINISHED before (the
        last), None if none; ``sha256``: what the artifact line says it is."""
        return self.outputs.get(call)

    def _artifact(self, obj: dict[str, Any], n: int) -> None:
        t, p = obj["type"], obj["payload"]
        if t == ev.LLM_CALL_FINISHED:
            if type(p.get("call_id")) is str:  # (a forged list or dict is no key)
                self.outputs[p["call_id"]] = (p.get("output_hash"), n)
        elif t == ev.ARTIFACT_WRITTEN:
            if type(p.get("path")) is not str or type(p.get("sha256")) is not str:
                raise FieldError(n, "ARTIFACT_WRITTEN without a path and sha256",
                                 "ARTIFACT_MISMATCH")
            if p.get("schema_id") != LLM_OUTPUT_SCHEMA:
                return
            call = p.get("call_id")
            found = self._output_of(call, p["sha256"]) if type(call) is str else None
            if found is None:
                raise FieldError(n, f"LLM artifact {p['path']} of call "
                                 f"{p.get('call_id')!r} follows no LLM_CALL_FINISHED "
                                 "of that call", "ARTIFACT_MISMATCH")
            if p["sha256"] != found[0]:
                raise FieldError(n, f"LLM artifact {p['path']}: its sha256 is not the "
                                 f"output_hash of LLM_CALL_FINISHED on line {found[1]}",
                                 "ARTIFACT_MISMATCH")
