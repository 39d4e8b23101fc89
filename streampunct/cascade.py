"""The cascade engine: a light first stage clears the tokens it is sure take no mark, and the
window engine decides the rest (issue 75).

About 85 % of tokens take no mark, and most of those are easy. The first stage
(:class:`FirstStage`) reads a token's neighbourhood, from ``left`` tokens before it to ``ahead``
after it (never more than the stream's lookahead), each token as the mean of its pieces'
embeddings in the text model's own table, through a small MLP. Where its probability of no mark
reaches ``threshold``, that is the token's decision, and no window pass is computed for it; every
other token, and every token decided with fewer than k tokens after it (the end of a text, a time
limit), is decided by the window engine as before. A stream's provisional labels are the first
stage's (display only). Both ways a decision is asked for, :meth:`CascadeEngine.logits` and a
stream, apply the same rule, so a stream's finals still equal ``predict()``'s.

The first stage belongs to a checkpoint (``first_stage.json`` and ``first_stage.safetensors``,
made by ``streampunct train-first-stage``: :mod:`streampunct.training.first_stage`), whose
threshold is chosen on dev text to cost the window engine at most a set loss of F1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from .engines import Pieces, WindowEngine, WindowPass, WindowStream
from .errors import CheckpointError
from .model import PunctModel

if TYPE_CHECKING:
    from .pos import Tagger

__all__ = ["CascadeEngine", "CascadeStream", "FirstStage", "FirstStageConfig"]

FILES = ("first_stage.json", "first_stage.safetensors")


@dataclass(frozen=True)
class FirstStageConfig:
    left: int = 4  # tokens read before the one decided
    ahead: int = 2  # tokens read after it, at most (and never more than a stream's lookahead)
    proj: int = 128  # each token's embedding projected to this width
    hidden: int = 512
    threshold: float = 1.0  # P(no mark) from which the first stage decides (1.0: never)


class FirstStage(nn.Module):
    """P(label) of a token from its neighbours' piece embeddings (the text model's, frozen)."""

    emb: torch.Tensor

    def __init__(self, cfg: FirstStageConfig, embeddings: torch.Tensor, max_pieces: int):
        super().__init__()
        self.cfg, self.max_pieces = cfg, max_pieces
        self.register_buffer("emb", embeddings.detach().float(), persistent=False)
        width = cfg.left + cfg.ahead + 1
        self.proj = nn.Linear(embeddings.shape[1], cfg.proj)
        self.pad = nn.Parameter(torch.zeros(cfg.proj))  # a position before the text or past what is read
        self.mlp = nn.Sequential(
            nn.Linear(width * cfg.proj, cfg.hidden),
            nn.GELU(),
            nn.Linear(cfg.hidden, cfg.hidden),
            nn.GELU(),
            nn.Linear(cfg.hidden, 4),
        )

    @classmethod
    def of(cls, model: PunctModel, cfg: FirstStageConfig) -> FirstStage:
        return cls(cfg, model.tok_emb.weight, model.cfg.max_pieces).to(model.tok_emb.weight.device)

    def means(self, pieces: Sequence[Pieces]) -> torch.Tensor:
        """(N, C) mean piece embedding of each token."""
        p = self.max_pieces
        ids = torch.tensor([(*x[:p], *(-1,) * (p - len(x[:p]))) for x in pieces], dtype=torch.long)
        ids = ids.to(self.emb.device)
        keep = (ids >= 0).unsqueeze(-1)
        return (self.emb[ids.clamp(min=0)] * keep).sum(1) / keep.sum(1).clamp(min=1)

    def vectors(self, pieces: Sequence[Pieces]) -> torch.Tensor:
        """(N, proj) each token as the first stage reads it."""
        return self.proj(self.means(pieces))

    def forward(self, vectors: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """(N, 4) logits; ``vectors`` (M, proj), ``index`` (N, width) rows of it (-1: pad)."""
        rows = torch.cat([vectors, self.pad[None]])[index]  # index -1 reads the pad row
        return self.mlp(rows.flatten(1))

    def index(self, ts: Sequence[int], ends: Sequence[int], lo: int, hi: int) -> torch.Tensor:
        """(len(ts), width) rows of each token's neighbours among the vectors of tokens ``lo`` to
        ``hi``: -1 (the pad) before the text and from ``ends[i]``, the end of what it reads, on."""
        pos = torch.tensor(list(ts), dtype=torch.long)[:, None] + torch.arange(
            -self.cfg.left, self.cfg.ahead + 1
        )
        ok = (pos >= 0) & (pos < torch.tensor(list(ends), dtype=torch.long)[:, None])
        if bool((ok & ((pos < lo) | (pos >= hi))).any()):
            raise IndexError(f"a first-stage window reads outside tokens {lo}..{hi}")
        return torch.where(ok, pos - lo, -1)

    def span(self, ts: Sequence[int], ends: Sequence[int]) -> tuple[int, int]:
        """The tokens that the windows of ``ts`` read."""
        return max(0, min(ts) - self.cfg.left), max(ends)

    def probabilities(self, pieces: Sequence[Pieces], ts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
        """(len(ts), 4) probabilities of tokens of a text (``ends``: where each one's reading ends)."""
        if not len(ts):
            return np.zeros((0, 4), dtype=np.float32)
        return self.read(pieces, self.index(ts, ends, 0, len(pieces)))

    @torch.no_grad()
    def read(self, pieces: Sequence[Pieces], index: torch.Tensor) -> np.ndarray:
        """(N, 4) probabilities of the rows ``index`` (:meth:`index`) picks among ``pieces``."""
        return self(self.vectors(pieces), index.to(self.emb.device)).softmax(-1).float().cpu().numpy()

    def save(self, directory: str | Path, dev: dict | None = None) -> None:
        """The first stage's two files; ``dev``: how its threshold was chosen."""
        from safetensors.torch import save_file

        d = Path(directory)
        (d / FILES[0]).write_text(json.dumps({"config": asdict(self.cfg), "dev": dev}, indent=2) + "\n")
        state = {k: v.detach().cpu().to(torch.float16).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(d / FILES[1]))

    @classmethod
    def load(cls, directory: str | Path, model: PunctModel) -> FirstStage | None:
        """A checkpoint folder's first stage, or None if it has none."""
        from safetensors.torch import load_file

        d = Path(directory)
        if not (d / FILES[0]).is_file():
            return None
        try:
            cfg = FirstStageConfig(**json.loads((d / FILES[0]).read_text())["config"])
            stage = cls.of(model, cfg)
            stage.load_state_dict({k: v.float() for k, v in load_file(str(d / FILES[1])).items()})
        except (OSError, ValueError, TypeError, RuntimeError) as e:
            raise CheckpointError(f"cannot read the first stage in {d}: {e}") from e
        return stage.eval()


def _reads(stage: FirstStage, lookahead: int) -> int:
    """Tokens the first stage reads after the one decided, under a stream's lookahead."""
    return min(stage.cfg.ahead, lookahead)


def _as_logits(probs: np.ndarray) -> np.ndarray:
    return np.log(np.clip(probs, 1e-9, None)).astype(np.float32)


class CascadeEngine(WindowEngine):
    """The window engine, where the first stage is not sure (see the module's docstring)."""

    name = "cascade"

    def __init__(self, model: PunctModel, first: FirstStage):
        super().__init__(model)
        self.first = first

    def sure(self, probs: np.ndarray) -> np.ndarray:
        """Which rows the first stage decides: no mark, at least ``threshold`` sure."""
        return probs[:, 0] >= self.first.cfg.threshold

    def full_probabilities(self, ids: Sequence[Pieces], k: int) -> np.ndarray:
        """The first stage's probabilities of a text's tokens that have ``k`` tokens after them
        (the first ``len(ids) - k``), the only ones it may decide."""
        full = range(max(0, len(ids) - k))
        reads = _reads(self.first, k)
        return self.first.probabilities(ids, full, [t + reads + 1 for t in full])

    def logits(
        self,
        ids: Sequence[Pieces],
        lookahead: int | None,
        tags: Sequence[int] | None = None,
        batch_size: int = 64,
    ) -> torch.Tensor:
        k = self.bounded(lookahead)
        n = len(ids)
        probs = self.full_probabilities(ids, k)
        sure = self.sure(probs)
        out = torch.empty(n, self.model.cfg.n_labels)
        out[: len(sure)][torch.from_numpy(sure)] = torch.from_numpy(_as_logits(probs[sure]))
        rest = [t for t in range(n) if t >= len(sure) or not sure[t]]
        out[rest] = self.rows(ids, rest, k, batch_size)
        return out

    def stream(self, lookahead: int, tagger: Tagger | None = None) -> CascadeStream:
        return CascadeStream(self, lookahead)


class Judgement:
    """One stream's first-stage work for a step. Many streams' are computed together
    (:meth:`compute_all`): one first-stage pass over every token they read, then one batch of
    window passes for the tokens it was not sure of."""

    def __init__(self, stream: CascadeStream, first_open: int):
        self.stream, self.first_open = stream, first_open

    @classmethod
    def compute_all(cls, work: Sequence[Judgement]) -> None:
        for first in {id(w.stream.first): w.stream.first for w in work}.values():
            asks = [(w.stream, w.stream.unjudged(w.first_open)) for w in work if w.stream.first is first]
            asks = [(s, ts) for s, ts in asks if ts]
            if not asks:
                continue
            pieces: list[Pieces] = []
            index = []
            for s, ts in asks:
                span, rows = s.reading(ts)
                index.append(torch.where(rows >= 0, rows + len(pieces), -1))
                pieces += span
            probs = first.read(pieces, torch.cat(index))
            at = 0
            for s, ts in asks:
                s.judged(ts, probs[at : at + len(ts)])
                at += len(ts)
        WindowPass.compute_all([p for w in work for p in w.stream.window_work(w.first_open)])


class CascadeStream(WindowStream):
    """The cascade's state for one stream: the window stream's, and the first stage's
    probabilities of the tokens it has read, each with the end of what it read."""

    def __init__(self, engine: CascadeEngine, lookahead: int):
        super().__init__(engine, lookahead)
        self.first = engine.first
        self.sure = engine.sure
        self.reads = _reads(self.first, lookahead)
        self.probs: dict[int, tuple[int, np.ndarray]] = {}  # token -> (end read, probabilities)

    def _end(self, t: int) -> int:
        return min(t + self.reads + 1, self.tokens.end)

    def _stale(self, ts: Sequence[int]) -> list[int]:
        return [t for t in ts if t not in self.probs or self.probs[t][0] != self._end(t)]

    def unjudged(self, first_open: int) -> list[int]:
        """Tokens this step reads whose probabilities are not up to date: those with their full
        lookahead, and the newest ones (provisional labels)."""
        newest = range(max(first_open, self.tokens.end - self.k), self.tokens.end)
        return self._stale([*self._decidable(first_open), *newest])

    def reading(self, ts: Sequence[int]) -> tuple[list[Pieces], torch.Tensor]:
        """The tokens the first stage reads for ``ts``, and each one's rows among them."""
        ends = [self._end(t) for t in ts]
        lo, hi = self.first.span(ts, ends)
        return self.tokens.span(lo, hi), self.first.index(ts, ends, lo, hi)

    def judged(self, ts: Sequence[int], probs: np.ndarray) -> None:
        for t, row in zip(ts, probs):
            self.probs[t] = (self._end(t), row)

    def _judge(self, ts: Sequence[int]) -> None:
        todo = self._stale(ts)
        if todo:
            self.judged(todo, self.first.read(*self.reading(todo)))

    def _cleared(self, t: int) -> bool:
        return bool(self.sure(self.probs[t][1][None])[0])

    def _full(self, first: int) -> list[WindowPass]:
        ts = self._decidable(first)
        self._judge(ts)
        return [self._pass(t, t + self.k + 1)[0] for t in ts if not self._cleared(t)]

    def window_work(self, first_open: int) -> list[WindowPass]:
        self._full(first_open)
        return list(self.passes.values())

    def work(self, first_open: int) -> list[Judgement]:
        return [Judgement(self, first_open)]

    def decide(self, t: int, ahead: int) -> np.ndarray:
        if ahead == self.k:
            self._judge([t])
            if self._cleared(t):
                return _as_logits(self.probs[t][1])
        return super().decide(t, ahead)

    def provisional(self, tokens: Sequence[int], first_open: int) -> list[np.ndarray]:
        self._judge(tokens)
        return [_as_logits(self.probs[t][1]) for t in tokens]

    def truncate(self, n: int) -> None:
        super().truncate(n)
        self.probs = {t: v for t, v in self.probs.items() if v[0] <= n}

    def settle(self, keep_from: int) -> None:
        super().settle(keep_from)
        self.probs = {t: v for t, v in self.probs.items() if t >= keep_from}

    def release(self) -> None:
        super().release()
        self.probs.clear()
