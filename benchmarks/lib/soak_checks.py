"""The soak's checks of a session (``python -m benchmarks.soak``): what each session reports, and every
word's one final event, in order, of the text sent."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# --- what each session reports --------------------------------------------------------------------


@dataclass
class SessionReport:
    endpoint: str  # "punct" or "asr"
    stream: str  # "0", "1", ... "asr", or "warm-up"
    session: int
    config: dict[str, Any]
    engine: str | None = None
    failure: str | None = None  # why the session failed; None: it did not
    problems: list[str] = field(default_factory=list)  # words without exactly one final decision
    words_sent: int = 0  # in words and revise messages (punct)
    words: int = 0  # the stream's words, by the client's count (punct) or the committed words (asr)
    words_one_final: int = 0  # of those, with exactly one final event, in order, of the right text
    server_words: int | None = None  # the ``end`` message's count
    messages: int = 0
    ticks: int = 0
    revisions: int = 0  # revisions of words not final, accepted or refused
    revisions_refused: int = 0
    late_revisions: int = 0  # of words already final: each must be refused
    errors: list[str] = field(default_factory=list)  # error messages other than expected refusals
    speech_s: float = 0.0  # simulated clock (punct)
    audio_s: float = 0.0  # audio sent (asr)
    lags: int = 0  # asr: lag messages (audio skipped)
    skipped_s: float = 0.0
    captions: int = 0
    wall_s: float = 0.0
    latency_s: dict[str, float] = field(default_factory=dict)  # asr, paced: caption lines after their speech

    @property
    def ok(self) -> bool:
        return (
            self.failure is None and not self.problems and not self.errors
            and self.words_one_final == self.words
        )  # fmt: skip


class FinalCheck:
    """Every word exactly one final event, in word order."""

    def __init__(self) -> None:
        self.count: Counter[int] = Counter()
        self.text: dict[int, str] = {}
        self.problems: list[str] = []

    @property
    def n_final(self) -> int:
        return len(self.text)

    def add(self, event: dict[str, Any]) -> None:
        i = event["index"]
        if self.count[i] == 0 and i != self.n_final:
            self.problems.append(f"final event for word {i} when {self.n_final} was due")
        elif self.count[i] > 0:
            self.problems.append(f"word {i} got a second final event")
        self.count[i] += 1
        self.text.setdefault(i, event["word"])

    def result(self, words: Sequence[str] | int) -> int:
        """How many of ``words`` (texts, or just their number) had exactly one final event (of that
        text); notes the others."""
        n = words if isinstance(words, int) else len(words)
        good = 0
        for i in range(n):
            if self.count[i] != 1:
                self.problems.append(f"word {i}: {self.count[i]} final events")
            elif not isinstance(words, int) and self.text[i] != words[i]:
                self.problems.append(f"word {i}: final event for {self.text[i]!r}, sent {words[i]!r}")
            else:
                good += 1
        extra = sorted(i for i in self.count if i >= n)
        if extra:
            self.problems.append(f"final events for {len(extra)} words never sent, from {extra[0]}")
        return good
