"""Pauses as evidence (MuSe, Sunkara et al. 2020): what a recogniser's word times say about marks.

Every recogniser that gives word times tells how long the speaker paused before and after each
word and how long the word took (speakers slow down before a boundary). :func:`pause_features`
turns those into a few numbers per token, and :class:`PauseFusion`, a small network over the text
model's logits and those numbers, adds its correction to the logits before the decision.

The bound holds: the features of token ``t`` decided with ``ahead`` tokens after it read only
the words up to ``t + ahead`` (the pause after ``t`` is the start of the next word, so at k=0 it
is unknown until a later word arrives, and it is left out). A stream with a time limit knows one
more thing at a word's deadline when no word follows it: the silence heard after it, at least up
to the deadline; the word is then decided with that silence as its pause (a time, no text). The
cost is a few hundred multiply-adds per decision. It is optional: a word without times, or a checkpoint without ``pause_fusion``,
decides from the text alone, exactly as before, and ``Punctuator.stream(pauses=False)`` turns it
off. What a decision reads and when the fusion applies is :mod:`streampunct.decision`'s, for
streams and ``predict()`` alike, so a stream's final labels still equal ``predict()``'s.

The recogniser's own marks are evidence too (``pause_marks`` in a checkpoint's config): Whisper
writes "Yeah." and "so," with marks that are precise where it sets them but that it often leaves
out (in a live stream it may stop punctuating for minutes). The mark a word arrived with is three
more features on its last token; it is known when the word arrives, so it counts at k=0 too. A
recogniser that writes no marks gives zeros, which the fusion has learnt as "no evidence".
A streamed recogniser also writes periods where a window of audio ends or its speaker pauses
mid-sentence, and a later pass goes on with the sentence in lower case ("concerned. differs"):
``pause_continued`` adds one more feature, a sentence-end mark followed by a word that starts in
lower case, known once the decision sees the word after (k >= 1).

Training (:mod:`streampunct.training.pause_train`): the text model stays frozen; the fusion learns from
its logits over text whose words carry times from a pause model (:func:`synthetic_times`) fitted
on recognised human speech, and marks from a model of a recogniser's (:func:`synthetic_marks`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from .text import LABELS, MARKS, mark_of
from .types import Word

__all__ = [
    "N_FEATURES",
    "MARK_FEATURES",
    "n_features",
    "AHEAD_SLOTS",
    "pause_features",
    "PauseFusion",
    "synthetic_times",
    "synthetic_marks",
]

N_FEATURES = 6  # pauses and duration
MARK_FEATURES = 3  # the recogniser's own COMMA, PERIOD, QUESTION
SENTENCE_ENDS = ("PERIOD", "QUESTION")
AHEAD_SLOTS = 5  # the lookahead a decision had: 0, 1, 2, 3 or more, offline


def n_features(marks: bool, continued: bool) -> int:
    """How many features a token has: pauses, then the marks, then the continuation."""
    return N_FEATURES + MARK_FEATURES * marks + continued


def starts_lower(text: str) -> bool:
    """Whether a word as the recogniser wrote it starts in lower case ("differs", not "I" or "2006")."""
    return next((c for c in text if c.isalpha()), "A").islower()


def _pause(end: float | None, start: float | None) -> tuple[float, float]:
    """(known, log-scaled pause) between a word ending at ``end`` and the next starting at ``start``."""
    if end is None or start is None:
        return 0.0, 0.0
    return 1.0, math.log1p(max(0.0, start - end) / 0.1)


def pause_features(
    word: Word,
    before: Word | None,
    after: Word | None,
    last_of_word: bool,
    first_of_word: bool,
    marks: bool = False,
    continued: bool = False,
) -> list[float] | None:
    """The pause evidence of one token, or None when its word has no times.

    ``before``: the word before the token's word (None at the start); ``after``: the word after it,
    when the decision may see it (None: not seen yet). A token inside a word ("do" of "don't") has
    no pause after it; its word's pause is on the word's last token. ``marks``: add the one-hot
    mark the word was written with (on its last token; zeros for none and inside a word).
    ``continued``: add whether that mark ends a sentence and ``after`` starts in lower case (the
    recogniser went on with the sentence; 0 while ``after`` is not seen).
    """
    if word.start is None or word.end is None:
        return None
    # inside a word the pause is known to be none; at its edges, known when that word is seen
    has_after, gap_after = _pause(word.end, after.start if after else None) if last_of_word else (1.0, 0.0)
    has_before, gap_before = (
        _pause(before.end if before else None, word.start) if first_of_word else (1.0, 0.0)
    )
    chars = max(1, sum(c.isalnum() for c in word.text))
    stretch = math.log((word.end - word.start + 0.02) / (0.065 * chars + 0.05))
    features = [
        has_after,
        gap_after,
        has_before,
        gap_before,
        max(-2.0, min(2.0, stretch)),
        float(last_of_word),
    ]
    own = mark_of(word.text) if last_of_word else "O"
    if marks:
        features += [float(own == label) for label in LABELS[1:]]
    if continued:
        features.append(float(own in SENTENCE_ENDS and after is not None and starts_lower(after.text)))
    return features


def ahead_slot(ahead: int | None) -> int:
    return AHEAD_SLOTS - 1 if ahead is None else min(ahead, AHEAD_SLOTS - 2)


class PauseFusion(nn.Module):
    """Logits and pause features -> corrected logits: ``logits + mlp([log_softmax(logits),
    features, one-hot lookahead]) + offsets[lookahead]``. Starts as the identity (last layer and
    offsets at zero). The offsets play the decision offsets' part (``streampunct calibrate``) for
    the corrected logits: trained on cross-entropy, the correction marks too rarely where little
    is seen ahead, so they are tuned for micro-F1 after training, per lookahead."""

    def __init__(self, n_labels: int = 4, hidden: int = 32, n_features: int = N_FEATURES):
        super().__init__()
        self.inp = nn.Linear(n_labels + n_features + AHEAD_SLOTS, hidden)
        self.out = nn.Linear(hidden, n_labels)
        self.offsets = nn.Parameter(torch.zeros(AHEAD_SLOTS, n_labels), requires_grad=False)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, logits: torch.Tensor, features: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """(N, L) logits, (N, n_features) features, (N,) lookahead slots -> (N, L)."""
        onehot = nn.functional.one_hot(slots, AHEAD_SLOTS).to(logits.dtype)
        x = torch.cat([torch.log_softmax(logits, -1), features.to(logits.dtype), onehot], -1)
        return logits + self.out(nn.functional.gelu(self.inp(x))) + self.offsets[slots]

    @torch.no_grad()
    def correct(
        self, logits: torch.Tensor, features: Sequence[float] | None, ahead: int | None
    ) -> torch.Tensor:
        """One decision's (L,) logits, corrected when its word has times."""
        if features is None:
            return logits
        f = torch.tensor([features], dtype=torch.float32)
        return self(logits.float()[None], f, torch.tensor([ahead_slot(ahead)]))[0]


