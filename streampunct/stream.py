"""Streaming punctuation with a bounded delay: a sans-I/O core that servers and clients drive.

A :class:`PunctStream` takes words as a recogniser emits them (:meth:`PunctStream.push`), accepts
replacements of the words that are not final yet (:meth:`PunctStream.revise`), lets the
recogniser's clock run on through silence (:meth:`PunctStream.tick`) and ends with
:meth:`PunctStream.finish`. Each call returns :class:`PunctEvent` objects: provisional labels for
display, and exactly one final label per word, in word order, never changed afterwards.

When a word becomes final is the business of one small object, :class:`Lookahead`: once ``k``
words follow it, or once the recogniser's clock has passed the word's end by ``max_delay_ms``
(which a pause of that length does too). A word decided early is decided with the lookahead it
has: the words that had ended by its deadline. Without time limits firing, the final labels equal
``Punctuator.predict(words, lookahead=k)`` word for word.

Under the window engine (``engine="window"``, see :mod:`streampunct.punctuator`) each decision is
its own pass over the ``context`` tokens before the word and the ones after it; one pass also gives
the provisional labels of the words after the newest final one. Passes of many streams batch
together as the masked engine's windows do.

Lookahead counts the model's tokens, which are IWSLT words: a recogniser word such as "don't" is
two of them ("do n't"), and "--" is none (it is labelled O).

A POS-fused checkpoint streams with its tagger beside it (:class:`~streampunct.pos.TagStream`,
same lookahead): a token's tag is final when its punctuation can be, so the final labels still
equal ``predict()``'s. A word decided early by a time limit uses the tags final by then and, for
the rest, the tagger's view of the words up to its lookahead.

A stream is not thread-safe: drive each from one thread or task at a time. Streams share their
model read-only, so many streams may run in many threads.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import InputError
from .incremental import WindowState, compute_many
from .model import PunctModel
from .pieces import WordPieces
from .punctuator import MAX_LOOKAHEAD, window_logits, word_window_start
from .text import LABELS, MARKS, normalize

if TYPE_CHECKING:
    from .pos import Tagger

__all__ = ["Word", "PunctEvent", "Lookahead", "PunctStream"]


@dataclass(frozen=True)
class Word:
    """A recogniser's word, with optional times in seconds on the recogniser's clock."""

    text: str
    start: float | None = None
    end: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InputError(f"word text must be a string, got {type(self.text).__name__}")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            ):
                raise InputError(
                    f"word {self.text!r}: {name} must be a finite number of seconds, got {value!r}"
                )
        if self.start is not None and self.end is not None and self.end < self.start:
            raise InputError(f"word {self.text!r} ends ({self.end}) before it starts ({self.start})")


@dataclass(frozen=True)
class PunctEvent:
    """The mark after word ``index`` of the stream: provisional, or final and never changed."""

    index: int
    word: str
    label: str
    final: bool

    @property
    def mark(self) -> str:
        return MARKS[self.label]


@dataclass(frozen=True)
class Lookahead:
    """The commit policy: a word is final once ``words`` tokens follow it, or ``max_delay_ms``
    after its end on the recogniser's clock (``None``: no time limit)."""

    words: int
    max_delay_ms: float | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.words, bool)
            or not isinstance(self.words, int)
            or not 0 <= self.words <= MAX_LOOKAHEAD
        ):
            raise InputError(f"lookahead must be an int between 0 and {MAX_LOOKAHEAD}, got {self.words!r}")
        if self.max_delay_ms is not None and not (
            self.max_delay_ms >= 0 and math.isfinite(self.max_delay_ms)
        ):
            raise InputError(f"max_delay_ms must be a finite number >= 0 or None, got {self.max_delay_ms!r}")

    def deadline(self, word: Word) -> float | None:
        """Clock time (s) by which the word must be final; None when there is no time limit."""
        if self.max_delay_ms is None or word.end is None:
            return None
        return word.end + self.max_delay_ms / 1000

    def lookahead_at(self, deadline: float, following: Iterable[Word]) -> int:
        """How many of the following tokens' words had ended by the deadline (at most ``words``)."""
        n = 0
        for w in following:
            if w.end is None or w.end > deadline or n >= self.words:
                break
            n += 1
        return n


