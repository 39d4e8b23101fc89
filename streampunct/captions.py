"""Caption lines from final punctuation: one line per sentence, with times, and SRT/WebVTT."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .stream import PunctEvent, Word
from .text import caption_text

__all__ = ["Caption", "Captioner", "to_srt", "to_vtt"]


@dataclass(frozen=True)
class Caption:
    text: str  # punctuated, capitalised
    start: float | None  # seconds, from the first word's start
    end: float | None  # seconds, to the last word's end
    first: int  # word indices covered
    last: int


class Captioner:
    """Collects final events in order; a PERIOD or QUESTION closes a caption line."""

    def __init__(self, max_words: int = 40):
        self.max_words = max_words  # a line this long is closed even without a sentence end
        self.words: dict[int, Word] = {}
        self._line: list[tuple[Word, str]] = []
        self._first = 0
        self._previous: str | None = None

    def add_words(self, first_index: int, words: Sequence[Word]) -> None:
        """Word times, by stream index (from the recogniser)."""
        for i, w in enumerate(words):
            self.words[first_index + i] = w

    def add(self, events: Iterable[PunctEvent]) -> list[Caption]:
        lines = []
        for e in events:
            if not e.final:
                continue
            if not self._line:
                self._first = e.index
            self._line.append((self.words.pop(e.index, Word(e.word)), e.label))
            if e.label in ("PERIOD", "QUESTION") or len(self._line) >= self.max_words:
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

    def _close(self) -> Caption:
        raw = [w.text for w, _ in self._line]
        text = caption_text(raw, [label for _, label in self._line], self._previous)
        caption = Caption(
            text, self._line[0][0].start, self._line[-1][0].end, self._first, self._first + len(raw) - 1
        )
        self._previous = raw[-1]
        self._line = []
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