# --- a pause model, for training data without real times -----------------------------------------

# Seconds of pause after a word, by the mark after it: (share of words followed by a pause of over
# 50 ms, median pause, spread of its log). Measured on Whisper tiny.en's words as the live path
# streams them over the speech dev recordings (40 min of two-party conversation, no recording a
# benchmark reports: ``python -m benchmarks.speech_stats``, results/speech_stats.json).
PAUSES = {
    "O": (0.07, 0.34, 1.03),
    "COMMA": (0.75, 0.53, 0.93),
    "PERIOD": (0.85, 0.96, 0.77),
    "QUESTION": (0.85, 1.22, 0.83),
}


def synthetic_times(
    words: Sequence[str], labels: Sequence[str], rng: np.random.Generator, pauses: dict | None = None
) -> list[Word]:
    """Words with times from a pause model: a speaking rate drawn per text, each word's length from
    its letters, a pause after it drawn by its mark (some marks get none, some plain words get a
    hesitation), and a word before a pause lengthened a little."""
    pauses = pauses or PAUSES
    rate = float(rng.uniform(0.75, 1.35))  # seconds scale: a slower or faster speaker
    scale = float(rng.uniform(0.6, 1.6))  # how long this speaker's pauses are
    clock = 0.0
    out = []
    for word, label in zip(words, labels):
        chars = max(1, sum(c.isalnum() for c in word))
        dur = rate * (0.065 * chars + 0.05) * float(rng.lognormal(0.0, 0.25))
        share, median, spread = pauses[label]
        pause = scale * median * float(rng.lognormal(0.0, spread)) if rng.random() < share else 0.0
        if pause > 0.15:
            dur *= float(rng.uniform(1.0, 1.3))  # pre-boundary lengthening
        out.append(Word(word, round(clock, 3), round(clock + dur, 3)))
        clock += dur + pause
    return out


