"""first_line: what of an exception goes into a one-line error message."""

from __future__ import annotations

from esper.messages import first_line


def test_the_first_non_blank_line_is_taken_and_long_ones_end_at_a_word() -> None:
    error = RuntimeError("\n  Error(s) in loading state_dict for Net:\n\tsize mismatch for w")
    assert first_line(error) == "Error(s) in loading state_dict for Net:"
    assert first_line(error, 20) == "Error(s) in loading ..."
    assert first_line(ValueError("a" * 30), 10) == "a" * 10 + " ..."  # no space to cut at: the limit holds


def test_an_empty_message_falls_back_to_the_type_name_or_the_given_text() -> None:
    assert first_line(EOFError()) == "EOFError"
    assert first_line(EOFError(), fallback="") == ""
