"""Incremental computation of one window under the lookahead-k mask.

With per-layer lookaheads ``k_1 .. k_L`` (see :func:`~streampunct.model.layer_lookaheads`), the
output of layer ``l`` for word ``w`` depends on words up to ``w + reach_l`` where
``reach_l = k_1 + .. + k_l``. When words change from word ``w0`` on (appended, or a revised tail),
layer ``l`` must recompute only the rows of words ``>= w0 - reach_l``; every other row, and the keys
and values made from it, is kept. A new word therefore costs ``O(k + 1)`` rows per layer and one
attention of those rows over the window, instead of a forward pass over the whole window.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from .model import PunctModel, layer_lookaheads

__all__ = ["WindowState"]


class WindowState:
    """One block's window (``[CLS]`` + words), kept up to date as words are appended or cut."""

    def __init__(self, model: PunctModel, lookahead: int):
        self.model = model
        cfg = model.cfg
        self.ks = layer_lookaheads(lookahead, cfg.n_layer)
        self.reach = list(itertools.accumulate(self.ks))  # type: ignore[arg-type]
        self.device = next(model.parameters()).device
        self.ids: list[int] = [cfg.cls_id]
        self.word_pos: list[int] = [-1]
        self.word_start: list[int] = []  # first piece of each word
        empty = torch.zeros(1, 0, cfg.n_embd, device=self.device)
        self.h: list[torch.Tensor] = [empty] * (cfg.n_layer + 1)  # h[0]: embeddings; h[l]: layer l
        self.keys: list[torch.Tensor] = []  # per layer: keys of h[l-1], (1, nh, T, hs)
        self.values: list[torch.Tensor] = []
        self.dirty = 0  # first word whose rows are out of date

    @property
    def n_words(self) -> int:
        return len(self.word_start)

    def append(self, pieces: Sequence[int]) -> None:
        self.word_start.append(len(self.ids))
        self.word_pos.extend([self.n_words - 1] * len(pieces))
        self.ids.extend(pieces)
        if self.n_words > self.model.cfg.max_positions:
            raise ValueError("window longer than the model's positions")

    def truncate(self, n_words: int) -> None:
        """Forget words from ``n_words`` on (a revised tail)."""
        if n_words >= self.n_words:
            return
        cut = self.word_start[n_words]
        del self.ids[cut:], self.word_pos[cut:], self.word_start[n_words:]
        self.dirty = min(self.dirty, n_words)

    def _first_piece(self, word: int) -> int:
        if word < 0:
            return 0  # [CLS]
        return self.word_start[word] if word < self.n_words else len(self.ids)

    @torch.no_grad()
    def compute(self) -> None:
        """Bring every layer's rows up to date with the words now in the window."""
        m, w0, T = self.model, self.dirty, len(self.ids)
        if w0 >= self.n_words and all(h.shape[1] == T for h in self.h):
            return
        d_prev = min(self._first_piece(w0), self.h[0].shape[1])
        ids = torch.tensor(self.ids[d_prev:], device=self.device)[None]  # (1, T - d)
        pos = torch.arange(d_prev, T, device=self.device)
        emb = m.ln_emb(m.tok_emb(ids) + m.pos_emb(pos)[None] + m.type_emb.weight[0])
        self.h[0] = torch.cat([self.h[0][:, :d_prev], emb], dim=1)  # (1, T, C)
        word_pos = torch.tensor(self.word_pos, device=self.device)
        for i, (layer, k) in enumerate(zip(m.layers, self.ks)):
            x = self.h[i]
            d = min(self._first_piece(w0 - self.reach[i]), self.h[i + 1].shape[1], d_prev)  # rows to redo
            k_new, v_new = layer.attn.kv(x[:, d_prev:])
            if i < len(self.keys):
                self.keys[i] = torch.cat([self.keys[i][:, :, :d_prev], k_new], dim=2)
                self.values[i] = torch.cat([self.values[i][:, :, :d_prev], v_new], dim=2)
            else:
                self.keys.append(k_new)
                self.values.append(v_new)
            mask = (word_pos[None, :] <= word_pos[d:, None] + k)[None, None]  # (1, 1, T - d, T)
            out = layer.forward_rows(x[:, d:], self.keys[i], self.values[i], mask)
            self.h[i + 1] = torch.cat([self.h[i + 1][:, :d], out], dim=1)
            d_prev = d
        self.dirty = self.n_words

    @torch.no_grad()
    def logits(self, word: int) -> torch.Tensor:
        """(n_labels,) logits of a word of this window, as its words stand now."""
        self.compute()
        last = (self.word_start[word + 1] if word + 1 < self.n_words else len(self.ids)) - 1
        return self.model.head(self.h[-1][0, last]).float().cpu()
