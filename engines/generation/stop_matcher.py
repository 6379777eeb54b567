"""Stop-sequence matching over streamed text, including stops split across tokens."""

from __future__ import annotations


class StopMatcher:
    """Filters streamed text so that no stop sequence is ever emitted.

    Text that could be the start of a stop sequence is held back until the next piece shows
    whether it is one. ``push`` returns the text that is safe to emit and whether a stop
    matched (everything from the stop on is dropped); ``flush`` returns what is held back
    when generation ends for another reason.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        #: The stop sequence that matched, once one has (``None`` before).
        self.matched: str | None = None

    def push(self, text: str) -> tuple[str, bool]:
        """Add ``text``; return (text safe to emit, whether a stop sequence matched)."""
        if not self._stops:
            return text, False
        buffer = self._held + text
        found = [(i, len(stop), stop) for stop in self._stops if (i := buffer.find(stop)) >= 0]
        if found:
            # The earliest; of stops starting there, the shortest (it completed first).
            first, _, self.matched = min(found)
            self._held = ""
            return buffer[:first], True
        keep = self._longest_partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """Return and clear the held-back text."""
        held, self._held = self._held, ""
        return held

    def _longest_partial_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that is a proper prefix of some stop."""
        best = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:length]):
                    best = length
                    break
        return best