class PunctStream:
    """One stream of words in, punctuation events out. Create it with ``Punctuator.stream()``."""

    def __init__(
        self,
        model: PunctModel,
        pieces: WordPieces,
        policy: Lookahead,
        tagger: Tagger | None = None,
        engine: str = "masked",
    ):
        if model.cfg.n_tags and tagger is None:
            raise InputError("this checkpoint fuses POS tags: stream it with a tagger (Punctuator.stream())")
        if engine not in ("masked", "window") or (engine == "window" and model.cfg.n_tags):
            raise InputError(f"a stream of this checkpoint runs the masked or window engine, not {engine!r}")
        self.model = model
        self.pieces = pieces
        self.policy = policy
        self.engine = engine
        self._k = policy.words
        self._words: list[Word] = []  # words from _word_base on
        self._word_base = 0
        self._ids: list[tuple[int, ...]] = []  # tokens' pieces, from _tok_base on
        self._tok_word: list[int] = []  # each token's word index
        self._tok_base = 0
        self._tok_label: list[int] = []  # decided tokens' labels, from _tok_base on
        # A POS-fused model: tags made as tokens arrive, under the same lookahead
        self._tag_stream = tagger.stream(policy.words) if model.cfg.n_tags and tagger else None
        self._tok_tag: list[int] = []  # final tags' ids, from _tok_base on
        self._windows: dict[int, WindowState] = {}  # masked engine: by block
        self._passes: dict[tuple[int, int], WindowState] = {}  # window engine: by tokens (start, end)
        self._final_words = 0
        self._final_tokens = 0
        self._shown: dict[int, str] = {}  # provisional label last shown, by word
        self._clock = -math.inf
        self._finished = False

    # --- public ------------------------------------------------------------------------------

    @property
    def n_words(self) -> int:
        return self._word_base + len(self._words)

    @property
    def n_final(self) -> int:
        """Words ``0 .. n_final - 1`` are final."""
        return self._final_words

    def push(self, words: Iterable[str | Word], now: float | None = None) -> list[PunctEvent]:
        """Add words; ``now`` (s) is the recogniser's clock, if it is ahead of the words' ends."""
        self._stage_push(words)
        return self._advance(now)

    def revise(self, index: int, words: Iterable[str | Word], now: float | None = None) -> list[PunctEvent]:
        """Replace the words from ``index`` on (none of them final yet) by ``words``."""
        self._stage_revise(index, words)
        return self._advance(now)

    def tick(self, now: float) -> list[PunctEvent]:
        """The recogniser's clock has reached ``now`` (s) with no new words: apply time limits."""
        self._check_open()
        return self._advance(now)

    def finish(self) -> list[PunctEvent]:
        """End of stream: every remaining word becomes final, with the lookahead it has."""
        self._check_open()
        if self._tag_stream is not None:
            self._tok_tag += self._tag_ids(tag for _, tag in self._tag_stream.finish())
        events = self._advance(None, flush=True)
        self._finished = True
        self._windows.clear()
        self._passes.clear()
        return events

    # --- staging: change the words, compute nothing (a batch computes many streams at once) --

    def _stage_push(self, words: Iterable[str | Word]) -> None:
        self._check_open()
        batch = [self._as_word(w) for w in words]
        for w in batch:
            self._add(w)

    def _stage_revise(self, index: int, words: Iterable[str | Word]) -> None:
        self._check_open()
        batch = [self._as_word(w) for w in words]
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not self._final_words <= index <= self.n_words
        ):
            raise InputError(
                f"can revise from word {self._final_words} to {self.n_words} (words before "
                f"{self._final_words} are final), not from {index!r}"
            )
        cut = self._first_token_of(index)
        del self._words[index - self._word_base :]
        del self._ids[cut - self._tok_base :], self._tok_word[cut - self._tok_base :]
        del self._tok_label[max(0, cut - self._tok_base) :]
        if self._tag_stream is not None:
            self._tag_stream.truncate(cut)
            del self._tok_tag[max(0, cut - self._tok_base) :]
        self._final_tokens = min(self._final_tokens, cut)
        self._shown = {i: lab for i, lab in self._shown.items() if i < index}
        self._passes.clear()
        for b in list(self._windows):
            start = self._window_start(b)
            if start >= cut:
                del self._windows[b]
            else:
                self._windows[b].truncate(cut - start)
        for w in batch:
            self._add(w)

    def _open_windows(self) -> list[WindowState]:
        """The windows the next decisions read: under the window engine, one pass for each token
        that has its full lookahead, and one whose tail gives the provisional labels."""
        if self.engine == "masked":
            return list(self._windows.values())
        n = self._tok_base + len(self._ids)
        for t in range(self._final_tokens, n - self._k):
            self._pass(t, t + self._k + 1, compute=False)
        if n:
            self._pass(self._tail_token(), n, compute=False)
        return list(self._passes.values())

    def _tail_token(self) -> int:
        """The newest token with its full lookahead (or the first): its window-engine pass also
        gives the provisional labels of the tokens after it."""
        return max(0, self._tok_base + len(self._ids) - 1 - self._k)

    def _pass_start(self, t: int) -> int:
        return word_window_start(t, self.model.cfg, "window")

    def _pass(self, t: int, end: int, compute: bool = True) -> WindowState:
        """The window-engine pass that decides token ``t`` from the tokens before ``end``."""
        start = self._pass_start(t)
        state = self._passes.get((start, end))
        if state is None:
            state = self._passes[start, end] = WindowState(self.model, None)
            for pieces in self._ids[start - self._tok_base : end - self._tok_base]:
                state.append(pieces)
        if compute:
            state.compute()
        return state

    # --- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._finished:
            raise InputError("the stream is finished")

    @staticmethod
    def _as_word(w: str | Word) -> Word:
        if isinstance(w, Word):
            return w
        if isinstance(w, str):
            return Word(w)
        raise InputError(f"a word is a str or a Word, got {type(w).__name__}")

    def _tag_ids(self, tags: Iterable[str]) -> list[int]:
        return [self._tag_stream.tagger.index[tag] for tag in tags]  # type: ignore[union-attr]

    def _window_start(self, block: int) -> int:
        return max(0, block * self.model.cfg.block - self.model.cfg.context)

    def _first_token_of(self, word: int) -> int:
        """The first token of ``word`` or of the first word after it that has tokens."""
        return self._tok_base + bisect.bisect_left(self._tok_word, word)

    def _add(self, w: Word) -> None:
        index = self.n_words
        self._words.append(w)
        for token in normalize(w.text):
            t = self._tok_base + len(self._ids)
            pieces = self.pieces.encode([token])[0]
            self._ids.append(pieces)
            self._tok_word.append(index)
            if self._tag_stream is not None:
                self._tok_tag += self._tag_ids(tag for _, tag in self._tag_stream.push(token))
            if self.engine == "masked":  # the block windows the token belongs to
                cfg = self.model.cfg
                first = max(0, -((t - cfg.block - self._k + 1) // -cfg.block))  # ceil
                for b in range(first, (t + cfg.context) // cfg.block + 1):
                    if b not in self._windows:
                        if self._window_start(b) != t:
                            continue  # that window was closed, or opens with a later token
                        self._windows[b] = WindowState(self.model, self._k)
                    self._windows[b].append(pieces)
        if w.end is not None or w.start is not None:
            self._clock = max(self._clock, w.end if w.end is not None else w.start)  # type: ignore[type-var]

    def _decide(self, t: int, flush: bool) -> int | None:
        """The label of token t if it can be final now, else None.

        A word whose deadline the clock has passed is decided with the tokens of the words that
        had ended by then, whatever arrived later: the result does not depend on when ticks come.
        """
        n_tokens = self._tok_base + len(self._ids)
        after = n_tokens - 1 - t
        word = self._words[self._tok_word[t - self._tok_base] - self._word_base]
        deadline = self.policy.deadline(word)
        if deadline is not None and self._clock >= deadline:
            following = (
                self._words[self._tok_word[u - self._tok_base] - self._word_base]
                for u in range(t + 1, n_tokens)
            )
            j = self.policy.lookahead_at(deadline, following)
        elif after >= self._k:
            j = self._k
        elif flush:
            j = after
        else:
            return None
        if self.engine == "window":
            return int(self._pass(t, t + j + 1).logits(t - self._pass_start(t)).argmax())
        if j == self._k:  # the full lookahead: the incremental window has it
            block = t // self.model.cfg.block
            start = self._window_start(block)
            tags = (
                self._tok_tag[start - self._tok_base : t + 1 - self._tok_base] if self._tag_stream else None
            )
            return int(self._windows[block].logits(t - start, tags, final=True).argmax())
        tags = None
        if self._tag_stream is not None:  # tags not final yet: as if the text ended at t + j
            tags = self._tok_tag + self._tag_ids(self._tag_stream.peek(t + j + 1))
            tags += [0] * (len(self._ids) - len(tags))  # after t + j: unseen under lookahead j
        return int(window_logits(self.model, self._ids, t, j, base=self._tok_base, tags=tags).argmax())

    def _advance(self, now: float | None, flush: bool = False) -> list[PunctEvent]:
        if now is not None:
            self._clock = max(self._clock, now)
        # Every open window in one pass: the next block's window, which fills during this one,
        # is computed a word at a time instead of all at once when its block begins.
        compute_many(self._open_windows())
        n_tokens = self._tok_base + len(self._ids)
        while self._final_tokens < n_tokens:
            label = self._decide(self._final_tokens, flush)
            if label is None:
                break
            self._tok_label.append(label)
            self._final_tokens += 1
        events = self._finalise_words()
        events.extend(self._provisional())
        self._passes.clear()
        self._trim()
        return events

    def _finalise_words(self) -> list[PunctEvent]:
        events = []
        while self._final_words < self.n_words:
            i = self._final_words
            last = self._first_token_of(i + 1) - 1  # the word's last token (or an earlier word's)
            has_tokens = last >= self._tok_base and self._tok_word[last - self._tok_base] == i
            if has_tokens and last >= self._final_tokens:
                break
            label = LABELS[self._tok_label[last - self._tok_base]] if has_tokens else "O"
            events.append(PunctEvent(i, self._words[i - self._word_base].text, label, True))
            self._shown.pop(i, None)
            self._final_words += 1
        return events

    def _provisional(self) -> list[PunctEvent]:
        events = []
        cfg = self.model.cfg
        tail_pass, tail_start = None, 0
        if self.engine == "window" and self._ids:  # the newest pass covers every token not final
            tail = self._tail_token()
            tail_pass, tail_start = self._pass(tail, self._tok_base + len(self._ids)), self._pass_start(tail)
        tags = None
        if self._tag_stream is not None:  # final tags, then the tagger's current view of the rest
            tags = self._tok_tag + self._tag_ids(self._tag_stream.provisional())
        for pos in range(max(0, self._final_tokens - self._tok_base), len(self._ids)):
            t = self._tok_base + pos
            i = self._tok_word[pos]
            if t < self._final_tokens or i < self._final_words:
                continue
            if pos + 1 < len(self._ids) and self._tok_word[pos + 1] == i:
                continue  # not the word's last token
            if tail_pass is not None:  # the window engine: the newest pass's view, fewer words ahead
                label = LABELS[int(tail_pass.logits(t - tail_start).argmax())]
            else:
                block = t // cfg.block
                start = self._window_start(block)
                window_tags = tags[start - self._tok_base : t + 1 - self._tok_base] if tags else None
                label = LABELS[int(self._windows[block].logits(t - start, window_tags).argmax())]
            if self._shown.get(i) != label:
                self._shown[i] = label
                events.append(PunctEvent(i, self._words[i - self._word_base].text, label, False))
        return events

    def _trim(self) -> None:
        """Forget what no decision can need again: memory stays flat however long the stream."""
        cfg = self.model.cfg
        # A revision may cut from the first token of the first word not final, which can be
        # before _final_tokens (a word half decided): keep everything from there.
        open_from = min(self._final_tokens, self._first_token_of(self._final_words))
        block = open_from // cfg.block
        for b in [b for b in self._windows if b < block]:
            del self._windows[b]
        keep_from = self._window_start(block) if self.engine == "masked" else max(0, open_from - cfg.context)
        if keep_from - self._tok_base > 4 * cfg.block:
            drop = keep_from - self._tok_base
            del self._ids[:drop], self._tok_word[:drop], self._tok_label[:drop], self._tok_tag[:drop]
            self._tok_base = keep_from
        if self._final_words - self._word_base > 256:  # only words not final are read again
            del self._words[: self._final_words - self._word_base]
            self._word_base = self._final_words
