"""Stateful property tests of PunctStream: hypothesis drives a stream the way recognisers do.

A run is a random sequence of pushes (0 to 40 words, with or without times, in bursts and after
pauses), revisions (of words not final, and of final ones, which must be refused and change
nothing), ticks of the recogniser's clock and a finish, on either engine, k = 0 to 4 or 64, with
and without a time limit. After every step:

- nothing but the documented errors is raised;
- every word gets exactly one final event, in word order, never changed, and no provisional event
  follows a word's final one;
- each final label is the one ``predict()`` gives for the words as they stood when it was decided:
  with its full lookahead, ``predict(words, k)``; decided early by a time limit, ``predict()`` on
  the words that had ended by its deadline (the stream's documented rule);
- what the stream holds stays bounded, however long it runs;
- its sentences cover the words in turn, each closed once, as soon as its last word is final (at
  its final PERIOD or QUESTION, after ``SENTENCE_WORDS`` words, or at the finish), with its words'
  times, and their texts joined are the captions' text of all the words with their final marks.

The CI profile (the default, see conftest.py) runs enough examples to find a stream that breaks
after a few hundred words; ``--hypothesis-profile=soak`` runs many more, for about an hour (see
docs/testing.md).
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streampunct import InputError, Punctuator
from streampunct.decision import place
from streampunct.engines import make_engine
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.stream import PunctStream, Word
from streampunct.text import LABELS, caption_text, normalize, normalize_text
from streampunct.types import SENTENCE_ENDS, Sentence

# Recogniser words: casing, glued marks, clitics, numbers, and words that normalise to nothing.
VOCABULARY = (
    "so today i want to talk about something that happened last year don't you think it's strange "
    "nobody noticed we'll see -- maybe the U.S. will change its mind What would I'd call Mr. Smith "
    "who's been there since 9:00 well can't say wasn't surprised but won't stop here yeah okay uh"
).split() + ["", "Hello,", "right?", "Okay.", "10,000", "...", "e-mail"]


@functools.cache
def tiny() -> Punctuator:
    """A random 6-layer model with tiny windows (block 4, context 6): cheap, and its streams
    forget old words every few pushes, where a stream's bookkeeping is put to the test. It has
    pause fusion with a large correction, so timed words decide by their pauses too."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        n_layer=6, n_head=2, n_embd=32, n_inner=64, block=4, context=6, dropout=0.0, pause_hidden=8
    )  # fmt: skip
    p = Punctuator(PunctModel(cfg).eval(), WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))
    with torch.no_grad():  # labels that vary, so that a wrong decision shows
        p.model.head.bias.copy_(torch.tensor([0.0, -0.2, -0.3, -0.6]))
        p.decider.pause_fusion.out.weight.normal_(0, 2.0)
    # Decision offsets for each lookahead and engine, as a calibrated checkpoint has them.
    offsets = [[0.0, 0.1 * j, -0.1 * j, 0.05 * j] for j in range(5)]
    p.model.set_label_bias(offsets + [[0.0, 0.2, 0.1, 0.0]], offsets)
    return p


@functools.cache
def shipped() -> Punctuator:
    return Punctuator.load(device="cpu")


def tokens_of(word: Word) -> int:
    return len(normalize(word.text))


