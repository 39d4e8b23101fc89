"""The public entry point: load a checkpoint, label words, punctuate text.

Two engines bound the lookahead to ``k`` words, from the same checkpoint:

- ``"masked"``: one pass over a block's window under the lookahead mask (CT-Transformer's delay
  split over the layers, see :mod:`streampunct.model`). A stream computes only each new word's
  rows (:mod:`streampunct.incremental`): the cheapest per word.
- ``"window"``: each word decided by the offline model over its own window, the ``context`` words
  before it and the ``k`` after it; every layer sees the whole window, so the words ahead are
  fully read. A stream runs one such window per word (more work per word than the masked engine,
  see the README's Speed). It scores higher (test2011 micro-F1 for k = 1 to 4: the default
  model's +1.1 to +4.4, base's +3.2 to +6.4; at k = 0 +0.2 and +1.3 to +2.9).
- ``"auto"`` (the default): the window engine from ``k = window_from`` on (the checkpoint's; calibrate
  sets it where the window engine starts to score at least as high on dev data: k = 0 for both
  shipped models), the masked one below it and for a POS-fused checkpoint (the window engine does
  not fuse tags).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .errors import CheckpointError, InputError
from .model import ModelConfig, PunctModel
from .pieces import WordPieces, collate, collate_tags, plan_windows
from .text import LABELS, normalize_text, render

if TYPE_CHECKING:
    from .pos import Tagger
    from .stream import PunctStream

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
MAX_LOOKAHEAD = 64
ENGINES = ("auto", "masked", "window")


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def checkpoint_dir(model: str | Path | None) -> Path:
    """The folder of ``model``: a shipped model's name (None: "default") or a checkpoint folder."""
    if model is None or str(model) in SHIPPED_MODELS:
        return DEFAULT_CHECKPOINT.parent / (str(model) if model else "default")
    return Path(model)


def check_lookahead(lookahead: int | None) -> None:
    if lookahead is None:
        return
    if isinstance(lookahead, bool) or not isinstance(lookahead, int):
        raise InputError(f"lookahead must be an int or None (offline), got {lookahead!r}")
    if not 0 <= lookahead <= MAX_LOOKAHEAD:
        raise InputError(f"lookahead must be between 0 and {MAX_LOOKAHEAD} words, got {lookahead}")


def resolve_engine(model: PunctModel, engine: str, lookahead: int | None) -> str:
    """``"masked"`` or ``"window"``: the engine that decides at ``lookahead`` (offline: masked,
    whose offline mode is the same whole-context model)."""
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "window" and model.cfg.n_tags:
        raise InputError("the window engine does not fuse POS tags: use engine='masked' with this checkpoint")
    if lookahead is None or engine == "masked":
        return "masked"
    if engine == "auto" and (lookahead < model.cfg.window_from or model.cfg.n_tags):
        return "masked"
    return "window"


def _check_tags(model: PunctModel, tags: Sequence[int] | None, n: int) -> None:
    if model.cfg.n_tags and (tags is None or len(tags) != n):
        got = "none" if tags is None else len(tags)
        raise InputError(
            f"this checkpoint fuses POS tags: give one tag id per token ({n} tokens, {got} tags)"
        )


@torch.no_grad()
def window_logits(
    model: PunctModel,
    ids: Sequence[tuple[int, ...]],
    t: int,
    lookahead: int,
    base: int = 0,
    tags: Sequence[int] | None = None,
    engine: str = "masked",
) -> torch.Tensor:
    """(n_labels,) logits of token ``t`` from its window (its block's, or under the window engine
    its own), seeing ``lookahead`` tokens ahead (with the model's decision offsets for that
    lookahead, as every function here).

    ``ids[i]`` (and ``tags[i]``, for a POS-fused model) belong to token ``base + i``; tokens up to
    ``t + lookahead`` must be there.
    """
    cfg = model.cfg
    start = word_window_start(t, cfg, engine)
    window = ids[start - base : t + lookahead + 1 - base]
    device = next(model.parameters()).device
    input_ids, word_pos, word_ends = (x.to(device) for x in collate([window], cfg))
    fused = None
    if cfg.n_tags:
        _check_tags(model, tags, len(ids))
        fused = collate_tags([tags[start - base : t + lookahead + 1 - base]]).to(device)  # type: ignore[index]
    mask = None if engine == "window" else lookahead  # the window engine: all see all in the window
    logits = model(input_ids, word_pos, word_ends, mask, fused)[0, t - start].float().cpu()
    return model.biased(logits, lookahead, engine)


