"""What the agent says, printed as it is written (``hitlflow demo``, ``session tail``).

The SSE stream carries ``text.delta`` events while the model writes (ephemeral, no
id), then the call's ``text`` event from the log. The pieces print on one line as
they come; the ``text`` event completes that line, or prints it whole when no piece
came (a provider that does not stream, a client that connected after the answer).
Any other event closes the open line first, so lines never interleave.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape


class AgentText:
    def __init__(self, console: Console, prefix: str) -> None:
        self.console, self.prefix = console, prefix
        self.texts: dict[str, str] = {}  # call id -> its text so far (deltas)
        self.said: set[str] = set()  # calls whose final text was printed
        self.open: str | None = None  # the call whose line is being written
        self.shown = ""  # what that line shows after the prefix

    def delta(self, payload: dict[str, Any]) -> None:
        """A ``text.delta``: ``{"call_id", "delta", "text"?}`` (``text`` replaces)."""
        call_id = payload.get("call_id")
        if not isinstance(call_id, str) or call_id in self.said:
            return
        text = payload.get("text")
        if not isinstance(text, str):
            text = self.texts.get(call_id, "") + str(payload.get("delta") or "")
        self.texts[call_id] = text
        if text:
            self._show(call_id, text)

    def final(self, payload: dict[str, Any]) -> None:
        """The call's ``text`` event (the whole text, as the log has it)."""
        call_id, text = payload.get("call_id"), str(payload.get("text") or "")
        call_id = call_id if isinstance(call_id, str) else ""
        self.said.add(call_id)
        self.texts.pop(call_id, None)
        if call_id == self.open:
            self._show(call_id, text)
        elif text:
            self.close()
            self._show(call_id, text)
        self.close()

    def close(self) -> None:
        """End the open line (another event is about to print)."""
        if self.open is not None:
            self.console.print()
        self.open, self.shown = None, ""

    def _show(self, call_id: str, text: str) -> None:
        if self.open is None or self.open != call_id or not text.startswith(self.shown):
            self.close()  # a new call, or a text that replaces what was shown
            self.console.print(self.prefix, end="", soft_wrap=True)
            self.open = call_id
        piece, self.shown = text[len(self.shown):], text
        if piece:
            self.console.print(escape(piece), end="", soft_wrap=True)
