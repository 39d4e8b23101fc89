"""Streaming punctuation with a bounded delay: a sans-I/O core that servers and clients drive.

A :class:`PunctStream` takes words as a recogniser emits them (:meth:`PunctStream.push`), accepts
replacements of the words that are not final yet (:meth:`PunctStream.revise`), lets the
recogniser's clock run on through silence (:meth:`PunctStream.tick`) and ends with
:meth:`PunctStream.finish`. Each call returns :class:`PunctEvent` objects: provisional labels for
display, and exactly one final label per word, in word order, never changed afterwards.

When a word becomes final is the business of one small object, the commit policy
(:class:`~streampunct.types.Lookahead`): once ``k`` tokens follow it, or once the recogniser's
clock has passed the word's end by ``max_delay_ms`` (which a pause of that length does too). A
word decided early is decided with the lookahead it has: the words that had ended by its
deadline. Without time limits firing, the final labels equal ``Punctuator.predict(words,
lookahead=k)`` word for word. How a label is computed is the business of the engine
(:mod:`streampunct.engines`: the text model's logits) and of the decider
(:mod:`streampunct.decision`: the evidence of the words' times and cues): the stream holds the
words and asks them for every decision.

A push may also carry the recogniser's current guess after its words (``tentative``): lookahead
for the words before it, never final, replaced by the next call. Their marks become final sooner,
decided on that guess (docs/latency.md measures what it costs). Only its first k tokens can be
lookahead, so the stream keeps no more of it: the rest of a guess (a looping recogniser's can
fill its buffer) only moves the clock.

**Sentences.** A stream opened with ``sentences=True`` also closes :class:`Sentence` objects, each
once, in order, when the last of its words is final: at a final PERIOD or QUESTION, after
``SENTENCE_WORDS`` words without one, and at the finish (the last words, unmarked). Their text is
the captions' (:class:`~streampunct.captions.Captioner`); :meth:`PunctStream.take_sentences`
takes those closed since it was last called. A revision changes no final word, so no sentence.

Lookahead counts the model's tokens, which are IWSLT words: a recogniser word such as "don't" is
two of them ("do n't"), and "--" is none (it is labelled O).

**Many streams.** Each call is one :data:`Call` (:class:`Push`, :class:`Revise`, :class:`Tick`,
:class:`Finish`) run in three steps: :meth:`PunctStream.prepare` changes the words and computes
nothing, :meth:`PunctStream.pending` lists the model work the decisions will read, and
:meth:`PunctStream.complete` decides and returns the events. A batch prepares many streams,
computes all their pending work in one pass per layer
(:func:`~streampunct.engines.compute_many`), then completes each (see
:mod:`streampunct.scheduler`); ``run(call)`` is the three steps for one stream.

A stream is not thread-safe: drive each from one thread or task at a time. Streams share their
model read-only, so many streams may run in many threads.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .captions import Caption, Captioner
from .decision import Decider, OnDecision, Place, place
from .engines import Work, compute_many
from .errors import InputError
from .model import PunctModel
from .pieces import WordPieces
from .text import LABELS, normalize
from .types import SENTENCE_ENDS, Lookahead, PunctEvent, Sentence, Word

if TYPE_CHECKING:
    from .engines import Engine
    from .pos import Tagger

__all__ = [
    "PunctStream",
    "Push",
    "Revise",
    "Tick",
    "Finish",
    "Call",
    "Held",
    "Word",
    "PunctEvent",
    "Sentence",
    "Lookahead",
]


@dataclass(frozen=True)
class Push:
    """New words, after the ones the stream has; ``now``: the recogniser's clock, if ahead of them.

    ``tentative``: the recogniser's guess after them, which it may still change (its provisional
    words). They serve as lookahead for the words before them, are never final themselves, get
    no events, and are replaced by the next call's (any call but a tick drops them)."""

    words: tuple[str | Word, ...]
    now: float | None = None
    tentative: tuple[str | Word, ...] = ()


@dataclass(frozen=True)
class Revise:
    """The words from ``index`` on (none of them final yet) replaced by ``words``."""

    index: int
    words: tuple[str | Word, ...]
    now: float | None = None


@dataclass(frozen=True)
class Tick:
    """The recogniser's clock reached ``now`` with no new words."""

    now: float