# --- a recogniser's own marks, for training data without a recogniser ----------------------------

# What a recogniser writes after a word, by the reference mark: the chance of each of its marks at
# full recall (scaled by a per-text recall factor drawn from MARK_RECALL; tried in this order). Measured
# as PAUSES is (speech_stats.py divides each measured rate by MARK_RECALL's mean): a streamed Whisper
# writes a period on half the commas and on most plain words before a long pause; its periods
# and question marks are mostly right where the reference has one.
OWN_MARK_RATES = {
    "O": {"PERIOD": 0.023, "COMMA": 0.02, "QUESTION": 0.006},
    "COMMA": {"PERIOD": 0.531, "COMMA": 0.481, "QUESTION": 0.027},
    "PERIOD": {"PERIOD": 1.0, "COMMA": 0.057, "QUESTION": 0.031},
    "QUESTION": {"QUESTION": 0.966, "PERIOD": 0.282, "COMMA": 0.007},
}
# after a word with the reference's O and a pause of over 0.3 s
PAUSE_MARK_RATES = {"PERIOD": 0.591, "COMMA": 0.251, "QUESTION": 0.15}
MARK_RECALL = (0.5, 1.0)  # the per-text recall factor's range
# The chance that the word after a streamed sentence-end mark starts with a capital, by the
# reference mark of the word before: a period at a sentence end is followed by a capital; one a
# streamed recogniser wrote at a comma or mid-sentence often by a word a later pass wrote in
# lower case, going on with the sentence. Measured as PAUSES is.
CAPITAL_AFTER = {"O": 0.52, "COMMA": 0.63, "PERIOD": 0.93, "QUESTION": 0.87}


def synthetic_marks(
    words: Sequence[Word], labels: Sequence[str], rng: np.random.Generator, unmarked: float = 0.2
) -> list[Word]:
    """Timed words with the marks a recogniser might have written: none at all for a share
    ``unmarked`` of texts (a recogniser that does not punctuate); else each reference mark kept,
    changed or left out by :data:`OWN_MARK_RATES` times a recall factor drawn per text, and some
    plain words before a pause of over 0.3 s marked (:data:`PAUSE_MARK_RATES`); the word after a
    sentence-end mark capitalised or not by :data:`CAPITAL_AFTER`."""
    if rng.random() < unmarked:
        return list(words)
    recall = float(rng.uniform(*MARK_RECALL))
    out = []
    for i, (word, label) in enumerate(zip(words, labels)):
        rates = OWN_MARK_RATES[label]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if (
            label == "O"
            and nxt
            and nxt.start is not None
            and word.end is not None
            and nxt.start - word.end > 0.3
        ):
            rates = PAUSE_MARK_RATES
        draw, own = rng.random(), "O"
        for mark, rate in rates.items():
            if draw < rate * recall:
                own = mark
                break
            draw -= rate * recall
        out.append(Word(word.text + MARKS[own], word.start, word.end))
    for i in range(1, len(out)):  # the case of the word after a sentence end, as a later pass writes it
        if mark_of(out[i - 1].text) in SENTENCE_ENDS:
            capital = out[i].text == "i" or rng.random() < CAPITAL_AFTER[labels[i - 1]]
            text = out[i].text
            out[i] = replace(out[i], text=(text[:1].upper() if capital else text[:1].lower()) + text[1:])
    return out
