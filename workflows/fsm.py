"""A transition table declared once as data, and everything derived from it.

Both the contract FSM (seed 001) and the session statechart (seed 004) are
instances of :class:`TransitionTable`. Validation (:meth:`TransitionTable.target`),
the topology (:func:`derive_topology`), the forbidden-transition list and the
docs are all computed from the same rows, so they cannot drift apart.

Pure: no Temporal, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

S = TypeVar("S", bound=StrEnum)
T = TypeVar("T", bound=StrEnum)


class InvalidTransitionError(ValueError):
    """A (state, trigger) pair that the table does not allow. Nothing changed."""

    def __init__(self, machine: str, state: str, trigger: str, allowed: Iterable[str]) -> None:
        self.machine = machine
        self.state = state
        self.trigger = trigger
        self.allowed = sorted(allowed)
        hint = ", ".join(self.allowed) if self.allowed else "none: the state is terminal"
        super().__init__(
            f"{machine}: trigger {trigger!r} is not allowed in state {state!r} "
            f"(allowed triggers: {hint})"
        )


@dataclass(frozen=True)
class Edge(Generic[S, T]):
    """One row of a table: in ``source``, ``trigger`` leads to ``target``.

    ``guard`` names a policy predicate (see :class:`TransitionTable.guards`); an
    edge with a guard exists only where its policy allows it.
    """

    source: S
    trigger: T
    target: S
    guard: str | None = None
    doc: str = ""


@dataclass(frozen=True)
class TransitionTable(Generic[S, T]):
    """A finite-state machine as data."""

    name: str
    states: type[S]
    triggers: type[T]
    initial: S
    terminal: frozenset[S]
    stable: frozenset[S]
    resumable: frozenset[S]
    edges: tuple[Edge[S, T], ...]
    guards: dict[str, Callable[[object], bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: set[tuple[S, T]] = set()
        for edge in self.edges:
            if edge.source in self.terminal:
                raise ValueError(f"{self.name}: terminal state {edge.source} has an outbound edge")
            if (edge.source, edge.trigger) in seen:
                raise ValueError(f"{self.name}: {edge.source}/{edge.trigger} declared twice")
            if edge.guard is not None and edge.guard not in self.guards:
                raise ValueError(f"{self.name}: unknown guard {edge.guard!r}")
            seen.add((edge.source, edge.trigger))

    def edge(self, state: S, trigger: T, policy: object = None) -> Edge[S, T] | None:
        for candidate in self.edges:
            if candidate.source == state and candidate.trigger == trigger:
                if candidate.guard is None or self.guards[candidate.guard](policy):
                    return candidate
                return None
        return None

    def allowed_triggers(self, state: S, policy: object = None) -> list[T]:
        return [
            e.trigger
            for e in self.edges
            if e.source == state and (e.guard is None or self.guards[e.guard](policy))
        ]

    def target(self, state: S, trigger: T | str, policy: object = None) -> S:
        """The state that ``trigger`` leads to from ``state``, or raise."""
        try:
            trig = self.triggers(trigger)
        except ValueError:
            raise InvalidTransitionError(
                self.name, str(state), str(trigger), self.allowed_triggers(state, policy)
            ) from None
        found = self.edge(state, trig, policy)
        if found is None:
            raise InvalidTransitionError(
                self.name, str(state), str(trig), self.allowed_triggers(state, policy)
            )
        return found.target

    def is_terminal(self, state: S) -> bool:
        return state in self.terminal


class TopologyNode(BaseModel):
    model_config = ConfigDict(frozen=True)
    status: str
    is_terminal: bool
    is_initial: bool
    is_stable: bool
    is_resumable: bool


class TopologyEdge(BaseModel):
    model_config = ConfigDict(frozen=True)
    from_status: str
    to_status: str
    trigger: str
    guard: str | None = None


class ForbiddenTransition(BaseModel):
    model_config = ConfigDict(frozen=True)
    from_status: str
    to_status: str
    reason: str


class StateMachineTopology(BaseModel):
    """Seed 000's StateMachineTopology, for any table."""

    model_config = ConfigDict(frozen=True)
    machine: str
    nodes: list[TopologyNode]
    edges: list[TopologyEdge]
    forbidden_transitions: list[ForbiddenTransition]
    initial_status: str
    terminal_statuses: list[str]
    stable_statuses: list[str]
    resumable_statuses: list[str]


def _forbidden_reason(table: TransitionTable, source: StrEnum, target: StrEnum) -> str:
    if source in table.terminal:
        return f"{source} is terminal: no transition leaves it"
    if target == table.initial:
        return f"{target} is the initial state: nothing returns to it"
    via = [f"{e.trigger} -> {e.target}" for e in table.edges if e.source == source]
    return f"no trigger leads from {source} to {target}; from {source} only: " + ", ".join(via)


def derive_topology(table: TransitionTable) -> StateMachineTopology:
    """The topology of ``table``: nodes, valid edges and every forbidden pair."""
    states = list(table.states)
    allowed = {(e.source, e.target) for e in table.edges}
    return StateMachineTopology(
        machine=table.name,
        nodes=[
            TopologyNode(
                status=str(s),
                is_terminal=s in table.terminal,
                is_initial=s == table.initial,
                is_stable=s in table.stable,
                is_resumable=s in table.resumable,
            )
            for s in states
        ],
        edges=[
            TopologyEdge(
                from_status=str(e.source), to_status=str(e.target), trigger=str(e.trigger),
                guard=e.guard,
            )
            for e in table.edges
        ],
        forbidden_transitions=[
            ForbiddenTransition(
                from_status=str(a), to_status=str(b), reason=_forbidden_reason(table, a, b)
            )
            for a in states
            for b in states
            if a != b and (a, b) not in allowed
        ],
        initial_status=str(table.initial),
        terminal_statuses=[str(s) for s in states if s in table.terminal],
        stable_statuses=[str(s) for s in states if s in table.stable],
        resumable_statuses=[str(s) for s in states if s in table.resumable],
    )


def render_markdown(table: TransitionTable) -> str:
    """The table as a Markdown section: the docs are generated, never hand-written."""
    topo = derive_topology(table)
    lines = [f"## {table.name}", "", "| state | initial | terminal | stable | resumable |",
             "| --- | --- | --- | --- | --- |"]
    yes = {True: "yes", False: ""}
    for n in topo.nodes:
        lines.append(
            f"| `{n.status}` | {yes[n.is_initial]} | {yes[n.is_terminal]} | "
            f"{yes[n.is_stable]} | {yes[n.is_resumable]} |"
        )
    lines += ["", "| from | trigger | to | guard | why |", "| --- | --- | --- | --- | --- |"]
    for e in table.edges:
        lines.append(
            f"| `{e.source}` | `{e.trigger}` | `{e.target}` | {e.guard or ''} | {e.doc} |"
        )
    lines += ["", "Forbidden (every other pair of distinct states):", ""]
    lines += [f"- `{f.from_status}` -> `{f.to_status}`: {f.reason}"
              for f in topo.forbidden_transitions]
    return "\n".join(lines) + "\n"