@dataclass(frozen=True)
class Finish:
    """The end of the stream: every word becomes final."""

    now: None = None


Call = Push | Revise | Tick | Finish


@dataclass(frozen=True)
class Held:
    """What a stream holds in memory: bounded by the words not final yet, however long it runs."""

    words: int
    tokens: int


class PunctStream:
    """One stream of words in, punctuation events out. Create it with ``Punctuator.stream()``."""

    FORGET_EVERY = 64  # final words and tokens are dropped in steps of this many
    SENTENCE_WORDS = 100  # a sentence without a mark closes at this many words (memory stays bounded)

    def __init__(
        self,
        engine: Engine,
        pieces: WordPieces,
        policy: Lookahead,
        decider: Decider,
        tagger: Tagger | None = None,
        on_decision: OnDecision | None = None,
        sentences: bool = False,
    ):
        """``decider``: the evidence beside the text (``Decider.text_alone()``: none);
        ``on_decision``: called with each final decision and its word's index, in order;
        ``sentences``: close sentences (:meth:`take_sentences`)."""
        model = engine.model
        if isinstance(model, PunctModel) and type(model) is not PunctModel:  # its forward is not the stream's
            raise InputError(
                f"only the product's PunctModel is streamed; a {type(model).__name__} (such as FFA's "
                "two-stream teacher, a training tool) labels whole windows (label_tokens, predict)"
            )
        self.policy = policy
        self.engine = engine.name
        self._decider = decider
        self._on_decision = on_decision
        self.pieces = pieces
        self._engine = engine.stream(policy.words, tagger)
        self._words: list[Word] = []  # words from _word_base on; the last _tentative are tentative
        self._word_base = 0
        self._tentative = 0
        # where the first tentative word with tokens that was heard but not added starts (k=0
        # takes none as lookahead): where the silence after the last word ends (_silence_after)
        self._guess_start: float | None = None
        self._tok_word: list[int] = []  # each token's word index, from _tok_base on
        self._tok_label: list[int] = []  # final tokens' labels, from _tok_base on
        self._tok_base = 0
        self._n_tokens = 0
        self._final_words = 0
        self._final_tokens = 0
        self._shown: dict[int, str] = {}  # provisional label last shown, by word
        self._clock = -math.inf
        self._finished = False
        # the open sentence's final words, with sentences on; the sentences closed and not taken
        self._sentence = Captioner(line_chars=None, max_words=self.SENTENCE_WORDS) if sentences else None
        self._closed: list[Sentence] = []

    # --- public ------------------------------------------------------------------------------

    @property
    def n_words(self) -> int:
        """Words pushed so far (tentative words not counted)."""
        return self._word_base + len(self._words) - self._tentative

    @property
    def n_final(self) -> int:
        """Words ``0 .. n_final - 1`` are final."""
        return self._final_words

    def push(
        self, words: Iterable[str | Word], now: float | None = None, tentative: Iterable[str | Word] = ()
    ) -> list[PunctEvent]:
        """Add words; ``now`` (s) is the recogniser's clock, if it is ahead of the words' ends;
        ``tentative``: the recogniser's guess after them, lookahead only (see :class:`Push`)."""
        return self.run(Push(tuple(words), now, tuple(tentative)))

    def revise(self, index: int, words: Iterable[str | Word], now: float | None = None) -> list[PunctEvent]:
        """Replace the words from ``index`` on (none of them final yet) by ``words``."""
        return self.run(Revise(index, tuple(words), now))

    def tick(self, now: float) -> list[PunctEvent]:
        """The recogniser's clock has reached ``now`` (s) with no new words: apply time limits."""
        return self.run(Tick(now))

    def finish(self) -> list[PunctEvent]:
        """End of stream: every remaining word becomes final, with the lookahead it has."""
        return self.run(Finish())

    def run(self, call: Call) -> list[PunctEvent]:
        """One call, start to end: :meth:`prepare`, compute :meth:`pending`, :meth:`complete`."""
        self.prepare(call)
        compute_many(self.pending())
        return self.complete(call)

    def take_sentences(self) -> list[Sentence]:
        """The sentences closed since the last call, in order (none unless opened with ``sentences``)."""
        closed, self._closed = self._closed, []
        return closed

    def held(self) -> Held:
        return Held(len(self._words), max(self._engine.held, len(self._tok_word)))

    # --- the three steps of a call -----------------------------------------------------------

    def prepare(self, call: Call) -> None:
        """Check the call and change the words; compute nothing. Bad input raises
        :class:`~streampunct.errors.InputError` and changes nothing."""
        if self._finished:
            raise InputError("the stream is finished")
        if not isinstance(call, Push | Revise | Tick | Finish):
            raise InputError(f"a call is a Push, Revise, Tick or Finish, got {type(call).__name__}")
        now = call.now
        if (now is not None or isinstance(call, Tick)) and (
            isinstance(now, bool) or not isinstance(now, int | float) or math.isnan(now)
        ):
            raise InputError(f"now must be a number of seconds on the recogniser's clock, got {now!r}")
        if isinstance(call, Push):
            words = [self._as_word(w) for w in call.words]
            tentative = [self._as_word(w) for w in call.tentative]
            self._drop_tentative()
            for w in words:
                self._add(w)
            first = self._n_tokens
            for w in tentative:
                if self._n_tokens - first < self.policy.words:
                    self._add(w)
                    self._tentative += 1
                else:  # lookahead enough: model work for nothing past it
                    if first == self._n_tokens and self._guess_start is None and normalize(w.text):
                        self._guess_start = w.start
                    self._hear(w)
        elif isinstance(call, Revise):
            words = [self._as_word(w) for w in call.words]
            index = call.index
            if (
                isinstance(index, bool)
                or not isinstance(index, int)
                or not self._final_words <= index <= self.n_words
            ):
                raise InputError(
                    f"can revise from word {self._final_words} to {self.n_words} (words before "
                    f"{self._final_words} are final), not from {index!r}"
                )
            self._drop_tentative()
            self._cut(index)
            for w in words:
                self._add(w)
        elif isinstance(call, Finish):
            self._drop_tentative()
            self._engine.close()
            self._finished = True
        if now is not None:
            self._clock = max(self._clock, now)

    def pending(self) -> Sequence[Work]:
        """The model work the next :meth:`complete` reads: compute it for many streams at once."""
        return self._engine.work(self._final_tokens)

    def complete(self, call: Call) -> list[PunctEvent]:
        """Decide what the prepared call lets be decided; the events, in order."""
        flush = isinstance(call, Finish)
        while self._final_tokens < self._n_tokens:
            t = self._final_tokens
            if self._tok_word[t - self._tok_base] >= self.n_words:
                break  # a tentative word: never final
            base, first = self._tok_base, self._word_base
            following = [
                self._words[w - first]
                for w in self._tok_word[t + 1 - base : t + 1 + self.policy.words - base]
            ]
            ahead = self.policy.ahead(self._word_of(t), following, self._clock, flush)
            if ahead is None:
                break
            decision = self._decider.decide(self._engine.decide(t, ahead), self._place(t, ahead), ahead)
            if self._on_decision is not None:
                self._on_decision(self._tok_word[t - base], decision)
            self._tok_label.append(decision.label)
            self._final_tokens += 1
        events = self._finalise_words()
        if self._sentence is not None:
            self._closed += self._close_sentences(self._sentence, events, flush)
        events += self._provisional()
        self._forget()
        if flush:
            self._engine.release()
        return events

    # --- words and tokens --------------------------------------------------------------------

    @staticmethod
    def _as_word(w: str | Word) -> Word:
        if isinstance(w, Word):
            return w
        if isinstance(w, str):
            return Word(w)
        raise InputError(f"a word is a str or a Word, got {type(w).__name__}")

    def _add(self, w: Word) -> None:
        index = self._word_base + len(self._words)
        self._words.append(w)
        tokens = normalize(w.text)
        for token, pieces in zip(tokens, self.pieces.encode(tokens)):
            self._engine.append(token, pieces)
            self._tok_word.append(index)
            self._n_tokens += 1
        self._hear(w)

    def _hear(self, w: Word) -> None:
        """Move the clock to the word's time (a word without one leaves it)."""
        if w.time is not None:
            self._clock = max(self._clock, w.time)

    def _drop_tentative(self) -> None:
        self._guess_start = None
        if self._tentative:
            self._cut(self.n_words)
            self._tentative = 0

    def _cut(self, index: int) -> None:
        """Forget the words from ``index`` on (none final) and their tokens."""
        cut = self._first_token_of(index)
        del self._words[index - self._word_base :]
        del self._tok_word[cut - self._tok_base :], self._tok_label[cut - self._tok_base :]
        self._engine.truncate(cut)
        self._n_tokens = cut
        self._final_tokens = min(self._final_tokens, cut)
        self._shown = {i: label for i, label in self._shown.items() if i < index}

    def _word_of(self, t: int) -> Word:
        return self._words[self._tok_word[t - self._tok_base] - self._word_base]

    def _place(self, t: int, ahead: int) -> Place:
        """What token ``t``'s decision with ``ahead`` tokens after it may read of the words the
        stream holds (:func:`~streampunct.decision.place`); at its word's deadline with nothing
        after it, the silence heard after the word (:meth:`_silence_after`)."""
        silence = self._silence_after(self._word_of(t), t) if ahead == 0 else None
        return place(t, self._n_tokens, ahead, self._token_word, self._word_at, silence)

    def _token_word(self, t: int) -> int:
        """Token ``t``'s word; -1 for a token before the first one kept (an earlier word's, see _forget)."""
        return self._tok_word[t - self._tok_base] if t >= self._tok_base else -1

    def _word_at(self, index: int) -> Word:
        return self._words[index - self._word_base]

    def _silence_after(self, word: Word, t: int) -> Word | None:
        """A word decided at its deadline with no token after it: the silence heard after it, up
        to the start of the word after it if one has arrived, else up to the deadline (the pause
        is at least that long), as a word without text there; None when not at a deadline."""
        deadline = self.policy.deadline(word)
        if deadline is None or self._clock < deadline:
            return None
        start = self._word_of(t + 1).start if t + 1 < self._n_tokens else self._guess_start
        until = deadline if start is None else min(start, deadline)
        return Word("", until, until)

    def _first_token_of(self, word: int) -> int:
        """The first token of ``word`` or of the first word after it that has tokens."""
        return self._tok_base + bisect.bisect_left(self._tok_word, word)

    # --- events --------------------------------------------------------------------------------

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

    def _close_sentences(self, sentence: Captioner, finals: list[PunctEvent], flush: bool) -> list[Sentence]:
        """The open ``sentence`` takes the final words: the sentences they close (with ``flush``, the last)."""
        lines: list[tuple[Caption, str]] = []
        for e in finals:
            sentence.add_words(e.index, [self._word_at(e.index)])
            closed = "mark" if e.label in SENTENCE_ENDS else "length"
            lines += [(c, closed) for c in sentence.add([e])]
        if flush:
            lines += [(c, "end") for c in sentence.flush(end_sentence=False)]
        return [Sentence(c.text, c.start, c.end, c.first, c.last, closed) for c, closed in lines]

    def _provisional(self) -> list[PunctEvent]:
        """A label for each committed word not final yet (its last token's), when it changed;
        tentative words get none, and no model work."""
        end = self._first_token_of(self.n_words)  # where the committed words' tokens end
        last_tokens = [
            t
            for t in range(self._final_tokens, end)
            if t + 1 == end or self._tok_word[t + 1 - self._tok_base] != self._tok_word[t - self._tok_base]
        ]
        events = []
        logits = self._engine.provisional(last_tokens, self._final_tokens)
        for t, row in zip(last_tokens, logits):
            i = self._tok_word[t - self._tok_base]
            ahead = self._n_tokens - 1 - t
            label = self._decider.decide(row, self._place(t, ahead), ahead).label
            if self._shown.get(i) != LABELS[label]:
                self._shown[i] = LABELS[label]
                events.append(PunctEvent(i, self._words[i - self._word_base].text, LABELS[label], False))
        return events

    def _forget(self) -> None:
        """Drop what no decision or revision can need again: memory stays flat however long the
        stream. A revision may cut from the first token of the first word not final, which can
        be before the first token not final (a word half decided): keep everything from there."""
        open_from = min(self._final_tokens, self._first_token_of(self._final_words))
        self._engine.settle(open_from)
        if open_from - self._tok_base >= self.FORGET_EVERY:
            drop = open_from - self._tok_base
            del self._tok_word[:drop], self._tok_label[:drop]
            self._tok_base = open_from
        keep = self._final_words - 1  # the last final word: the pause before the next one
        if keep - self._word_base >= self.FORGET_EVERY:
            del self._words[: keep - self._word_base]
            self._word_base = keep