class StreamMachine(RuleBasedStateMachine):
    """One stream of one punctuator; subclasses choose the punctuator and the settings drawn."""

    punctuator = staticmethod(tiny)
    engines = ("masked", "window")
    lookaheads = (0, 1, 2, 3, 4, 64)
    delays = (None, 0.0, 300.0, 1500.0)
    guesses = (0, 0, 1, 2, 3, 40)  # tentative words after a push (40: a loop, longer than the window)

    @initialize(data=st.data())
    def open(self, data):
        self.p = self.punctuator()
        self.engine = data.draw(st.sampled_from(self.engines), "engine")
        self.k = data.draw(st.sampled_from(self.lookaheads), "k")
        self.delay = data.draw(st.sampled_from(self.delays), "max_delay_ms")
        self.stream = self.p.stream(
            lookahead=self.k, max_delay_ms=self.delay, engine=self.engine, sentences=True
        )
        self.words: list[Word] = []  # the words as they stand now
        self.tentative: list[Word] = []  # the recogniser's guess after them, lookahead only
        self.finals: dict[int, str] = {}
        # (words it saw, whether it had its full lookahead, where the silence it heard after it
        # ends, the epoch, index, label); an epoch ends at each revision, and its longest text is
        # the last one before it.
        self.checks: list[tuple[tuple[Word, ...], bool, float | None, int, int, str]] = []
        self.epochs: list[tuple[Word, ...]] = [()]
        self.sentences: list[Sentence] = []
        self.clock = -math.inf  # the recogniser's clock as the stream sees it
        self.time = 0.0  # where the next word starts
        self.finished = False

    # --- what a recogniser does ----------------------------------------------------------------

    def _new_words(self, data, n: int, timed: bool) -> list[Word]:
        out = []
        for _ in range(n):
            text = data.draw(st.sampled_from(VOCABULARY))
            if not timed:
                out.append(Word(text))
                continue
            self.time += data.draw(st.sampled_from([0.0, 0.05, 0.1, 0.1, 0.1, 0.5, 1.2, 3.0]))  # gap
            length = data.draw(st.sampled_from([0.0, 0.15, 0.25, 0.4]))
            out.append(Word(text, round(self.time, 3), round(self.time + length, 3)))
            self.time += length
        return out

    def _run(self, events, words_now: list[Word], tentative: int = 0) -> None:
        """``words_now``: the words the stream holds, of which the last ``tentative`` are tentative."""
        for e in events:
            assert 0 <= e.index < len(words_now) - tentative, f"an event for a tentative word: {e}"
            assert e.word == words_now[e.index].text, e
            if e.final:
                assert e.index not in self.finals, f"word {e.index} made final twice"
                assert e.index == len(self.finals), "final decisions come in word order"
                self.finals[e.index] = e.label
                seen, full, silence = self._seen(e.index, words_now)
                self.checks.append((tuple(seen), full, silence, len(self.epochs) - 1, e.index, e.label))
            else:
                assert e.index not in self.finals, f"a provisional event for final word {e.index}"
        assert self.stream.n_final == len(self.finals)
        assert self.stream.n_words == len(words_now) - tentative
        self._sentences(self.stream.take_sentences(), words_now)
        self.epochs[-1] = tuple(words_now)
        if tentative:  # the next call replaces them: what follows is another text
            self.epochs.append(())

    def _sentences(self, closed: list[Sentence], words: list[Word]) -> None:
        """The sentences a call closed: the next words in turn, all final, each closed by what its
        ``closed`` says; and none left open that should have closed."""
        for s in closed:
            first = self.sentences[-1].last + 1 if self.sentences else 0
            assert s.first == first <= s.last < len(self.finals), f"{s}: not the next words, all final"
            labels = [self.finals[i] for i in range(s.first, s.last + 1)]
            assert not set(labels[:-1]) & set(SENTENCE_ENDS), f"{s} holds the end of a sentence"
            full = len(labels) == PunctStream.SENTENCE_WORDS
            closed_by = "mark" if labels[-1] in SENTENCE_ENDS else "length" if full else "end"
            assert s.closed == closed_by and (closed_by != "end" or self.finished), s
            assert (s.start, s.end) == (words[s.first].start, words[s.last].end), s
            self.sentences.append(s)
        open_from = self.sentences[-1].last + 1 if self.sentences else 0
        still = [self.finals[i] for i in range(open_from, len(self.finals))]
        assert not set(still) & set(SENTENCE_ENDS) and len(still) < PunctStream.SENTENCE_WORDS, still
        if self.finished:
            assert open_from == len(self.words), "the finish closes the last sentence"

    def _seen(self, i: int, words: list[Word]) -> tuple[list[Word], bool, float | None]:
        """The words that decide word ``i``'s final label now, whether they give it its full
        lookahead, and the silence it heard: up to its k-th token after it or, when the clock has
        passed the word's deadline, the words that had ended by then; with none of them, the
        silence after it up to the next word's start or the deadline, whichever is first (the
        stream's documented rule)."""
        w = words[i]
        deadline = None if self.delay is None or w.end is None else w.end + self.delay / 1000
        if deadline is not None and self.clock < deadline:
            deadline = None
        n, j = i + 1, 0
        while n < len(words) and j < self.k:
            end = words[n].end
            if deadline is not None and tokens_of(words[n]) and (end is None or end > deadline):
                break
            j += tokens_of(words[n])
            n += 1
        if deadline is None or j or not tokens_of(w):
            return words[:n], j >= self.k, None
        starts = [u.start for u in words[i + 1 :] if tokens_of(u)]
        until = deadline if not starts or starts[0] is None else min(starts[0], deadline)
        return words[:n], False, until

    def _tick(self, now: float | None) -> None:
        if now is not None:
            self.clock = max(self.clock, now)

    @rule(
        data=st.data(),
        n=st.integers(0, 40),
        timed=st.booleans(),
        late=st.sampled_from([None, 0.0, 0.2, 2.0]),
    )
    def push(self, data, n, timed, late):
        """Words, and perhaps the recogniser's guess after them (tentative: lookahead only)."""
        words = self._new_words(data, n, timed)
        guess = data.draw(st.sampled_from(self.guesses), "tentative words")
        start = self.time  # the next words replace the guess: they start where it started
        tentative = self._new_words(data, guess, timed)
        now = None if late is None else self.time + late
        for w in words + tentative:
            if w.end is not None:
                self.clock = max(self.clock, w.end)
        self._tick(now)
        self.words += words
        self.time = start if tentative else self.time
        self.tentative = tentative
        self._run(
            self.stream.push(words, now=now, tentative=tentative), self.words + tentative, len(tentative)
        )

    @rule(data=st.data(), n=st.integers(0, 6), timed=st.booleans())
    def revise(self, data, n, timed):
        index = data.draw(st.integers(len(self.finals), len(self.words)), "index")
        if index < len(self.words) and self.words[index].start is not None:
            self.time = self.words[index].start
        words = self._new_words(data, n, timed)
        for w in words:
            if w.end is not None:
                self.clock = max(self.clock, w.end)
        self.words = self.words[:index] + words
        self.tentative = []  # dropped by any call but a tick
        self.epochs.append(())
        self._run(self.stream.revise(index, words), self.words)

    @precondition(lambda self: len(self.finals) > 0)
    @rule(data=st.data())
    def revise_a_final_word(self, data):
        index = data.draw(st.integers(0, len(self.finals) - 1), "index")
        with pytest.raises(InputError, match="final"):
            self.stream.revise(index, [Word("no")])
        self.tentative = []
        self._run(self.stream.push([]), self.words)  # the stream goes on as if nothing happened

    @rule(pause=st.sampled_from([0.0, 0.1, 0.5, 1.0, 3.0, 30.0]))
    def tick(self, pause):
        self.time += pause
        self._tick(self.time)
        self._run(self.stream.tick(self.time), self.words + self.tentative, len(self.tentative))

    def finish(self):
        """The end of every run (in teardown, so that runs are long): all words final, and the
        stream refuses every call after it."""
        self.finished = True
        self.tentative = []
        self._run(self.stream.finish(), self.words)
        assert sorted(self.finals) == list(range(len(self.words))), "every word gets a final label"
        labels = [self.finals[i] for i in range(len(self.words))]
        whole = caption_text([w.text for w in self.words], labels)
        assert " ".join(s.text for s in self.sentences if s.text) == whole, "the sentences are the text"
        args = {"push": (["more"],), "revise": (len(self.words), ["more"]), "tick": (1e6,), "finish": ()}
        for call in args:
            with pytest.raises(InputError, match="finished"):
                getattr(self.stream, call)(*args[call])

    # --- what must hold after every step ------------------------------------------------------

    @invariant()
    def holds_a_bounded_amount(self):
        if not hasattr(self, "stream"):
            return
        held = self.stream.held()
        open_words = self.words[len(self.finals) :] + self.tentative  # tentative words are held too
        open_tokens = sum(tokens_of(w) for w in open_words)
        cfg, every = self.p.model.cfg, PunctStream.FORGET_EVERY
        assert held.tokens <= open_tokens + max(every, 5 * cfg.block + cfg.context + 1), (held, open_tokens)
        assert held.words <= len(open_words) + every, held

    def teardown(self):
        """Every final label against a fresh computation on the words it was decided from: with
        its full lookahead, ``predict()`` on the longest text of its epoch (the words after t + k
        change nothing); decided early, by a time limit or at the finish, the word's own window
        over exactly the words it saw, which is what ``predict()`` on those words computes for
        it (their last words are decided with the lookahead they have)."""
        if not hasattr(self, "stream"):
            return
        self.finish()
        by_text: dict[tuple[Word, ...], list[tuple[int, str]]] = {}
        for seen, full, silence, epoch, i, label in self.checks:
            if full or self.p.model.cfg.n_tags:  # a fused model's early decisions: the finish's
                by_text.setdefault(self.epochs[epoch] if full else seen, []).append((i, label))
            else:
                assert label == self._decided_early(seen, i, silence), (
                    f"word {i} of {len(seen)}, decided early"
                )
        for text, decided in by_text.items():
            expected = self.p.predict(list(text), lookahead=self.k, engine=self.engine)
            for i, label in decided:
                assert label == expected[i], f"word {i} of {len(text)}: {label}; predict() says {expected[i]}"

    def _decided_early(self, seen: tuple[Word, ...], i: int, silence: float | None) -> str:
        tokens, source = normalize_text([w.text for w in seen])
        mine = [t for t, word in enumerate(source) if word == i]
        if not mine:
            return "O"  # a word without tokens ("--")
        t, ahead = mine[-1], len(tokens) - 1 - mine[-1]
        engine = make_engine(self.p.model, self.engine, self.k)
        logits = engine.window_logits(self.p.pieces.encode(tokens), t, ahead)
        # with a silence (decided with nothing after it), heard after the word up to a word without text
        after = None if silence is None else Word("", silence, silence)
        at = place(t, len(tokens), ahead, source.__getitem__, seen.__getitem__, after)
        return LABELS[self.p.decider.decide(logits, at, ahead).label]


