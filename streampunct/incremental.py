"""Incremental computation of one window under the lookahead-k mask.

With per-layer lookaheads ``k_1 .. k_L`` (see :func:`~streampunct.model.layer_lookaheads`), the
output of layer ``l`` for word ``w`` depends on words up to ``w + reach_l`` where
``reach_l = k_1 + .. + k_l``. When words change from word ``w0`` on (appended, or a revised tail),
layer ``l`` must recompute only the rows of words ``>= w0 - reach_l``; every other row, and the keys
and values made from it, is kept. A new word therefore costs ``O(k + 1)`` rows per layer and one
attention of those rows over the window, instead of a forward pass over the whole window. (The
window engine's passes, where every word sees every word, are computed whole:
:class:`~streampunct.engines.WindowPass`; a POS-fused model's windows also fuse the words' tags:
:class:`~streampunct.fused.FusedWindow`.)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import cast

import torch

from .errors import InputError
from .model import Layer, PunctModel, layer_lookaheads, window_limit

Offsets = Callable[[torch.Tensor, int], torch.Tensor]  # an engine's decision offsets (logits, words ahead)

__all__ = ["WindowState", "compute_windows"]


CHUNK = 64  # a window's rows grow in steps of this many


class WindowState:
    """One block's window (``[CLS]`` + words), kept up to date as words are appended or cut.

    Each layer's input rows and the keys and values made from them live in one buffer, written in
    place: a new word writes its own rows and copies nothing else.
    """

    def __init__(self, model: PunctModel, lookahead: int, offsets: Offsets):
        self.model = model
        self.offsets = offsets  # the engine's decision offsets (logits, words ahead) -> logits
        cfg = model.cfg
        self.lookahead = lookahead
        self.ks = [k for k in layer_lookaheads(lookahead, cfg.n_layer) if k is not None]  # all, at a k
        self.reach = list(itertools.accumulate(self.ks))
        self.device = next(model.parameters()).device
        self.ids: list[int] = [cfg.cls_id]
        self.word_pos: list[int] = [-1]
        self.word_start: list[int] = []  # first piece of each word
        # buf[l]: rows of h[l] (l = 0: embeddings; l: output of layer l); buf[L + 1 + i] and
        # buf[2L + 1 + i]: keys and values of layer i, made from h[i]. rows[l]: rows of h[l] (and
        # of the keys and values made from it) that are up to date.
        self.buf = torch.zeros(3 * cfg.n_layer + 1, 0, cfg.n_embd, device=self.device)
        self.rows = [0] * (cfg.n_layer + 1)
        self.dirty = 0  # first word whose rows are out of date

    @property
    def n_words(self) -> int:
        return len(self.word_start)

    def h(self, layer: int) -> torch.Tensor:
        """(rows, C) input of layer ``layer`` (0: embeddings), or output of the last layer."""
        return self.buf[layer, : self.rows[layer]]

    def keys(self, layer: int) -> torch.Tensor:
        return self.buf[self.model.cfg.n_layer + 1 + layer]

    def values(self, layer: int) -> torch.Tensor:
        return self.buf[2 * self.model.cfg.n_layer + 1 + layer]

    def append(self, pieces: Sequence[int]) -> None:
        if len(self.ids) + len(pieces) > window_limit(self.model.cfg):
            raise InputError("window longer than the model's positions")
        self.word_start.append(len(self.ids))
        self.word_pos.extend([self.n_words - 1] * len(pieces))
        self.ids.extend(pieces)
        if len(self.ids) > self.buf.shape[1]:
            grown = self.buf.new_zeros(
                self.buf.shape[0], -(-len(self.ids) // CHUNK) * CHUNK, self.buf.shape[2]
            )
            grown[:, : self.buf.shape[1]] = self.buf
            self.buf = grown

    def truncate(self, n_words: int) -> None:
        """Forget words from ``n_words`` on (a revised tail)."""
        if n_words >= self.n_words:
            return
        cut = self.word_start[n_words]
        del self.ids[cut:], self.word_pos[cut:], self.word_start[n_words:]
        self.rows = [min(r, cut) for r in self.rows]
        self.dirty = min(self.dirty, n_words)

    def _first_piece(self, word: int) -> int:
        """First piece of ``word``; a word before the first is [CLS]."""
        if word < 0:
            return 0  # [CLS]
        return self.word_start[word] if word < self.n_words else len(self.ids)

    def stale(self) -> bool:
        return self.dirty < self.n_words or self.rows[-1] != len(self.ids)

    def compute(self) -> None:
        """Bring every layer's rows up to date with the words now in the window."""
        compute_windows([self])

    @classmethod
    def compute_all(cls, windows: Sequence[WindowState]) -> None:
        """Many streams' windows, computed together (:func:`compute_windows`)."""
        compute_windows(windows)

    def _last_piece(self, word: int) -> int:
        return (self.word_start[word + 1] if word + 1 < self.n_words else len(self.ids)) - 1

    @torch.no_grad()
    def logits(self, word: int) -> torch.Tensor:
        """(n_labels,) logits of a word of this window, as its words stand now (with the model's
        decision offsets for the window's lookahead)."""
        self.compute()
        return self.decided(self.h(self.model.cfg.n_layer)[self._last_piece(word)])

    def decided(self, h: torch.Tensor) -> torch.Tensor:
        """(n_labels,) logits from a word's features ``h`` (the last layer's; a fused model's, its
        fusion layer's): the model's head, and the decision offsets for the window's lookahead."""
        return self.offsets(self.model.head(h).float().cpu(), self.lookahead)


