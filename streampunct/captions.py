"""Caption lines from final punctuation, short enough to read live, with times; the cues of SRT
and WebVTT files, laid out again from those lines' words by broadcast rules."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .options import CueOptions
from .text import FUNCTION_WORDS, caption_text, shown_word
from .types import PunctEvent, Word

__all__ = ["Caption", "Captioner", "Cue", "subtitle_cues", "to_srt", "to_vtt"]


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
        self,
        line_chars: int | None = 32,
        max_chars: int = CueOptions.max_line_chars,
        comma_chars: int = 16,
        max_words: int = 40,
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

    def flush(self, end_sentence: bool = True) -> list[Caption]:
        """The end of speech: the last line closes, and (``end_sentence``) ends its sentence if no mark did."""
        if not self._line:
            return []
        word, label = self._line[-1]
        if end_sentence and label in ("O", "COMMA"):
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


@dataclass(frozen=True)
class Cue:
    """A subtitle cue: its lines, and when it is on screen (seconds)."""

    lines: tuple[str, ...]
    start: float
    end: float

    @property
    def text(self) -> str:
        return " ".join(self.lines)


@dataclass(frozen=True)
class _Shown:
    """A word as the caption lines show it (cased, with its mark), and its times."""

    text: str
    start: float
    end: float


# What a cue layout costs (subtitle_cues): a break between two words, by how well it reads there...
_SENTENCE, _COMMA, _FUNCTION, _SPACE, _NAME = 0.0, 1.0, 2.0, 3.0, 100.0
_CUE = 0.5  # ... each cue (fewer, fuller cues) ...
_FEW_WORDS = 50.0  # ... a cue of one or two words that are not a sentence of their own ...
_SHORT = 20.0  # ... one without room for min_cue_s between the words around it ...
_FAST = 5.0  # ... or to be read at max_chars_per_s before the next word ...
_PAUSE_S, _PAUSED = 1.0, 2.0  # ... a pause this long inside a cue (its words show long before said) ...
_UNEVEN = 0.05  # ... and a character of a line's length away from the cue's mean line.


def subtitle_cues(
    captions: Sequence[Caption], words: Mapping[int, Word] | None = None, options: CueOptions | None = None
) -> list[Cue]:
    """The cues of a subtitle file for final caption lines (in order) and their words' times, by
    stream index (the recogniser's, as the words messages give them; a line whose words are not
    all there spreads its own times over its words by their characters).

    The lines' words are laid out again, by ``options``: at most ``max_line_chars`` a line and
    ``max_lines`` lines a cue, broken where a break reads best (after a sentence end, after a
    comma, before a function word, at any space), never inside a name (capitalised words in a
    row: "Des Moines", "Old Dominion University"); no cue of one or two words unless they are a
    sentence of their own; no cue with too little room between the words around it to stay
    ``min_cue_s`` and be read at ``max_chars_per_s``, where merging it into a neighbour fits. A
    cue shows from its first word's start to its last word's end, extended into the gap after it
    until it has been read (and back into the gap before it, for ``min_cue_s``); a cue that still
    falls short of ``min_cue_s`` delays the next. No cue overlaps the next or lasts 0 s.
    """
    o = options or CueOptions()
    shown = _shown(captions, words or {})
    spans = _layout(shown, o)
    out: list[Cue] = []
    for k, (i, j) in enumerate(spans):
        lines = _lines(shown[i : j + 1], o, shown[i - 1] if i else None)
        before = out[-1].end if out else 0.0
        after = shown[spans[k + 1][0]].start if k + 1 < len(spans) else math.inf
        start = max(shown[i].start, before)
        end = max(shown[j].end, start)
        read = len(" ".join(lines)) / o.max_chars_per_s
        end = max(end, min(start + max(o.min_cue_s, read), after))
        start = max(before, min(start, end - o.min_cue_s))
        out.append(Cue(lines, start, max(end, start + o.min_cue_s)))
    return out


def _shown(captions: Sequence[Caption], words: Mapping[int, Word]) -> list[_Shown]:
    """The caption lines' words, each with its recognised word's times (the words a line shows
    are its words that show, :func:`~streampunct.text.shown_word`)."""
    out: list[_Shown] = []
    for c in captions:
        texts = c.text.split()
        kept = [words[i] for i in range(c.first, c.last + 1) if i in words and shown_word(words[i].text)]
        if len(kept) == len(texts) and all(w.start is not None and w.end is not None for w in kept):
            out += [_Shown(t, w.start or 0.0, w.end or 0.0) for t, w in zip(texts, kept)]
            continue
        start = c.start if c.start is not None else out[-1].end if out else 0.0
        seconds = max(0.0, (c.end if c.end is not None else start) - start) / max(1, len(c.text))
        at = 0
        for t in texts:
            at = c.text.index(t, at)
            out.append(_Shown(t, start + at * seconds, start + (at + len(t)) * seconds))
            at += len(t)
    return out


def _ends_sentence(w: _Shown) -> bool:
    """A final ``.`` (not an abbreviation's: "Mr.", "U.S."), ``?`` or ``!``."""
    return w.text.endswith(("?", "!")) or (w.text.endswith(".") and not shown_word(w.text).endswith("."))


def _capital(w: _Shown) -> bool:
    return w.text[:1].isupper() and not (w.text == "I" or w.text.startswith("I'"))


def _break(before: _Shown | None, a: _Shown, b: _Shown) -> float:
    """What a break between ``a`` and ``b`` costs (``before``: the word before ``a``, None at the start)."""
    if _ends_sentence(a):
        return _SENTENCE
    if a.text.endswith((",", ";", ":")):
        return _COMMA
    starts = before is None or _ends_sentence(before)  # a's capital is its sentence's
    if _capital(a) and _capital(b) and not starts:  # inside a name: b does not begin a sentence
        return _NAME
    return _FUNCTION if shown_word(b.text).lower() in FUNCTION_WORDS else _SPACE


def _breaks(shown: Sequence[_Shown], before: _Shown | None = None) -> list[float]:
    """What a break after each word costs (after the last: nothing); ``before``: the word before them."""
    return [_break(x, a, b) for x, a, b in zip([before, *shown], shown, shown[1:])] + [0.0]


def _layout(shown: Sequence[_Shown], o: CueOptions) -> list[tuple[int, int]]:
    """The cues' first and last words: the layout of least cost (a shortest path over the words)."""
    n = len(shown)
    breaks = _breaks(shown)
    best, back = [0.0] + [math.inf] * n, [0] * (n + 1)
    for i in range(n):
        for j, lines in enumerate(_fill(shown, breaks, i, o.max_line_chars), start=i):  # words i to j
            if lines > o.max_lines and j > i:
                break
            cost = best[i] + _CUE + breaks[j] + _timing(shown, i, j, o)
            if j - i < 2 and not ((i == 0 or _ends_sentence(shown[i - 1])) and _ends_sentence(shown[j])):
                cost += _FEW_WORDS
            if cost < best[j + 1]:
                best[j + 1], back[j + 1] = cost, i
    spans, j = [], n
    while j > 0:
        spans.append((back[j], j - 1))
        j = back[j]
    return spans[::-1]


def _timing(shown: Sequence[_Shown], i: int, j: int, o: CueOptions) -> float:
    """What the cue of words ``i`` to ``j`` costs for its time on screen."""
    cost = _PAUSED * sum(b.start - a.end >= _PAUSE_S for a, b in zip(shown[i:j], shown[i + 1 : j + 1]))
    if j + 1 == len(shown):  # the last cue: all the time it needs
        return cost
    after = shown[j + 1].start
    if after - (shown[i - 1].end if i else 0.0) < o.min_cue_s:
        cost += _SHORT
    chars = sum(len(w.text) for w in shown[i : j + 1]) + j - i
    return cost + (_FAST if after - shown[i].start < chars / o.max_chars_per_s else 0.0)


def _fill(shown: Sequence[_Shown], breaks: Sequence[float], first: int, width: int) -> Iterator[int]:
    """The lines that words ``first``, ``first + 1``, ... fill as they come, at most ``width``
    characters a line (a longer word alone on its own); a name goes whole to the next line where
    it fits on one (``breaks[k]``: what the break after word ``k`` costs)."""
    lines, line, name = 1, -1, -1
    for k in range(first, len(shown)):
        size = len(shown[k].text)
        name = name + 1 + size if k > first and breaks[k - 1] == _NAME else size
        line += 1 + size
        if line > width and line > size:
            lines, line = lines + 1, name if name < line and name <= width else size
        yield lines


def _lines(shown: Sequence[_Shown], o: CueOptions, before: _Shown | None = None) -> tuple[str, ...]:
    """A cue's words in as few lines as hold them, broken where it costs least (``before``: the
    word before the cue)."""
    texts = [w.text for w in shown]
    breaks = _breaks(shown, before)
    *_, count = _fill(shown, breaks, 0, o.max_line_chars)
    if count == 1:
        return (" ".join(texts),)
    mean = (sum(map(len, texts)) + len(texts) - count) / count
    n = len(texts)
    # best[k][j]: the first j words in k lines
    best = [[math.inf] * (n + 1) for _ in range(count + 1)]
    back = [[0] * (n + 1) for _ in range(count + 1)]
    best[0][0] = 0.0
    for k in range(1, count + 1):
        for j in range(1, n + 1):
            length = -1
            for i in range(j - 1, -1, -1):  # line k holds words i to j - 1
                length += 1 + len(texts[i])
                if length > o.max_line_chars and j - i > 1:
                    break
                cost = best[k - 1][i] + breaks[j - 1] + _UNEVEN * abs(length - mean)
                if cost < best[k][j]:
                    best[k][j], back[k][j] = cost, i
    lines, j = [], n
    for k in range(count, 0, -1):
        lines.append(" ".join(texts[back[k][j] : j]))
        j = back[k][j]
    return tuple(lines[::-1])


def _stamp(seconds: float | None, sep: str) -> str:
    ms = round(1000 * (seconds or 0.0))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _block(c: Cue, sep: str) -> str:
    return f"{_stamp(c.start, sep)} --> {_stamp(c.end, sep)}\n" + "\n".join(c.lines) + "\n"


def to_srt(cues: Sequence[Cue]) -> str:
    return "\n".join(f"{i}\n{_block(c, ',')}" for i, c in enumerate(cues, start=1))


def to_vtt(cues: Sequence[Cue]) -> str:
    return "WEBVTT\n\n" + "\n".join(_block(c, ".") for c in cues)
