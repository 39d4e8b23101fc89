"""Guards on a recognition pass's hypothesis: a phrase looped beyond a bound, or more words than its
audio can hold. Whisper, tiny.en above all, can fall into writing one phrase again and again ("and so
and so and so ...") over silence or noise; such a pass is cut where the guard finds it, and the
recogniser resets its buffer past it (:class:`~streampunct.speech.StreamingRecognizer`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .agreement import word_key

__all__ = ["MAX_REPEATS", "MAX_PHRASE_WORDS", "MAX_WORDS_PER_S", "WORDS_SLACK", "loop_cut", "runaway_cut"]

# A phrase of up to MAX_PHRASE_WORDS words said more than MAX_REPEATS times in a row is a loop: the
# copies after the MAX_REPEATS-th are cut. People repeat a word or two ("no, no, no"); a recogniser's
# loop runs to dozens of copies.
MAX_REPEATS = 4
MAX_PHRASE_WORDS = 8
# More words than this a second of the pass's audio (and WORDS_SLACK) cannot be speech: fast speech is
# about 4 words a second.
MAX_WORDS_PER_S = 6.0
WORDS_SLACK = 4


def loop_cut(
    texts: Sequence[str], max_repeats: int = MAX_REPEATS, max_phrase: int = MAX_PHRASE_WORDS
) -> int | None:
    """The index of the first word past a loop (a phrase of at most ``max_phrase`` words said more
    than ``max_repeats`` times in a row, the copies past ``max_repeats`` cut), or None: no loop."""
    keys = [word_key(t) for t in texts]
    n = len(keys)
    for i in range(n):
        for size in range(1, max_phrase + 1):
            if i + size * (max_repeats + 1) > n:
                break
            phrase = keys[i : i + size]
            copies = 1
            while keys[i + copies * size : i + (copies + 1) * size] == phrase:
                copies += 1
                if copies > max_repeats:
                    return i + max_repeats * size
    return None


def runaway_cut(words: int, seconds: float) -> int | None:
    """Where a pass of ``words`` over ``seconds`` of audio is cut for writing more than its audio
    can hold (MAX_WORDS_PER_S a second, WORDS_SLACK more), or None."""
    most = math.floor(MAX_WORDS_PER_S * seconds) + WORDS_SLACK
    return most if words > most else None
