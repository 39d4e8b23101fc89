"""The live decision: one token's mark from the text model's logits and the evidence of its words.

Every mark a stream, ``Punctuator.predict`` or a replayed recording (``pipeline.replay``) gives is
one call of :meth:`Decider.decide`, which returns a frozen :class:`Decision`: the label, the
fused logits it is the argmax of, the text model's logits, what each evidence source read and
gave, the lookahead and whether the word was decided at its deadline. Each of those callers takes
one ``on_decision`` hook that sees every final decision once, in order, with its word's index:
calibration and the hearing's fit read their rows there (:mod:`streampunct.training.calibrate`,
:mod:`streampunct.training.hearing`), so what they learn from is what the stream decided.

The evidence is built once from a checkpoint (:meth:`Decider.load`): the pause fusion
(:class:`~streampunct.prosody.PauseFusion`: ``pause_hidden``, ``pause_marks`` and
``pause_continued`` in ``config.json``, its weights in ``pauses.safetensors``) and the fusion with
what the recogniser heard (:class:`~streampunct.hearing.SpeechFusion`, ``hearing.json``). The
text model (:class:`~streampunct.model.PunctModel`) knows none of it. A checkpoint without pause
fusion decides from the text alone: its decisions' fused logits are the text model's.

What a decision may read of its words is one rule, :func:`place`: the word before its token's word
(on the word's first token), the word after it (on its last token, once the decision sees that
far) or, decided at its deadline with nothing after it, the silence heard after it. Streams,
``predict()`` and training (``training.pause_train``) all build their features from a
:class:`Place`, so a stream's final labels equal ``predict()``'s.

**A new evidence source** touches three places: its producer (in the front end) puts what it
measured on the word, as a field of :class:`~streampunct.types.Cues`; :meth:`Decider.load` reads
its model from the checkpoint folder; :meth:`Decider.decide` applies it and keeps its inputs in
the :class:`Decision`. Streams, ``predict()``, replays and the training hooks carry it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .errors import CheckpointError
from .hearing import SpeechFusion, inputs, slot_of
from .model import PAUSE_PREFIX, ModelConfig, fit_state
from .prosody import PauseFusion, ahead_slot, n_features, pause_features
from .types import Cues, Word

if TYPE_CHECKING:
    from .engines import Logits

__all__ = ["Decider", "Decision", "OnDecision", "Place", "place", "places"]


@dataclass(frozen=True)
class Place:
    """What one token's decision may read of its words (see :func:`place`): its ``word``, the word
    ``before`` it (on the word's first token), and ``after`` it: the next word once the decision
    sees it, or, with ``silence``, the silence heard after the word as a word without text."""

    word: Word
    before: Word | None
    after: Word | None
    first: bool
    last: bool
    silence: bool = False

    def features(self, marks: bool, continued: bool) -> list[float] | None:
        """The pause features (:func:`~streampunct.prosody.pause_features`); None without times."""
        return pause_features(self.word, self.before, self.after, self.last, self.first, marks, continued)

    @property
    def cues(self) -> Cues | None:
        """What the recogniser heard at the word's end: on its last token only."""
        return self.word.cues if self.last else None


def place(
    t: int,
    n: int,
    ahead: int | None,
    word_of: Callable[[int], int],
    word_at: Callable[[int], Word],
    silence: Word | None = None,
) -> Place:
    """Token ``t`` of ``n``, decided with ``ahead`` tokens after it (None: offline, every one):
    ``word_of(t)`` is a token's word index (any other index for a token no longer held),
    ``word_at(i)`` word ``i``; ``silence``: at its deadline, the silence heard after the word (a
    word without text), read on the word's last token when no word after it is seen."""
    w = word_of(t)
    last = t + 1 == n or word_of(t + 1) != w
    first = t == 0 or word_of(t - 1) != w
    seen = n - 1 - t if ahead is None else ahead
    after = None
    if last:
        after = word_at(word_of(t + 1)) if seen >= 1 and t + 1 < n else silence
    before = word_at(w - 1) if first and w > 0 else None
    return Place(word_at(w), before, after, first, last, after is not None and after is silence)


def places(words: Sequence[Word], token_words: Sequence[int], ahead: Sequence[int | None]) -> list[Place]:
    """The place of every token of a whole text (``token_words[t]``: token t's word), each decided
    with ``ahead[t]`` tokens after it, as a stream would see it."""
    n = len(token_words)
    return [place(t, n, ahead[t], token_words.__getitem__, words.__getitem__) for t in range(n)]


@dataclass(frozen=True)
class Decision:
    """One token's decision: ``label`` is the argmax of ``logits``, the fused logits; ``text``, the
    text model's (its decision offsets included); ``paused``, the pause fusion's where it corrected
    them (None: it did not); ``features``, the pause features read (None: no times, or no pause
    fusion); ``cues``, what was heard at the word's end (its last token); ``heard``, the
    hearing's inputs (:func:`~streampunct.hearing.inputs`) where there were features and cues,
    whether or not a hearing decided; ``ahead``, the tokens seen after it (None: offline);
    ``silence``, decided at its deadline reading the silence after its word."""

    label: int
    logits: torch.Tensor
    text: torch.Tensor
    paused: torch.Tensor | None
    features: list[float] | None
    cues: Cues | None
    heard: np.ndarray | None
    ahead: int | None
    silence: bool

    @property
    def slot(self) -> int:
        """The hearing's slot (:data:`~streampunct.hearing.SLOTS`: k=0, 1, >=2, the time limit)."""
        return slot_of(self.ahead, self.silence)

    @property
    def pause_slot(self) -> int:
        """The pause fusion's lookahead slot (:data:`~streampunct.prosody.AHEAD_SLOTS`)."""
        return ahead_slot(self.ahead)


OnDecision = Callable[[int, Decision], None]  # a final decision and the index of its word


@dataclass(frozen=True)
class Decider:
    """The evidence a checkpoint decides with, beside the text model: its pause fusion (None: none)
    reading ``marks`` and ``continued`` (``ModelConfig.pause_marks``, ``pause_continued``), and the
    fusion with what was heard (None: none)."""

    pause_fusion: PauseFusion | None
    hearing: SpeechFusion | None
    marks: bool
    continued: bool

    @classmethod
    def of(cls, cfg: ModelConfig) -> Decider:
        """Untrained evidence of a config's shape: a pause fusion that starts as the identity where
        ``cfg.pause_hidden``, no hearing (a model built in memory, before its training)."""
        fusion = None
        if cfg.pause_hidden:
            width = n_features(cfg.pause_marks, cfg.pause_continued)
            fusion = PauseFusion(cfg.n_labels, cfg.pause_hidden, width).eval()
        return cls(fusion, None, cfg.pause_marks, cfg.pause_continued)

    @classmethod
    def load(cls, directory: str | Path, cfg: ModelConfig) -> Decider:
        """A checkpoint folder's evidence (``cfg``: its config): ``pauses.safetensors`` (or, written
        before the fusion had a file of its own, its weights inside ``model.safetensors``) and
        ``hearing.json``, read where the checkpoint has pause fusion. On the CPU, where the engines'
        logits are."""
        from safetensors import safe_open

        d = Path(directory)
        decider = cls.of(cfg)
        if decider.pause_fusion is None:
            return decider
        path = d / "pauses.safetensors"
        try:
            with safe_open(str(path if path.is_file() else d / "model.safetensors"), "pt") as f:
                state = {
                    k.removeprefix(PAUSE_PREFIX): f.get_tensor(k).float()
                    for k in f.keys()
                    if k.startswith(PAUSE_PREFIX)
                }
        except (OSError, ValueError, TypeError) as e:
            raise CheckpointError(f"cannot read the pause fusion in {d}: {e}") from e
        if not state:
            raise CheckpointError(
                f"{d}: config.json has pause fusion (pause_hidden) but no pauses.safetensors"
            )
        fit_state(decider.pause_fusion, state, d, "cpu")
        hearing = SpeechFusion.load(d / "hearing.json") if (d / "hearing.json").is_file() else None
        return replace(decider, hearing=hearing)

    def save_pauses(self, directory: str | Path) -> None:
        """``pauses.safetensors``: the pause fusion, float32, a few kB (none: the file goes). It is
        trained on its own over a frozen text model, so the text model's file stays as it was."""
        from safetensors.torch import save_file

        path = Path(directory) / "pauses.safetensors"
        path.unlink(missing_ok=True)
        if self.pause_fusion is not None:
            state = self.pause_fusion.state_dict()
            save_file(
                {
                    f"{PAUSE_PREFIX}{k}": v.detach().to("cpu", torch.float32).contiguous()
                    for k, v in state.items()
                },
                str(path),
            )

    def text_alone(self) -> Decider:
        """The same checkpoint deciding from the text alone (``pauses=False``)."""
        return replace(self, pause_fusion=None, hearing=None)

    @torch.no_grad()
    def decide(self, logits: Logits, at: Place | None, ahead: int | None) -> Decision:
        """Token's ``logits`` (the text model's, offsets included) at place ``at`` (None: words
        without evidence, the text alone), seen with ``ahead`` tokens after it.

        The pause fusion corrects them when the word has times and the decision sees a word after
        it, the silence after it, or the fusion reads the recogniser's marks (at k=0 the pause
        after the word is unknown, and the rest alone did not pay: docs/conversation.md). A word's
        last token with cues is then decided by the hearing, where the checkpoint has one."""
        text = torch.as_tensor(logits)
        features = (
            None if self.pause_fusion is None or at is None else at.features(self.marks, self.continued)
        )
        silence = at is not None and at.silence
        cues = None if at is None else at.cues
        fused, paused, heard = text, None, None
        if self.pause_fusion is not None and features is not None:
            if ahead != 0 or self.marks or silence:
                fused = paused = self.pause_fusion.correct(text, features, ahead)
            if cues is not None:
                heard = inputs(_array(text), _array(fused), features, cues)
            if heard is not None and self.hearing is not None:
                x = self.hearing.logits(heard[None], np.array([slot_of(ahead, silence)]))[0]
                fused = torch.from_numpy(np.asarray(x, dtype=np.float32)).to(text.device)
        return Decision(int(fused.argmax()), fused, text, paused, features, cues, heard, ahead, silence)


def _array(logits: torch.Tensor) -> np.ndarray:
    return logits.detach().float().cpu().numpy()
