"""What the agent says, printed as it is written: pieces on one line, completed by the
call's text, never interleaved with other lines, never printed twice."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from api.cli.text import AgentText


def printer(width: int = 20) -> tuple[AgentText, io.StringIO]:
    out = io.StringIO()
    return AgentText(Console(file=out, highlight=False, width=width), "agent: "), out


def test_pieces_then_the_final_text_make_one_line():
    text, out = printer()
    text.delta({"call_id": "c1", "delta": "Hello ", "text": "Hello "})
    text.delta({"call_id": "c1", "delta": "there, a long line that does not wrap"})
    text.final({"call_id": "c1", "text": "Hello there, a long line that does not wrap"})
    text.delta({"call_id": "c1", "delta": " late"})  # after its text: dropped
    assert out.getvalue() == "agent: Hello there, a long line that does not wrap\n"


def test_a_final_text_without_pieces_prints_whole_and_markup_stays_text():
    text, out = printer()
    text.final({"call_id": "c1", "text": "[bold]x[/bold]"})
    text.final({"call_id": "c2", "text": ""})  # only tool calls: nothing
    text.final({"text": "no call id"})
    assert out.getvalue() == "agent: [bold]x[/bold]\nagent: no call id\n"


def test_a_mid_answer_text_replaces_and_a_different_final_reprints():
    text, out = printer()
    text.delta({"call_id": "c1", "delta": "ab"})
    text.delta({"call_id": "c1", "delta": "", "text": "xyz"})  # replaces what was shown
    text.final({"call_id": "c1", "text": "xyz!"})
    assert out.getvalue() == "agent: ab\nagent: xyz!\n"


def test_another_event_closes_the_line_and_a_second_call_starts_its_own():
    text, out = printer()
    text.delta({"call_id": "c1", "delta": "one"})
    text.close()
    text.close()  # nothing open: nothing printed
    text.delta({"call_id": "c2", "delta": "two"})
    text.final({"call_id": "c2", "text": "two"})
    assert out.getvalue() == "agent: one\nagent: two\n"


def test_broken_deltas_print_nothing():
    text, out = printer()
    text.delta({"delta": "no call"})
    text.delta({"call_id": 3, "delta": "bad id"})
    text.close()
    assert out.getvalue() == ""


@given(st.lists(st.text(alphabet="ab[]/ \u00e9", max_size=6), max_size=8))
def test_however_the_text_is_cut_the_line_is_the_text(pieces: list[str]):
    text, out = printer()
    for piece in pieces:
        text.delta({"call_id": "c", "delta": piece})
    whole = "".join(pieces)
    text.final({"call_id": "c", "text": whole})
    assert out.getvalue() == (f"agent: {whole}\n" if whole else "")
