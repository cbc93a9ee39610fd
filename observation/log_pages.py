"""Pages of a session's past: the log's fold overlaid by the live query (pure).

The log holds the past and trails the workflow by a moment; the live query
knows only the current run but is fresher (a client that replied and then reads
must see its reply). So each list is the log's, with the live entries it has not
reached yet appended, and contracts the live query knows replaced by its view.
Entries only ever append, so an offset into that list is a stable page cursor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from observation.log_view import SessionLogView
from observation.projections import (
    ExecutionFact,
    ExecutionSnapshot,
    at_reader_clock,
    execution_snapshot,
    has_suspended,
    merge_transitions,
)
from workflows.contract import CONTRACT_TABLE, ExecutionContract, ExecutionStatus, TransitionRecord
from workflows.session_state import StatusChange

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    # Where the next page starts; None on the last page.
    next_offset: int | None


@dataclass(frozen=True)
class ContractPage(Page[ExecutionSnapshot]):
    terminal: int = 0
    active: int = 0
    has_suspended: bool = False
    # The transitions of the contracts on this page, by time.
    transitions: tuple[TransitionRecord, ...] = ()


def _window(logged: Sequence[T], extra: Sequence[T], offset: int, limit: int) -> list[T]:
    """``(logged + extra)[offset:offset + limit]`` without copying either list."""
    head = list(logged[offset:offset + limit])
    start = max(0, offset - len(logged))
    return head + list(extra[start:start + limit - len(head)])


def _next(offset: int, count: int, total: int) -> int | None:
    return offset + count if offset + count < total else None


def contract_page(
    view: SessionLogView | None, live: Sequence[ExecutionSnapshot], offset: int, limit: int,
    now: datetime, live_transitions: Sequence[TransitionRecord] | None = None,
) -> ContractPage:
    """Contracts in creation order, snapshots built only for the page."""
    logged = view.contracts if view is not None else []
    index = view.index if view is not None else {}
    fresh = {s.execution_id: s for s in live}
    extra = [s for s in live if s.execution_id not in index]
    window: list[ExecutionContract | ExecutionSnapshot] = _window(logged, extra, offset, limit)
    # Live snapshots carry workflow.now()'s duration (it stands still while the
    # workflow waits): every one is served at the reader's clock.
    items = [at_reader_clock(fresh[c.execution_id], now) if c.execution_id in fresh
             else execution_snapshot(c, now) if isinstance(c, ExecutionContract)
             else at_reader_clock(c, now) for c in window]
    counts: Counter[ExecutionStatus] = Counter(view.statuses) if view is not None else Counter()
    for s in live:
        i = index.get(s.execution_id)
        if i is not None:
            counts[logged[i].status] -= 1
        counts[s.current_status] += 1
    terminal = sum(n for status, n in counts.items() if status in CONTRACT_TABLE.terminal)
    total = len(logged) + len(extra)
    by_id: dict[str, list[TransitionRecord]] = {}
    for t in live_transitions or ():
        by_id.setdefault(t.execution_id, []).append(t)
    transitions = merge_transitions(
        by_id.get(c.execution_id, []) if c.execution_id in fresh
        else c.transitions if isinstance(c, ExecutionContract) else [] for c in window)
    # Seed 000's has_suspended: some contract went through WAITING (logged or live).
    suspended = (has_suspended(logged)
                 or any(s.current_status == ExecutionStatus.WAITING for s in live)
                 or any(t.to_status == ExecutionStatus.WAITING for t in live_transitions or ()))
    return ContractPage(
        items=items, total=total, next_offset=_next(offset, len(items), total),
        terminal=terminal, active=total - terminal,
        has_suspended=suspended, transitions=tuple(transitions))


def fact_page(view: SessionLogView | None, live: Sequence[ExecutionFact], offset: int,
              limit: int) -> Page[ExecutionFact]:
    logged = view.facts if view is not None else []
    seen = view.fact_ids if view is not None else set()
    extra = [f for f in live if f.execution_id not in seen]  # facts never change
    items = _window(logged, extra, offset, limit)
    total = len(logged) + len(extra)
    return Page(items=items, total=total, next_offset=_next(offset, len(items), total))


def history_tail(logged: Sequence[StatusChange], live: Sequence[StatusChange]
                 ) -> list[StatusChange]:
    """The live status changes the log has not reached yet.

    ``live`` is a suffix of the whole history (the current run's, or all of it) and
    the log a prefix. Changes have no id, and those made in one workflow task share
    their time: so the live ones at the log's last time are counted, not compared.
    """
    if not logged:
        return list(live)
    last = logged[-1].at
    tied = 0
    for change in reversed(logged):
        if change.at != last:
            break
        tied += 1
    return [c for c in live if c.at == last][tied:] + [c for c in live if c.at > last]


def history_page(view: SessionLogView | None, live: Sequence[StatusChange], offset: int,
                 limit: int) -> Page[StatusChange]:
    logged = view.history if view is not None else []
    extra = history_tail(logged, live)
    items = _window(logged, extra, offset, limit)
    total = len(logged) + len(extra)
    return Page(items=items, total=total, next_offset=_next(offset, len(items), total))
