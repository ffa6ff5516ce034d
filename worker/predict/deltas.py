"""The text a client may be shown while tokens arrive (pure Python, tested on its own).

Each update gets the whole text decoded so far. A stop string ends it, and is not shown (OpenAI's
rule). Until the end, two things are held back: the longest tail that could still become a stop
string, and a trailing U+FFFD (a character whose bytes are split across tokens). What was shown
is never taken back, so the pieces of a stream join to exactly the final text.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


class TextDeltas:
    def __init__(self, stop: tuple[str, ...]) -> None:
        self.stop = tuple(s for s in stop if s)
        self.shown = ""
        self.stopped = False
        self.holding = False  # some text is held back now

    def update(self, text: str, *, final: bool) -> str:
        """The part of ``text`` newly safe to show."""
        if self.stopped:
            return ""
        visible, self.holding = text, False
        cut = self._first_stop(text)
        if cut is not None:
            visible, self.stopped = text[:cut], True
        elif not final:
            kept = len(visible.rstrip(REPLACEMENT))
            kept -= self._stop_prefix(visible[:kept])
            self.holding = kept < len(visible)
            visible = visible[:kept]
        if len(visible) <= len(self.shown) or not visible.startswith(self.shown):
            return ""  # nothing new (a decode can change its last characters as bytes arrive)
        delta = visible[len(self.shown) :]
        self.shown = visible
        return delta

    def _first_stop(self, text: str) -> int | None:
        # A stop string can only start where unseen text could make it: after what was shown,
        # less its own length (a stop string that began in held-back text).
        found = [i for s in self.stop if (i := text.find(s, self._search_from(s))) >= 0]
        return min(found) if found else None

    def _search_from(self, stop: str) -> int:
        return max(0, len(self.shown) - len(stop) + 1)

    def _stop_prefix(self, text: str) -> int:
        """The length of the longest tail of ``text`` that begins some stop string."""
        longest = 0
        for stop in self.stop:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest
