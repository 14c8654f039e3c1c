"""Text out of generated tokens: `Detokenizer` (whole characters only) and `StopWatch`.

Both are pure Python over a tokenizer's `decode`, so they are tested without a model.

`Detokenizer` turns tokens into text as they come without ever splitting a character:
a byte-level tokenizer may put a UTF-8 character's bytes in two tokens, and decoding the
first alone gives U+FFFD. Each step decodes a short window of recent tokens twice, with
and without the newest, and releases the difference only when it does not end in
U+FFFD; `flush` releases the rest at the end, whatever it is.

`StopWatch` finds stop sequences in the released text: the answer ends before the first
one, and text that could still become one is held back until it is known not to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["Detokenizer", "StopWatch"]

Decode = Callable[[Sequence[int]], str]


class Detokenizer:
    """Incremental decoding of one generation's tokens (module docstring)."""

    def __init__(self, decode: Decode) -> None:
        self.decode = decode
        self.tokens: list[int] = []
        self.prefix = 0  # the window starts here: text before it has been released
        self.read = 0  # tokens before this are released

    def push(self, token: int) -> str:
        """Add a token; the text that is now complete (often "", never half a character)."""
        self.tokens.append(token)
        before = self.decode(self.tokens[self.prefix : self.read])
        after = self.decode(self.tokens[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.tokens)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is left undecided, at the end of the generation."""
        before = self.decode(self.tokens[self.prefix : self.read])
        after = self.decode(self.tokens[self.prefix :])
        self.prefix = self.read = len(self.tokens)
        return after[len(before) :] if len(after) > len(before) else ""


class StopWatch:
    """Cuts the text at the first of `stops`; holds back what may be the start of one.

    Text is released only past the longest end that begins a stop sequence, so a stop
    sequence always begins in the held-back text, never in what was sent.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(stops)
        self.held = ""
        self.longest = max((len(stop) for stop in self.stops), default=0)

    def feed(self, text: str) -> tuple[str, bool]:
        """Text to send now, and whether a stop sequence ended the answer."""
        if not self.stops:
            return text, False
        pending = self.held + text
        found = [idx for stop in self.stops if (idx := pending.find(stop)) >= 0]
        if found:
            self.held = ""
            return pending[: min(found)], True
        keep = self._partial_stop(pending)
        self.held = pending[len(pending) - keep :]
        return pending[: len(pending) - keep], False

    def flush(self) -> str:
        """The held-back text, when the answer ends for another reason."""
        held, self.held = self.held, ""
        return held

    def _partial_stop(self, text: str) -> int:
        """The length of the longest end of `text` that begins a stop sequence."""
        for size in range(min(len(text), self.longest - 1), 0, -1):
            end = text[-size:]
            if any(stop.startswith(end) for stop in self.stops):
                return size
        return 0
