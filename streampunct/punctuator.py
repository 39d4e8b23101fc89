"""The public entry point: load a checkpoint, label words, punctuate text, open streams.

``lookahead=k`` bounds what a decision reads to ``k`` words ahead, under one of three engines from
the same checkpoint (``engine=``, see :mod:`streampunct.engines`): ``"window"`` (each word read by
the offline model over its own window; the more accurate), ``"masked"`` (one pass per block
under the lookahead mask; the cheapest per word), ``"cascade"`` (the window engine for the words a
first stage saved beside the checkpoint is not sure of, :mod:`streampunct.cascade`), or ``"auto"``
(the default: the window engine, or the cascade where the checkpoint has a first stage, from the
checkpoint's ``window_from`` on, which calibration sets; the masked one below it and for a
POS-fused checkpoint). ``lookahead=None`` reads the whole context (offline).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .cascade import FirstStage
from .decision import Decider, Decision, OnDecision, Place, places
from .engines import make_engine, resolve_engine
from .errors import CheckpointError, InputError
from .model import PunctModel
from .pieces import WordPieces
from .stream import PunctStream
from .text import LABELS, normalize_text, render
from .types import ENGINES, MAX_LOOKAHEAD, Lookahead, Word, check_lookahead

if TYPE_CHECKING:
    from .pos import Tagger

__all__ = [
    "Punctuator",
    "DEFAULT_CHECKPOINT",
    "ENGINES",
    "MAX_LOOKAHEAD",
    "SHIPPED_MODELS",
    "checkpoint_dir",
    "resolve_device",
]

# The models in the package, by name: "default" (MiniLM-L6, 22.6 M parameters: fast enough to stream
# on a CPU core) and "base" (MPNet-base, 110 M, int8 on disk: the most accurate, for finished
# transcripts and GPUs). Any other name is a checkpoint folder.
SHIPPED_MODELS = ("default", "base")
DEFAULT_CHECKPOINT = Path(__file__).parent / "checkpoints" / "default"


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def checkpoint_dir(model: str | Path | None) -> Path:
    """The folder of ``model``: a shipped model's name (None: "default") or a checkpoint folder."""
    if model is None or str(model) in SHIPPED_MODELS:
        return DEFAULT_CHECKPOINT.parent / (str(model) if model else "default")
    return Path(model)