@torch.no_grad()
def compute_windows(windows: Sequence[WindowState]) -> None:
    """Bring many windows up to date in one pass per layer (per model).

    Each window recomputes only its stale rows (see the module docstring). The rows of all windows
    go through each layer's projections and feed-forward together, as one flat batch, so that B
    streams cost one batched pass; attention runs per window, over that window's own keys.
    """
    todo = [w for w in windows if w.stale()]
    models = {id(w.model) for w in todo}
    if len(models) > 1:  # one pass per model
        for model_id in models:
            compute_windows([w for w in todo if id(w.model) == model_id])
        return
    if not todo:
        return
    m, dev = todo[0].model, todo[0].device
    nh = m.cfg.n_head
    T = [len(w.ids) for w in todo]
    w0 = [w.dirty for w in todo]
    d_prev = [min(w._first_piece(w.dirty), w.rows[0]) for w in todo]

    # Embeddings of the stale pieces of every window, as one flat batch of rows.
    ids = torch.tensor([i for w, d in zip(todo, d_prev) for i in w.ids[d:]], dtype=torch.long, device=dev)
    pos = torch.tensor(
        [p for w, d in zip(todo, d_prev) for p in range(d, len(w.ids))], dtype=torch.long, device=dev
    )
    emb = m.embed(ids, pos)  # (rows, C)
    for w, dp, t, rows in zip(todo, d_prev, T, emb.split([t - dp for t, dp in zip(T, d_prev)])):
        w.buf[0, dp:t] = rows
        w.rows[0] = t
    word_pos = [torch.tensor(w.word_pos, device=dev) for w in todo]
    biases: list[dict[tuple[int, int], torch.Tensor]] = [{} for _ in todo]  # attention masks
    positions = torch.arange(max(T), device=dev)
    scale = (m.cfg.n_embd // nh) ** -0.5
    # cast: nn.ModuleList is typed to yield Module, whose attributes mypy sees as Tensor | Module
    for i, layer in enumerate(cast("list[Layer]", m.layers)):
        d = [min(w._first_piece(w0[b] - w.reach[i]), w.rows[i + 1], d_prev[b]) for b, w in enumerate(todo)]
        # Queries, keys and values of the rows of h[i] from d on, in one product; their keys and
        # values go into each window's buffer (rows before d_prev are rewritten as they were).
        x_q = _cat([w.buf[i, db:t] for w, db, t in zip(todo, d, T)])  # (rows, C)
        q, k_new, v_new = layer.attn.qkv(x_q).chunk(3, dim=-1)
        at = 0
        for w, db, t in zip(todo, d, T):
            w.keys(i)[db:t], w.values(i)[db:t] = k_new[at : at + t - db], v_new[at : at + t - db]
            at += t - db
        # The rows from d on attend over their window: per window, so nothing is padded.
        attended, at = [], 0
        for b, (w, db, t) in enumerate(zip(todo, d, T)):
            n, k = t - db, w.ks[i]
            key = (k, db)
            if key not in biases[b]:  # [CLS] is word -1: every word sees it
                allowed = word_pos[b][None, :t] <= word_pos[b][db:t, None] + k  # (n, t)
                rel = m.position_bias(positions[db:t], positions[:t])  # (nh, n, t) or None
                biases[b][key] = torch.where(allowed, 0.0 if rel is None else rel, -math.inf)
            scores = torch.baddbmm(
                biases[b][key],
                _heads(q[at : at + n], nh),
                _heads(w.keys(i)[:t], nh).transpose(1, 2),
                alpha=scale,
            )  # (nh, n, t)
            y = torch.bmm(scores.softmax(-1), _heads(w.values(i)[:t], nh))  # (nh, n, hs)
            attended.append(y.transpose(0, 1).reshape(n, -1))
            at += n
        out = layer.after_attention(x_q, layer.attn.out(_cat(attended)))
        at = 0
        for w, db, t in zip(todo, d, T):
            w.buf[i + 1, db:t] = out[at : at + t - db]
            w.rows[i + 1] = t
            at += t - db
        d_prev = d
    for w in todo:
        w.dirty = w.n_words


def _heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(T, C) -> (n_head, T, C // n_head), a view."""
    return x.view(x.shape[0], n_head, -1).transpose(0, 1)


def _cat(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    return rows[0] if len(rows) == 1 else torch.cat(list(rows))
