"""The messages a delta bus between processes sends (the pipe's JSON lines,
PostgreSQL's ``NOTIFY`` payloads), and their replay into an in-process bus."""

from __future__ import annotations

from typing import Any

from activities.deltas.bus import InProcessDeltaBus

__all__ = ["apply_wire", "wire_end", "wire_messages"]


def wire_messages(session_id: str, call_id: str, delta: str, first: bool,
                  piece_chars: int) -> list[dict[str, Any]]:
    """A published piece as the messages a bus between processes sends (pipe,
    ``NOTIFY``): cut to at most ``piece_chars`` characters each, ``first`` on the first."""
    pieces = [delta[i:i + piece_chars] for i in range(0, len(delta), piece_chars)]
    return [{"s": session_id, "c": call_id, "d": piece, "f": first and i == 0}
            for i, piece in enumerate(pieces or [""])]


def wire_end(session_id: str, call_id: str) -> dict[str, Any]:
    """The message that says a call ended."""
    return {"s": session_id, "c": call_id, "end": True}


def apply_wire(bus: InProcessDeltaBus, message: Any) -> None:
    """Replay one message of :func:`wire_messages`/:func:`wire_end` into ``bus``;
    raises KeyError, TypeError or AttributeError for anything else."""
    if message.get("end"):
        bus.finish(message["s"], message["c"])
    else:
        bus.publish(message["s"], message["c"], message["d"], first=bool(message.get("f")))
