"""The one table of log event types (observation/event_types.py) agrees with what
depends on it: the shipped event schema, the workflow's journal kinds, the journal
mapper, and the three folds over a log."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from observation import event_types as ev
from observation.exporter import MappingError, map_history
from observation.exporter.decode import load_history
from observation.exporter.journal import JournalMapper, handler_name
from observation.exporter.snapshot import LogSnapshot
from observation.log_view import SessionLogView
from observation.schemas import load
from observation.telemetry.project import TelemetryProjector
from workflows.plan import PLAN_EVENT_TYPES
from workflows.session_state import JournalKind

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"


def test_every_name_is_declared_once():
    names = [t.name for t in ev.EVENT_TYPES]
    assert len(names) == len(set(names))
    assert set(PLAN_EVENT_TYPES) <= set(names)


def test_the_table_names_the_schema_of_every_type_the_event_schema_checks():
    schema = load("event")
    checked = {rule["if"]["properties"]["type"]["const"]:
               rule["then"]["properties"]["payload"]["$ref"].removeprefix("#/$defs/")
               for rule in schema["allOf"]}
    assert checked == {t.name: t.schema for t in ev.EVENT_TYPES if t.schema}
    assert set(checked.values()) == set(schema["$defs"])


def test_every_journal_kind_has_a_lead_and_a_mapping():
    assert set(ev.JOURNAL_KINDS) == set(get_args(JournalKind))
    for kind in ev.JOURNAL_KINDS:
        assert callable(getattr(JournalMapper, handler_name(kind), None)), kind


def test_a_lead_type_belongs_to_one_journal_kind():
    seen = [t for lead in ev.JOURNAL_KINDS.values() for t in lead.types]
    assert len(seen) == len(set(seen))
    assert not ev.is_journal_lead(ev.ISSUE_RESOLVED, {"resolution": "interaction.reply.expired"})
    assert ev.is_journal_lead(ev.ISSUE_RESOLVED, {"resolution": "answered"})


@pytest.mark.parametrize("fold", [LogSnapshot, SessionLogView, TelemetryProjector])
def test_a_fold_dispatches_only_declared_types_in_the_table_order(fold):
    order = [t.name for t in ev.EVENT_TYPES]
    assert list(fold.handlers) == [t for t in order if t in fold.handlers]
    assert fold.handlers


def test_a_fold_of_an_unknown_type_is_refused_when_declared():
    with pytest.raises(TypeError, match="not a log event type"):
        class _Bad(ev.LogFold):
            @ev.folds("NO_SUCH_TYPE")
            def _nothing(self, p: dict) -> None: ...


def test_the_mapper_refuses_a_journal_entry_that_makes_a_second_lead(monkeypatch):
    """Read-your-writes counts leads: an entry that made two would count twice."""
    original = JournalMapper._j_contract_created

    def two_leads(self, d, at):
        original(self, d, at)
        self.emit(ev.MESSAGE, {"text": "", "at": at})

    monkeypatch.setattr(JournalMapper, "_j_contract_created", two_leads)
    sid, events = load_history((HISTORIES / "demo.json").read_text())
    with pytest.raises(MappingError, match=r"\(contract\.created\)"):
        map_history(sid, events)
