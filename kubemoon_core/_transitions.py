"""Transition tables: the states, inputs and moves of a state machine, as data.

Rules: every machine of the core with states (the reflector, the leader elector, a shard
member and its ranges, the discovery walk) keeps its moves in one :class:`TransitionTable`
built at import and never changed, and publishes it through a ``transitions()`` classmethod
(:class:`~kubemoon_core.sharding.ShardMember` has a second, ``range_transitions()``). A
machine asks the table for every move it makes; a ``(state, input)`` pair the table lacks
raises :class:`AssertionError` naming the machine, the state and the input: the machine fed
itself an input it has no move for, a bug of the machine, never the caller's mistake (each
public method checks its caller first). The docs' state diagrams are generated from these
tables (``scripts/state_diagrams.py``). Pure data: no I/O, no time.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["Transition", "TransitionTable"]

S = TypeVar("S", bound=enum.Enum)
I = TypeVar("I", bound=enum.Enum)  # noqa: E741 - the input type, beside S for the state


@dataclass(frozen=True, slots=True)
class Transition(Generic[S, I]):
    """One edge of a :class:`TransitionTable`: in ``source``, ``input`` moves the machine to
    ``target``. ``target`` None means the subject leaves the machine (a shard range no
    longer claimed). ``action`` says in words what else the edge does (when the leader's
    next request is due, say); empty when the move is all it does."""

    source: S
    input: I
    target: S | None
    action: str = ""

    @property
    def label(self) -> str:
        """The edge's label in a diagram: the input's description and the action, if any."""
        text = str(self.input.value)
        return f"{text} / {self.action}" if self.action else text


class TransitionTable(Mapping[tuple[S, I], Transition[S, I]], Generic[S, I]):
    """A machine's transition table: a read-only mapping ``(state, input) -> Transition``.

    Iterating gives the ``(state, input)`` keys in the order the machine's source lists
    them; :attr:`edges` gives the transitions. Get one with a machine's ``transitions()``
    classmethod, for example ``Reflector.transitions()``.
    """

    __slots__ = ("_edges", "_initial", "_inputs", "_machine")

    def __init__(
        self, machine: str, initial: S, inputs: type[I], edges: Iterable[Transition[S, I]]
    ) -> None:
        table: dict[tuple[S, I], Transition[S, I]] = {}
        for edge in edges:
            key = (edge.source, edge.input)
            if key in table:
                raise ValueError(f"{machine}: two transitions from {key[0].name} on {key[1].name}")
            table[key] = edge
        self._machine = machine
        self._initial = initial
        self._inputs = inputs
        self._edges = table

    @classmethod
    def from_targets(
        cls,
        machine: str,
        initial: S,
        inputs: type[I],
        targets: Mapping[tuple[S, I], S | None],
        actions: Mapping[tuple[S, I], str] | None = None,
    ) -> TransitionTable[S, I]:
        """A table from a mapping ``(state, input) -> target`` and optional action labels."""
        actions = actions or {}
        return cls(
            machine,
            initial,
            inputs,
            (Transition(s, i, t, actions.get((s, i), "")) for (s, i), t in targets.items()),
        )

    @property
    def machine(self) -> str:
        """The machine's name (the class that drives it)."""
        return self._machine

    @property
    def initial(self) -> S:
        """The state a new machine starts in."""
        return self._initial

    @property
    def states(self) -> tuple[S, ...]:
        """Every state of the machine, in the order its enum declares them."""
        return tuple(type(self._initial))

    @property
    def inputs(self) -> tuple[I, ...]:
        """Every input of the machine, in the order its enum declares them."""
        return tuple(self._inputs)

    @property
    def edges(self) -> tuple[Transition[S, I], ...]:
        """Every transition, in the table's order."""
        return tuple(self._edges.values())

    def __getitem__(self, key: tuple[S, I]) -> Transition[S, I]:
        return self._edges[key]

    def __iter__(self) -> Iterator[tuple[S, I]]:
        return iter(self._edges)

    def __len__(self) -> int:
        return len(self._edges)

    def __repr__(self) -> str:
        return f"<TransitionTable {self._machine}: {len(self._edges)} transitions>"

    def step(self, state: S, event: I) -> Transition[S, I]:
        """The transition from ``state`` on ``event``; AssertionError (naming the machine,
        the state and the input) when the table has none."""
        edge = self._edges.get((state, event))
        if edge is None:
            raise AssertionError(
                f"{self._machine}: no transition from {state.name} on {event.name}"
            )
        return edge

    def diagram(self) -> str:
        """The table as a Mermaid ``stateDiagram-v2``: one line per transition, in order,
        after the initial state's; a transition to None ends at ``[*]``."""
        lines = ["stateDiagram-v2", f"    [*] --> {self._initial.name}"]
        for edge in self._edges.values():
            target = "[*]" if edge.target is None else edge.target.name
            lines.append(f"    {edge.source.name} --> {target}: {edge.label}")
        return "\n".join(lines) + "\n"


class _Deprecated:
    """A class attribute kept for one release: reading it warns and names its successor."""

    def __init__(self, value: Any, successor: str) -> None:
        self._value = value
        self._successor = successor
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        where = owner.__name__ if owner is not None else type(instance).__name__
        warnings.warn(
            f"{where}.{self._name} is deprecated; use {self._successor} "
            "(the old name works until KubeMoon 1.1)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._value
