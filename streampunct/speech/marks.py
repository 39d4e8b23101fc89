"""The recogniser's whole belief about the mark after each word, read from the pass that already runs.

Whisper writes a mark after a word when its decoder's most likely next token is one; the mark it
happened to write is one bit of what it believes. Its decoder gives, at each word's end, a
probability to ``,``, ``.``, ``?`` and to going on, with the audio after the word in view as far
as the pass's buffer reaches. CTranslate2 returns those distributions with the tokens it writes
(``return_logits_vocab``): :func:`listening` asks for them on every decode of a pass (no second
recognition, no other model), and :func:`word_marks` reads them at the end of each word of the
decoded sequence, words split and marks merged as faster-whisper splits and merges them, so that
:func:`attach` can give each of the pass's words its own.

A word's :attr:`~streampunct.types.Cues.marks` are four probabilities: COMMA, PERIOD (``.``,
``!``, ``...``), QUESTION, and the end of a segment (a timestamp token, or the end of the text:
Whisper starts a new segment where it hears a turn or a long pause). What is left is going on.
"""

from __future__ import annotations

import contextlib
import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..types import Cues, Word
from .agreement import word_key
from .whisper import APPEND, PREPEND, tokenizer_of

__all__ = ["MarkTokens", "listening", "word_marks", "attach", "heard_marks"]


@dataclass(frozen=True)
class MarkTokens:
    """The token ids of each mark class in a Whisper vocabulary, and where text tokens end."""

    comma: np.ndarray
    period: np.ndarray
    question: np.ndarray
    eot: int

    @classmethod
    def of(cls, tokenizer: Any) -> MarkTokens:
        """From a faster-whisper tokenizer: a token is a mark when its text, stripped, is marks and
        quotes only; ``?`` makes it a QUESTION, else ``.`` or ``!`` a PERIOD, else ``,`` a COMMA."""
        groups: dict[str, list[int]] = {"comma": [], "period": [], "question": []}
        marks = set(string.punctuation) | set("“”")
        for token in range(tokenizer.eot):
            text = tokenizer.decode([token]).strip()
            if not text or not set(text) <= marks:
                continue
            if "?" in text:
                groups["question"].append(token)
            elif "." in text or "!" in text:
                groups["period"].append(token)
            elif "," in text:
                groups["comma"].append(token)
        return cls(**{k: np.array(v, dtype=np.int64) for k, v in groups.items()}, eot=tokenizer.eot)

    def probabilities(self, logits: np.ndarray) -> tuple[float, float, float, float]:
        """One decoding step's logits -> P(COMMA), P(PERIOD), P(QUESTION), P(segment end)."""
        z = np.asarray(logits, dtype=np.float64)
        p = np.exp(z - z.max())
        p /= p.sum()
        comma, period, question, end = (
            min(1.0, float(x))  # a class that takes it all sums to 1 and a rounding error
            for x in (p[self.comma].sum(), p[self.period].sum(), p[self.question].sum(), p[self.eot :].sum())
        )
        return comma, period, question, end  # the end: of the text, timestamps (and specials)


@contextlib.contextmanager
def listening(model: Any, on: bool = True) -> Iterator[list[tuple[list[int], list[Any]]]]:
    """While open (and ``on``), every decode on faster-whisper ``model`` also returns its logits; yields the
    list of (written tokens, logits per step) each decode appends to. Not thread-safe, as a pass
    is not (:func:`~.whisper.encoder_window`)."""
    decodes: list[tuple[list[int], list[Any]]] = []
    inner = getattr(model, "model", None)
    if not on or inner is None or not hasattr(inner, "generate"):  # not faster-whisper's: nothing to read
        yield decodes
        return

    decoder: Any = inner

    class _Listening:
        def __getattr__(self, name: str) -> Any:
            return getattr(decoder, name)

        def generate(self, *args: Any, **kwargs: Any) -> Any:
            results = decoder.generate(*args, **{**kwargs, "return_logits_vocab": True})
            if results and kwargs.get("beam_size", 5) == 1:  # a beam's logits are not one path's
                decodes.append((list(results[0].sequences_ids[0]), list(results[0].logits[0])))
            return results

    model.model = _Listening()
    try:
        yield decodes
    finally:
        model.model = inner


def word_marks(
    tokenizer: Any, tokens: MarkTokens, written: Sequence[int], logits: Sequence[Any]
) -> list[tuple[str, tuple[float, float, float, float] | None]]:
    """The words of one decode (``written``: its tokens; ``logits``: the step that wrote each, and
    possibly one more) with the mark probabilities at each word's end: the step after its last
    token that is not a mark (None past the last step)."""
    words: list[tuple[str, int]] = []  # text, position of its last token
    run: list[int] = []
    for at, token in enumerate([*written, tokens.eot]):
        if token < tokens.eot:
            run.append(at)
            continue
        if run:
            pieces, groups = tokenizer.split_to_word_tokens([written[i] for i in run])
            position = run[0]
            for piece, group in zip(pieces, groups):
                position += len(group)
                if (
                    words
                    and piece.strip()
                    and set(piece.strip()) <= set(APPEND)
                    and not piece.startswith(" ")
                ):
                    words[-1] = (words[-1][0] + piece, words[-1][1])  # a mark joins its word
                elif words and words[-1][0].strip() and set(words[-1][0].strip()) <= set(PREPEND):
                    words[-1] = (words[-1][0] + piece, position - 1)  # an opening quote its next
                else:
                    words.append((piece, position - 1))
            run = []
    out: list[tuple[str, tuple[float, float, float, float] | None]] = []
    for text, last in words:
        if text.strip():
            step = last + 1
            out.append((text.strip(), tokens.probabilities(logits[step]) if step < len(logits) else None))
    return out


def heard_marks(
    model: Any, words: Sequence[Word], decodes: Sequence[tuple[list[int], list[Any]]]
) -> list[Word]:
    """A pass's ``words`` with the mark probabilities its ``decodes`` (:func:`listening`) gave,
    read with ``model``'s tokenizer and mark tokens (made once per model)."""
    tokenizer = tokenizer_of(model)
    tokens = getattr(model, "_streampunct_mark_tokens", None)
    if tokens is None:
        tokens = model._streampunct_mark_tokens = MarkTokens.of(tokenizer)
    return attach(words, [m for d in decodes for m in word_marks(tokenizer, tokens, *d)])


def attach(words: Sequence[Word], heard: Sequence[tuple[str, tuple[float, ...] | None]]) -> list[Word]:
    """``words`` (a pass's, in order) with the mark probabilities of the decoded word each is:
    matched in order by text (a word without a match, a few words on, gets none)."""
    out, j = [], 0
    for w in words:
        key = word_key(w.text)
        match = next((k for k in range(j, min(j + 4, len(heard))) if word_key(heard[k][0]) == key), None)
        if match is None or heard[match][1] is None:
            out.append(w)
            continue
        j = match + 1
        cues = w.cues or Cues()
        out.append(replace(w, cues=replace(cues, marks=heard[match][1])))
    return out
