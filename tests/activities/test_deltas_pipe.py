"""The pipe between ``up``'s worker process and its API: what the worker publishes is
what the API's bus holds, a full pipe never garbles a text, and lines that are not
deltas change nothing."""

from __future__ import annotations

import logging
import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from activities.deltas import InProcessDeltaBus
from activities.deltas.pipe import PIECE_CHARS, PipeDeltaBus, replay_line


def read_all(fd: int) -> list[bytes]:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).splitlines(keepends=True)


def through_pipe(publish: list[tuple[str, bool]], *, end: bool = False
                 ) -> tuple[InProcessDeltaBus, list[str]]:
    """Publish ``(delta, first)`` pieces of one call into a real pipe, close it, and
    replay what came out into a fresh bus."""
    r, w = os.pipe()
    sender = PipeDeltaBus(w)
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(read_all(r)))
    reader.start()
    for delta, first in publish:
        sender.publish("s1", "c1", delta, first=first)
    sender.ready("worker-1")
    if end:
        sender.finish("s1", "c1")
    sender.close()
    reader.join(10)
    os.close(r)
    bus, ready = InProcessDeltaBus(), []
    for line in lines:
        replay_line(line, bus, ready.append)
    return bus, ready


@given(st.lists(st.tuples(st.text(max_size=40), st.booleans()), max_size=12))
def test_the_api_holds_the_text_the_worker_published(pieces: list[tuple[str, bool]]) -> None:
    expected = ""
    for delta, first in pieces:
        expected = ("" if first else expected) + delta
    bus, ready = through_pipe(pieces)
    assert ready == ["worker-1"]
    assert bus.writing("s1") == ({"c1": expected} if pieces else {})


def test_a_long_piece_is_cut_and_joined_again_and_the_end_clears_the_call() -> None:
    long = "x" * (PIECE_CHARS * 2 + 5)
    bus, _ = through_pipe([(long, True)])
    assert bus.writing("s1") == {"c1": long}
    bus, _ = through_pipe([(long, True)], end=True)
    assert bus.writing("s1") == {}


def test_a_full_pipe_drops_pieces_then_sends_the_whole_text() -> None:
    r, w = os.pipe()
    sender = PipeDeltaBus(w, queue_lines=1)
    os.set_blocking(r, True)
    # Nobody reads: the pipe's buffer and the one-line queue fill, later pieces drop.
    pieces = [f"piece {i:05d} " + "y" * 4000 for i in range(40)]
    for i, piece in enumerate(pieces):
        sender.publish("s1", "c1", piece, first=i == 0)
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(read_all(r)))
    reader.start()
    sender.flush()
    sender.publish("s1", "c1", "the end")  # there is room again: it goes as a snapshot
    sender.close()
    reader.join(10)
    os.close(r)
    bus = InProcessDeltaBus()
    for line in lines:
        replay_line(line, bus)
    assert len(lines) < len(pieces)  # some were dropped...
    assert bus.writing("s1") == {"c1": "".join(pieces) + "the end"}  # ...but none lost


@pytest.mark.parametrize("line", [
    b"", b"not json\n", b"[1, 2]\n", b'{"s": "s1"}\n', b'{"s": "s1", "c": "c1"}\n',
    b'{"end": true}\n', b"\xff\xfe\n", b'{"s": "s1", "c": "c1", "d": 5}\n'])
def test_a_line_that_is_not_a_delta_changes_nothing(line: bytes,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    bus = InProcessDeltaBus()
    bus.publish("s1", "c1", "kept", first=True)
    with caplog.at_level(logging.WARNING, logger="hitlflow.deltas"):
        replay_line(line, bus)
    assert bus.writing("s1") == {"c1": "kept"}
    assert "not a delta" in caplog.text


def test_a_closed_pipe_makes_publishing_a_no_op(caplog: pytest.LogCaptureFixture) -> None:
    r, w = os.pipe()
    os.close(r)
    sender = PipeDeltaBus(w)
    with caplog.at_level(logging.WARNING, logger="hitlflow.deltas"):
        sender.publish("s1", "c1", "lost", first=True)
        sender.close()  # does not hang or raise
    sender.publish("s1", "c1", "after")  # nobody reads any more: nothing happens
    assert "cannot be written to up" in caplog.text
