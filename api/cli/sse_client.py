"""Server-sent events as the command line reads them (``session tail``, ``demo``; the
tests and benches read the service's streams with it too): a line parser after the
WHATWG rules the service's frames follow (``api.http.sse``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class SseMessage:
    event: str = "message"
    data: str = ""
    id: str | None = None

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


class SseParser:
    """Feed lines (without their line ending); get complete messages back."""

    def __init__(self) -> None:
        self._event, self._data, self._id = "", [], None
        self.last_id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, line: str) -> SseMessage | None:
        if line == "":
            if not self._data and not self._event:
                return None
            msg = SseMessage(event=self._event or "message", data="\n".join(self._data),
                             id=self._id)
            self._event, self._data, self._id = "", [], None
            return msg
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = self.last_id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None


def parse_lines(lines: Iterable[str], parser: SseParser | None = None) -> Iterator[SseMessage]:
    parser = parser or SseParser()
    for line in lines:
        msg = parser.feed(line.rstrip("\r\n"))
        if msg is not None:
            yield msg


async def aparse_lines(lines: AsyncIterator[str], parser: SseParser | None = None
                       ) -> AsyncIterator[SseMessage]:
    parser = parser or SseParser()
    async for line in lines:
        msg = parser.feed(line.rstrip("\r\n"))
        if msg is not None:
            yield msg