def word_window_start(t: int, cfg: ModelConfig, engine: str) -> int:
    """The first token of the window that decides token ``t``."""
    if engine == "window":
        return max(0, t - cfg.context)
    return max(0, (t // cfg.block) * cfg.block - cfg.context)


@torch.no_grad()
def window_engine_logits(
    model: PunctModel, ids: Sequence[tuple[int, ...]], lookahead: int, batch_size: int = 64
) -> torch.Tensor:
    """(N, n_labels) logits of every token under the window engine: token ``t`` from the offline
    model over tokens ``t - context`` to ``t + lookahead`` (fewer at the end of the text)."""
    cfg = model.cfg
    device = next(model.parameters()).device
    n = len(ids)
    out = []
    for first in range(0, n, batch_size):
        ts = range(first, min(n, first + batch_size))
        spans = [(word_window_start(t, cfg, "window"), min(n, t + lookahead + 1)) for t in ts]
        input_ids, word_pos, word_ends = collate([ids[s:e] for s, e in spans], cfg)
        logits = model(input_ids.to(device), word_pos.to(device), word_ends.to(device), None)
        rows = logits[torch.arange(len(spans)), torch.tensor([t - s for t, (s, _) in zip(ts, spans)])]
        rows = rows.float().cpu()
        ahead = torch.tensor([e - 1 - t for t, (_, e) in zip(ts, spans)])  # fewer at the text's end
        for j in ahead.unique().tolist():
            rows[ahead == j] = model.biased(rows[ahead == j], j, "window")
        out.append(rows)
    return torch.cat(out)


@torch.no_grad()
def token_logits(
    model: PunctModel,
    pieces: WordPieces,
    tokens: Sequence[str],
    lookahead: int | None,
    batch_size: int = 32,
    tags: Sequence[int] | None = None,
    engine: str = "masked",
) -> torch.Tensor:
    """(N, n_labels) logits for normalised tokens, window by window (see :mod:`streampunct.pieces`),
    or under the window engine (``engine="window"``) one window per token.

    With a lookahead k, the last k tokens of the text, which have fewer than k tokens after them,
    are decided with the lookahead they have (the same rule a stream applies when time runs out).
    A POS-fused model also takes each token's tag id (``tags``).
    """
    if not tokens:
        return torch.zeros(0, model.cfg.n_labels)
    _check_tags(model, tags, len(tokens))
    device = next(model.parameters()).device
    ids = pieces.encode(tokens)
    if engine == "window" and lookahead is not None:
        return window_engine_logits(model, ids, lookahead, 2 * batch_size)
    windows = plan_windows(len(tokens), model.cfg, lookahead)
    out: list[torch.Tensor] = []
    for i in range(0, len(windows), batch_size):
        chunk = windows[i : i + batch_size]
        input_ids, word_pos, word_ends = collate([ids[w.start : w.end] for w in chunk], model.cfg)
        fused = collate_tags([tags[w.start : w.end] for w in chunk]).to(device) if model.cfg.n_tags else None  # type: ignore[index]
        logits = model(input_ids.to(device), word_pos.to(device), word_ends.to(device), lookahead, fused)
        logits = model.biased(logits.float().cpu(), lookahead)
        out.extend(logits[b, w.first - w.start : w.stop - w.start] for b, w in enumerate(chunk))
    result = torch.cat(out)
    n = len(tokens)
    for t in range(max(0, n - (lookahead or 0)), n):
        result[t] = window_logits(model, ids, t, n - 1 - t, tags=tags)
    return result


def label_tokens(
    model: PunctModel,
    pieces: WordPieces,
    tokens: Sequence[str],
    lookahead: int | None,
    tags: Sequence[int] | None = None,
    engine: str = "masked",
) -> list[int]:
    """The best label id for each normalised token."""
    return token_logits(model, pieces, tokens, lookahead, tags=tags, engine=engine).argmax(-1).tolist()


class Punctuator:
    """Restores COMMA, PERIOD and QUESTION after words.

    ``lookahead=k`` decides each word from the words before it and at most ``k`` after it (the
    streaming model); ``lookahead=None`` uses the whole context (offline).
    """

    def __init__(self, model: PunctModel, pieces: WordPieces, tagger: str | Path | None = None):
        self.model = model.eval()
        self.pieces = pieces
        self.tagger_dir = tagger  # a converted tagger's folder; None: flair's, fetched into the cache
        self._tagger: Tagger | None = None  # for a POS-fused model, loaded when first needed

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
    ) -> Punctuator:
        """Load a checkpoint folder, or a model shipped in the package by name (``SHIPPED_MODELS``:
        "default", the one with no path, or "base").

        A POS-fused checkpoint tags with ``tagger`` (a converted tagger's folder), else with the
        tagger it was trained with, kept in its ``tagger/`` folder, else with flair's tagger.
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
        return cls(model, WordPieces(d / "vocab.txt", model.cfg.max_pieces), tagger)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def predict(self, words: Sequence[str], lookahead: int | None = None, engine: str = "auto") -> list[str]:
        """One label per word (O, COMMA, PERIOD or QUESTION): the mark that follows it.

        Words may come straight from a recogniser (``" Don't,"``): they are normalised first, and
        a word that normalises to nothing (``"--"``) gets O. ``engine`` bounds the lookahead the
        masked or the window way (see the module's docstring); offline it changes nothing.
        """
        if isinstance(words, str):
            raise InputError("predict() takes a list of words; use punctuate() for a string")
        check_lookahead(lookahead)
        engine = resolve_engine(self.model, engine, lookahead)
        tokens, source = normalize_text(words)
        token_labels = self._label(tokens, lookahead, engine)
        labels = ["O"] * len(words)
        for src, lab in zip(source, token_labels):
            labels[src] = LABELS[lab]  # a word split in two takes the label of its last token
        return labels

    def stream(
        self, lookahead: int = 2, max_delay_ms: float | None = None, engine: str = "auto"
    ) -> PunctStream:
        """A stream that decides each word once ``lookahead`` words follow it, or ``max_delay_ms``
        after it ended on the recogniser's clock (see :mod:`streampunct.stream`)."""
        from .stream import Lookahead, PunctStream

        policy = Lookahead(lookahead, max_delay_ms)
        engine = resolve_engine(self.model, engine, lookahead)
        return PunctStream(self.model, self.pieces, policy, self.tagger, engine)

    def punctuate(self, text: str, lookahead: int | None = None, engine: str = "auto") -> str:
        """Punctuated, capitalised text from unpunctuated text ("" for blank input)."""
        check_lookahead(lookahead)
        engine = resolve_engine(self.model, engine, lookahead)
        tokens, _ = normalize_text(text.split())
        return render(tokens, [LABELS[i] for i in self._label(tokens, lookahead, engine)])

    def _label(self, tokens: list[str], lookahead: int | None, engine: str) -> list[int]:
        return label_tokens(self.model, self.pieces, tokens, lookahead, self.tags(tokens, lookahead), engine)