class Punctuator:
    """Restores COMMA, PERIOD and QUESTION after words.

    ``lookahead=k`` decides each word from the words before it and at most ``k`` after it (the
    streaming model); ``lookahead=None`` uses the whole context (offline). ``decider``: the
    evidence beside the text (:mod:`streampunct.decision`); None: untrained evidence of the
    model's config (:meth:`Decider.of <streampunct.decision.Decider.of>`), for a model built in memory.
    """

    def __init__(
        self,
        model: PunctModel,
        pieces: WordPieces,
        tagger: str | Path | None = None,
        decider: Decider | None = None,
        first_stage: FirstStage | None = None,
    ):
        self.model = model.eval()
        self.decider = Decider.of(model.cfg) if decider is None else decider
        self.pieces = pieces
        self.tagger_dir = tagger  # a converted tagger's folder; None: flair's, in the cache (fetch-tagger)
        self._tagger: Tagger | None = None  # a fused model's, loaded when first needed or by prepare()
        self.first_stage = first_stage  # the cascade's (streampunct.cascade); None: no cascade

    @property
    def tagger(self) -> Tagger | None:
        """The POS tagger a fused model needs (loaded when first asked for); None otherwise."""
        if self.model.cfg.n_tags and self._tagger is None:
            from .pos import Tagger

            tagger = Tagger.load(self.tagger_dir).to(self.device)
            if len(tagger.tags) != self.model.cfg.n_tags:
                raise CheckpointError(
                    f"this checkpoint fuses {self.model.cfg.n_tags} POS tags; the tagger has {len(tagger.tags)}"
                )
            self._tagger = tagger
        return self._tagger

    def prepare(self) -> Punctuator:
        """Load now what is otherwise loaded when first needed (a fused model's POS tagger), so
        that a server fails at start-up, not in its first stream; returns ``self``. Raises
        :class:`CheckpointError` if the tagger is not installed (``streampunct fetch-tagger``) or
        does not fit the checkpoint. Downloads nothing."""
        _ = self.tagger
        return self

    def tags(self, tokens: Sequence[str], lookahead: int | None) -> list[int] | None:
        """Tag ids of normalised tokens for a POS-fused model, under the same lookahead; else None."""
        tagger = self.tagger
        return tagger.tag_ids(tokens, lookahead) if tagger else None

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        device: str | torch.device = "auto",
        tagger: str | Path | None = None,
        int8: bool = False,
    ) -> Punctuator:
        """Load a checkpoint folder, or a model shipped in the package by name (``SHIPPED_MODELS``:
        "default", the one with no path, or "base").

        ``int8``: on the CPU, the encoder's matrices multiply in int8
        (:meth:`~streampunct.model.PunctModel.quantize_int8`).

        A POS-fused checkpoint tags with ``tagger`` (a converted tagger's folder), else with the
        tagger it was trained with, kept in its ``tagger/`` folder, else with flair's tagger as
        ``streampunct fetch-tagger`` installs it. The tagger loads when first needed; call
        :meth:`prepare` to load it now.
        """
        from .pos import is_tagger

        d = checkpoint_dir(path)
        if not (d / "model.safetensors").is_file() or not (d / "vocab.txt").is_file():
            raise CheckpointError(f"{d} is not a streampunct checkpoint (model.safetensors, vocab.txt)")
        if tagger is None and is_tagger(d / "tagger"):
            tagger = d / "tagger"
        if tagger is not None and not is_tagger(Path(tagger)):
            raise CheckpointError(f"{tagger} is not a converted tagger (tagger.json, tagger.safetensors)")
        model = PunctModel.load(d, resolve_device(device))
        if int8:
            if model.head.weight.device.type != "cpu":
                raise InputError("int8 is for the transformer models (default, base) on the CPU")
            model.quantize_int8()
        pieces = WordPieces(d / "vocab.txt", model.cfg.max_pieces)
        return cls(model, pieces, tagger, Decider.load(d, model.cfg), FirstStage.load(d, model))

    def deciding_with(self, decider: Decider) -> Punctuator:
        """This punctuator (its model, word pieces and tagger, shared) deciding with other evidence."""
        other = copy.copy(self)
        other.decider = decider
        return other

    def engine_name(self, engine: str, lookahead: int | None) -> str:
        """The engine ``engine`` (``"auto"`` among them) runs as at ``lookahead``."""
        return resolve_engine(self.model, engine, lookahead, self.first_stage is not None)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def predict(
        self,
        words: Sequence[str | Word],
        lookahead: int | None = None,
        engine: str = "auto",
        pauses: bool = True,
        on_decision: OnDecision | None = None,
    ) -> list[str]:
        """One label per word (O, COMMA, PERIOD or QUESTION): the mark that follows it.

        Words may come straight from a recogniser (``" Don't,"``): they are normalised first, and
        a word that normalises to nothing (``"--"``) gets O. ``engine`` bounds the lookahead the
        masked or the window way (see the module's docstring); offline it changes nothing. Words
        with times (:class:`Word`) also give their pauses as evidence, when the checkpoint has
        pause fusion and ``pauses`` is on (:mod:`streampunct.prosody`), as a stream does.
        ``on_decision`` sees each token's decision with its word's index, in order (a stream's hook).
        """
        if isinstance(words, str):
            raise InputError("predict() takes a list of words; use punctuate() for a string")
        check_lookahead(lookahead)
        timed = [w if isinstance(w, Word) else Word(w) for w in words]
        tokens, source = normalize_text([w.text for w in timed])
        token_labels = self._label(tokens, lookahead, engine, timed if pauses else None, source, on_decision)
        return _word_labels(len(words), source, [LABELS[i] for i in token_labels])

    def stream(
        self,
        lookahead: int = 2,
        max_delay_ms: float | None = None,
        engine: str = "auto",
        pauses: bool = True,
        on_decision: OnDecision | None = None,
        sentences: bool = False,
    ) -> PunctStream:
        """A stream that decides each word once ``lookahead`` words follow it, or ``max_delay_ms``
        after it ended on the recogniser's clock (see :mod:`streampunct.stream`). With ``pauses``
        (and a checkpoint that has pause fusion), words with times give their pauses as evidence.
        ``on_decision`` sees each final decision with its word's index, in order. With
        ``sentences``, it closes each sentence once its words are final
        (:meth:`~streampunct.stream.PunctStream.take_sentences`)."""
        policy = Lookahead(lookahead, max_delay_ms)
        engine_ = make_engine(self.model, engine, lookahead, self.first_stage)
        decider = self.decider if pauses else self.decider.text_alone()
        return PunctStream(engine_, self.pieces, policy, decider, self.tagger, on_decision, sentences)

    def punctuate(self, text: str, lookahead: int | None = None, engine: str = "auto") -> str:
        """Punctuated, capitalised text from unpunctuated text ("" for blank input)."""
        return self.label_text(text, lookahead, engine)[1]

    def label_text(
        self, text: str, lookahead: int | None = None, engine: str = "auto"
    ) -> tuple[list[str], str]:
        """``predict(text.split())``'s labels and ``punctuate(text)``'s text, from one pass of the model.
        The text is finished: its last word ends a sentence (. or ?, whichever the model's logits
        there prefer) where the labels, as a stream's, leave it open."""
        check_lookahead(lookahead)
        words = text.split()
        tokens, source = normalize_text(words)
        last: dict[str, Decision] = {}  # the last token's decision alone (batch.py labels whole documents)
        token_labels = [
            LABELS[i]
            for i in self._label(tokens, lookahead, engine, None, source, lambda _, d: last.update(d=d))
        ]
        shown = list(token_labels)
        if shown and shown[-1] in ("O", "COMMA"):  # a finished text ends its sentence, as the model leans
            scores = last["d"].logits
            shown[-1] = (
                "QUESTION" if scores[LABELS.index("QUESTION")] > scores[LABELS.index("PERIOD")] else "PERIOD"
            )
        return _word_labels(len(words), source, token_labels), render(tokens, shown)

    def _label(
        self,
        tokens: list[str],
        lookahead: int | None,
        engine: str,
        words: Sequence[Word] | None = None,
        source: Sequence[int] = (),
        on_decision: OnDecision | None = None,
    ) -> list[int]:
        """Token labels; with ``words`` (``source[t]``: token t's word), their evidence too."""
        engine_ = make_engine(self.model, engine, lookahead, self.first_stage)
        if not tokens:
            return []
        logits = engine_.logits(self.pieces.encode(tokens), lookahead, self.tags(tokens, lookahead))
        n = len(tokens)
        ahead = [None if lookahead is None else min(lookahead, n - 1 - t) for t in range(n)]
        at: Sequence[Place | None] = [None] * n if words is None else places(words, source, ahead)
        labels = []
        for t, (row, a) in enumerate(zip(logits, ahead)):
            decision = self.decider.decide(row, at[t], a)
            if on_decision is not None:
                on_decision(source[t], decision)
            labels.append(decision.label)
        return labels


def _word_labels(n: int, source: Sequence[int], token_labels: Sequence[str]) -> list[str]:
    """Each of ``n`` words' label from its tokens' (``source``: each token's word): a word split in
    two takes the label of its last token; a word with no token gets O."""
    labels = ["O"] * n
    for src, lab in zip(source, token_labels):
        labels[src] = lab
    return labels
