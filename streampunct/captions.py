"""Caption lines from final punctuation, short enough to read live, with times; SRT and WebVTT."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .text import caption_text
from .types import PunctEvent, Word

__all__ = ["Caption", "Captioner", "to_srt", "to_vtt"]


@dataclass(frozen=True)
class Caption:
    text: str  # punctuated, capitalised
    start: float | None  # seconds, from the first word's start
    end: float | None  # seconds, to the last word's end
    first: int  # word indices covered
    last: int


class Captioner:
    """Collects final events in order and cuts them into caption lines.

    A line closes at a sentence end (PERIOD or QUESTION) and at a COMMA once it holds
    ``comma_chars`` characters. Once it holds ``line_chars`` characters it closes before the next
    word, unless that word carries a mark and still fits in ``max_chars`` (a broadcast caption
    line is at most 42): then after it, so that no line is left one word short of its sentence.
    A word that ends its sentence and fits in neither takes the line's last word with it to the
    next line, so that no line is one word left over. A word thus waits for a few words after it,
    not for the end of its sentence.
    ``line_chars=None`` gives one line per sentence.
    """

    def __init__(
        self, line_chars: int | None = 32, max_chars: int = 42, comma_chars: int = 16, max_words: int = 40
    ):
        self.line_chars = line_chars
        self.max_chars = max_chars
        self.comma_chars = comma_chars
        self.max_words = max_words  # a line this long is closed whatever else
        self.words: dict[int, Word] = {}
        self._line: list[tuple[Word, str]] = []
        self._chars = 0
        self._first = 0
        self._previous: str | None = None
        self._sentence_start = True
        self._names: dict[str, bool] = {}  # caption_text's: which words are names, so far

    def add_words(self, first_index: int, words: Sequence[Word]) -> None:
        """Word times, by stream index (from the recogniser)."""
        for i, w in enumerate(words):
            self.words[first_index + i] = w

    def add(self, events: Iterable[PunctEvent]) -> list[Caption]:
        lines = []
        for e in events:
            if not e.final:
                continue
            word = self.words.pop(e.index, Word(e.word))
            width = len(word.text.strip())
            if self._full() and not (e.label != "O" and self._chars + 1 + width <= self.max_chars):
                carried = self._carry(e.label)
                lines.append(self._close())  # this word begins the next line
                if carried is not None:
                    self._first = e.index - 1
                    self._line.append(carried)
                    self._chars = len(carried[0].text.strip())
            if not self._line:
                self._first = e.index
            self._line.append((word, e.label))
            self._chars += width + (1 if len(self._line) > 1 else 0)
            if self._closes(e.label):
                lines.append(self._close())
        return lines

    def flush(self) -> list[Caption]:
        """The end of speech: the last line closes, and ends its sentence if no mark did."""
        if not self._line:
            return []
        word, label = self._line[-1]
        if label in ("O", "COMMA"):
            self._line[-1] = (word, "PERIOD")
        return [self._close()]

    def _carry(self, label: str) -> tuple[Word, str] | None:
        """A word that ends its sentence and does not fit would stand alone on its line: the line
        before gives it its last word (one without a mark), taken off here."""
        if label not in ("PERIOD", "QUESTION") or len(self._line) < 2 or self._line[-1][1] != "O":
            return None
        carried = self._line.pop()
        self._chars -= len(carried[0].text.strip()) + 1
        return carried

    def _full(self) -> bool:
        """The line has reached ``line_chars``: it closes before or after the next word."""
        return self.line_chars is not None and self._chars >= self.line_chars

    def _closes(self, label: str) -> bool:
        if label in ("PERIOD", "QUESTION") or len(self._line) >= self.max_words:
            return True
        return self.line_chars is not None and label == "COMMA" and self._chars >= self.comma_chars

    def _close(self) -> Caption:
        raw = [w.text for w, _ in self._line]
        labels = [label for _, label in self._line]
        text = caption_text(raw, labels, self._previous, self._sentence_start, self._names)
        caption = Caption(
            text, self._line[0][0].start, self._line[-1][0].end, self._first, self._first + len(raw) - 1
        )
        self._previous = raw[-1]
        self._sentence_start = labels[-1] in ("PERIOD", "QUESTION")
        self._line = []
        self._chars = 0
        return caption


def _stamp(seconds: float | None, sep: str) -> str:
    ms = round(1000 * (seconds or 0.0))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_srt(captions: Sequence[Caption]) -> str:
    blocks = [
        f"{i}\n{_stamp(c.start, ',')} --> {_stamp(c.end, ',')}\n{c.text}\n"
        for i, c in enumerate(captions, start=1)
    ]
    return "\n".join(blocks)


def to_vtt(captions: Sequence[Caption]) -> str:
    blocks = [f"{_stamp(c.start, '.')} --> {_stamp(c.end, '.')}\n{c.text}\n" for c in captions]
    return "WEBVTT\n\n" + "\n".join(blocks)
