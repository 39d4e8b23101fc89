"""The streaming recogniser's commit policy: LocalAgreement-2 and the sooner commits it is configured
with (:mod:`streampunct.speech.recognizer` describes each)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..text import normalize
from ..types import Word

__all__ = ["LocalAgreement", "UNSURE_BELOW", "word_key"]


# A word the recogniser gives a probability under this is unsure: it settles after
# ``settle_unsure_after_s`` (LocalAgreement).
UNSURE_BELOW = 0.5
# A hypothesis whose new words restate this many of the last committed words or more, after at
# most RESTATED_LEAD others, decoded them twice: they are dropped (people seldom say five words
# twice in a row; a repeated phrase of fewer stays).
RESTATED_WORDS, RESTATED_LEAD = 5, 3


def word_key(text: str) -> str:
    """A word as two hypotheses are compared on it: normalised, marks and case off."""
    return " ".join(normalize(text)) or text.strip().lower()


@dataclass
class LocalAgreement:
    """Commit the longest common prefix of the last two hypotheses (LocalAgreement-2).

    Two ways to commit a word on first sight, without waiting for a second hypothesis (None:
    LocalAgreement-2 only); either commits it only with every uncommitted word before it:

    - ``confident``: the recogniser's probability for it is at least this, and its audio ends
      ``margin_s`` before the end of the audio heard (the last words of a hypothesis are the ones
      a recogniser still changes);
    - ``settle_after_s``: its audio ends at least this long (and ``margin_s``) before the end of
      the audio heard, so that a word the passes keep disagreeing on waits no longer than that
      (and a pass); ``settle_unsure_after_s`` instead where the recogniser's probability for it
      is under ``UNSURE_BELOW`` (None: the same). An unsure word is often one that a later pass
      drops or changes; letting it wait longer kept 0.9 WER points on an earnings call for 0.06 s
      of p95 (docs/latency.md).

    ``agree_after_s``: two hypotheses' agreement commits a word only where the earlier of them
    had heard at least this much audio after it (None: any agreement commits); why:
    :mod:`streampunct.speech.recognizer`'s docstring, "Committing".

    ``context_s``: a word agreed on is *held* until a pass has heard this much audio after it
    (None: released at once), and goes out as the latest pass that restated it wrote it. Whisper
    writes marks at the end of what it has heard, which a pass that hears the sentence go on
    takes back ("concerned." then "concerned, differs"); its words are agreed on sooner than its
    marks (docs/conversation.md). Held words are shown with the provisional ones.
    """

    committed: list[Word] = field(default_factory=list)  # agreed words still in the buffer (held too)
    previous: list[Word] = field(default_factory=list)  # the last hypothesis, beyond the commits
    last_end: float = 0.0  # end of the last committed word
    confident: float | None = None
    margin_s: float = 0.25
    settle_after_s: float | None = None
    settle_unsure_after_s: float | None = None
    context_s: float | None = None
    agree_after_s: float | None = None
    held: list[Word] = field(default_factory=list)  # agreed on, waiting for context_s of audio
    previous_heard: float | None = None  # the end of the audio ``previous`` was made from

    def update(
        self,
        hypothesis: list[Word],
        probabilities: list[float] | None = None,
        heard_until: float | None = None,
    ) -> list[Word]:
        """Take a new hypothesis (absolute times; ``probabilities``: the recogniser's, per word;
        ``heard_until``: the end of the audio it was made from); return the words it newly commits."""
        sure = dict(zip(map(id, hypothesis), probabilities or []))
        # Words after the last commit: judged by their midpoint, as Whisper's word times jitter
        # between hypotheses; committed words that a hypothesis restates are dropped by content.
        new = [
            w
            for w in hypothesis
            if w.start is None or w.end is None or (w.start + w.end) / 2 > self.last_end - 0.05
        ]
        new = self._drop_repeated_commits(new)
        commit = []
        while new and self.previous and self._agreed(self.previous[0], new[0]):
            commit.append(new.pop(0))
            self.previous.pop(0)
        if heard_until is not None:
            while new and self._first_sight(new[0], sure.get(id(new[0]), 0.0), heard_until):
                commit.append(new.pop(0))
        self.previous, self.previous_heard = new, heard_until
        return self._release(hypothesis, self._commit(commit), heard_until)

    def _release(self, hypothesis: list[Word], agreed: list[Word], heard_until: float | None) -> list[Word]:
        """The held words, as ``hypothesis`` restates them, and the newly ``agreed`` ones; release
        those that ``context_s`` of the audio heard follows (all of them without a wait or a clock)."""
        held = [_restated(w, hypothesis) for w in self.held] + agreed
        if self.context_s is None or heard_until is None:
            self.held = []
            return held
        until = heard_until - self.context_s
        n = 0
        while n < len(held) and (held[n].end or 0.0) <= until:
            n += 1
        self.held = held[n:]
        return held[:n]

    def _agreed(self, before: Word, now: Word) -> bool:
        """The last hypothesis had ``before`` where this one has ``now``, and (with
        ``agree_after_s``) had heard that much audio after it."""
        if word_key(before.text) != word_key(now.text):
            return False
        if self.agree_after_s is None or self.previous_heard is None or before.end is None:
            return True
        return before.end <= self.previous_heard - self.agree_after_s

    def _first_sight(self, word: Word, probability: float, heard_until: float) -> bool:
        if word.end is None:
            return False
        # never within margin_s of the end of the audio heard: a word cut there is heard again
        settle = self._settle_after(probability)
        if settle is not None and word.end <= heard_until - max(settle, self.margin_s):
            return True
        return (
            self.confident is not None
            and probability >= self.confident
            and word.end <= heard_until - self.margin_s
        )

    def _settle_after(self, probability: float) -> float | None:
        """The audio after a word that settles it, by how sure the recogniser is of it."""
        if probability < UNSURE_BELOW and self.settle_unsure_after_s is not None:
            return self.settle_unsure_after_s
        return self.settle_after_s

    def settle(self) -> list[Word]:
        """Commit the whole last hypothesis as it stands (the end of speech, or of the stream)."""
        rest, self.previous = self.previous, []
        released, self.held = self.held + self._commit(rest), []
        return released

    def _commit(self, words: list[Word]) -> list[Word]:
        if words:
            self.committed.extend(words)
            self.last_end = words[-1].end or self.last_end
        return words

    def _drop_repeated_commits(self, new: list[Word]) -> list[Word]:
        """A hypothesis may restate the last committed words at the start of its new words: drop
        them. Up to 5 where the new words start within 1 s of the last commit (whisper_streaming's
        rule, for times that jitter); a passage of RESTATED_WORDS or more, after up to
        RESTATED_LEAD other words, wherever they start: Whisper can decode a stretch twice and time
        the second copy after the first, past the last commit ("... Old Dominion University. I did
        so I did my undergraduate at Old Dominion University at ...")."""
        if not new or not self.committed:
            return new
        done, keys = [word_key(w.text) for w in self.committed], [word_key(w.text) for w in new]
        for lead in range(min(RESTATED_LEAD, len(keys)) + 1):
            for n in range(min(len(done), len(keys) - lead), RESTATED_WORDS - 1, -1):
                if keys[lead : lead + n] == done[-n:]:
                    return new[lead + n :]
        if new[0].start is None or abs(new[0].start - self.last_end) >= 1:
            return new
        for n in range(min(5, len(done), len(keys)), 0, -1):
            if done[-n:] == keys[:n]:
                return new[n:]
        return new

    def forget_before(self, time: float) -> None:
        self.committed = [w for w in self.committed if (w.end or 0) > time]

    def pending(self) -> list[Word]:
        """The words not released yet: the held ones, then the last hypothesis beyond the commits."""
        return self.held + self.previous


def _restated(word: Word, hypothesis: list[Word]) -> Word:
    """``word`` as ``hypothesis`` writes it (its mark and case), where the hypothesis has the same
    word at about the same time; else as it was."""
    if word.start is None or word.end is None:
        return word
    middle = (word.start + word.end) / 2
    for h in hypothesis:
        if h.start is not None and h.end is not None and abs((h.start + h.end) / 2 - middle) < 0.35:
            if word_key(h.text) == word_key(word.text):
                return replace(word, text=h.text)
    return word