TestTinyStream = StreamMachine.TestCase


class ShippedStream(StreamMachine):
    punctuator = staticmethod(shipped)
    engines = ("auto", "masked")
    lookaheads = (0, 2, 4)
    delays = (None, 1500.0)


TestShippedStream = ShippedStream.TestCase
TestShippedStream.settings = settings(settings.default, max_examples=3, stateful_step_count=25)


@functools.cache
def tagged() -> Punctuator:
    """A random POS-fused model over the real tagger's 53 tags (flair's, installed once as the
    ``tagger_dir`` fixture does: hypothesis' state machines take no fixtures): its streams run the
    tag stream beside the words."""
    from streampunct.pos import Tagger, fetch_tagger

    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=32, n_inner=64, block=4, context=6, dropout=0.0, n_tags=53)
    model = PunctModel(cfg).eval()
    folder = fetch_tagger()
    model.init_pos_embedding(Tagger.load(folder).embedding)
    with torch.no_grad():
        model.head.bias.copy_(torch.tensor([0.0, -0.2, -0.3, -0.6]))
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces), folder)


class TaggedStream(StreamMachine):
    """A fused model: the masked engine with its tag stream. Without time limits only: a word
    decided early reads tags that later words helped make final, which predict() on the words it
    saw cannot reproduce (the stream's documented behaviour)."""

    punctuator = staticmethod(tagged)
    engines = ("auto",)
    lookaheads = (0, 1, 2, 4)
    delays = (None,)

    # Not a rule here: revisions of a fused stream are an open bug. With seed
    # 329196514437110590879919982168658668583 a run of pushes and revisions makes a word final
    # with a label predict() does not give (O against COMMA), on the code before issue 18 too.
    # Until it is fixed, this machine checks fused streams without revisions, nor tentative
    # words (the next call replaces them: a revision).
    guesses = (0,)

    def revise(self, data, n, timed):  # type: ignore[override]
        raise AssertionError("not a rule of TaggedStream")


TestTaggedStream = TaggedStream.TestCase
TestTaggedStream.settings = settings(settings.default, max_examples=3, stateful_step_count=12)
