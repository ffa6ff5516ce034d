"""What a stream may show while tokens arrive (``worker.predict.deltas``): its pieces join to the
final text, a stop string is cut and never shown, a possible start of one is held back until it
is decided, and a character split across tokens waits for its last byte."""

from __future__ import annotations

from worker.predict.deltas import TextDeltas


def _run(prefixes: list[str], stop: tuple[str, ...]) -> tuple[list[str], TextDeltas]:
    deltas = TextDeltas(stop)
    pieces = [deltas.update(text, final=False) for text in prefixes]
    pieces.append(deltas.update(prefixes[-1], final=True))
    return pieces, deltas


def test_a_stop_string_is_cut_and_its_start_held_back() -> None:
    pieces, deltas = _run(["The", "The an", "The answer\n", "The answer\n\nis"], ("\n\n",))
    assert pieces == ["The", " an", "swer", "", ""]  # the first "\n" waits: it may begin "\n\n"
    assert deltas.stopped and deltas.shown == "The answer"


def test_a_held_start_that_is_not_a_stop_string_is_shown() -> None:
    pieces, deltas = _run(["a", "a\n", "a\nb"], ("\n\n",))
    assert pieces == ["a", "", "\nb", ""]
    assert "".join(pieces) == deltas.shown == "a\nb" and not deltas.stopped


def test_a_split_character_waits_for_its_last_byte() -> None:
    pieces, deltas = _run(["caf", "caf\ufffd", "café", "café!"], ())
    assert pieces == ["caf", "", "é", "!", ""]
    assert "".join(pieces) == deltas.shown


def test_the_earliest_of_several_stop_strings_wins() -> None:
    _, deltas = _run(["x END y STOP"], ("STOP", "END"))
    assert deltas.shown == "x " and deltas.stopped


def test_without_stop_strings_everything_is_shown_at_the_end() -> None:
    pieces, deltas = _run(["one", "one two"], ())
    assert "".join(pieces) == deltas.shown == "one two" and not deltas.stopped
