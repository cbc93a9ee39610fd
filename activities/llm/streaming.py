"""A call's text as it streams: to the worker's ``DeltaBus`` (``activities.deltas``),
with heartbeats (details: the call id and the characters received so far) while it
does. The deltas never reach the history: the result carries the whole text."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

from activities.deltas import DeltaBus
from workflows.io import LLMCallInput

#: How much of a call's text the writer keeps for a cut (``llm_cut_text``).
KEEP_CHARS = 4000
#: Seconds between two heartbeats of a call being streamed (the SDK throttles too).
HEARTBEAT_EVERY_S = 1.0
#: Seconds between two heartbeats while nothing streams (the workflow's heartbeat
#: timeout, ``workflows.activity_calls.LLM_HEARTBEAT``, is 30 s).
TICK_EVERY_S = 5.0


class StreamWriter:
    """One call's text as it is written: to the bus, with heartbeats."""

    def __init__(self, bus: DeltaBus, input: LLMCallInput) -> None:
        self.bus, self.session_id, self.call_id = bus, input.session_id, input.call_id
        self.chars, self._first, self._beat_at = 0, True, -HEARTBEAT_EVERY_S
        self._pieces: list[str] = []  # the attempt's text so far (a cut call keeps it)
        self._kept = 0

    def text(self, piece: str | None) -> None:
        if piece:
            self.bus.publish(self.session_id, self.call_id, piece, first=self._first)
            self._first = False
            self.chars += len(piece)
            if self._kept < KEEP_CHARS:
                self._pieces.append(piece)
                self._kept += len(piece)
        self.beat()

    def so_far(self) -> str:
        """The text streamed so far (its first ``KEEP_CHARS`` characters at least)."""
        return "".join(self._pieces)

    async def tick(self) -> None:
        """Heartbeats while no piece comes (the wait for the first token)."""
        while True:
            await asyncio.sleep(TICK_EVERY_S)
            self.beat()

    def beat(self) -> None:
        now = time.monotonic()
        if now - self._beat_at >= HEARTBEAT_EVERY_S:
            self._beat_at = now
            activity.heartbeat({"call_id": self.call_id, "chars": self.chars})


@dataclass
class StreamedCompletion:
    """A streamed completion put back together from its chunks."""

    text: str | None = None
    refusal: str | None = None
    calls: dict[int, list[Any]] = field(default_factory=dict)  # index -> [id, type, name, args]
    finish_reason: str | None = None
    usage: Any = None
    model: str | None = None
    choices: int = 0

    def add(self, chunk: Any) -> str | None:
        """Takes one chunk in; returns its new text (what streams to the bus)."""
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        if not chunk.choices:
            return None
        self.choices += 1
        choice = chunk.choices[0]
        self.finish_reason = choice.finish_reason or self.finish_reason
        delta = choice.delta
        if delta.refusal:
            self.refusal = (self.refusal or "") + delta.refusal
        for call in delta.tool_calls or []:
            slot = self.calls.setdefault(call.index, [None, None, None, None])
            slot[0] = call.id or slot[0]
            slot[1] = call.type or slot[1]
            if call.function is not None:
                slot[2] = call.function.name or slot[2]
                if call.function.arguments is not None:
                    slot[3] = (slot[3] or "") + call.function.arguments
        if delta.content is not None:
            self.text = (self.text or "") + delta.content
        return delta.content
