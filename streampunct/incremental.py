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

__all__ = ["WindowState", "compute_many"]


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
        if cfg.n_tags:  # POS fusion: keys and values of the fusion layer for the final words
            heads = cfg.fusion_heads
            shape = (1, heads, 0, (cfg.n_embd + cfg.pos_dim) // heads)
            self.fusion_keys = self.fusion_values = torch.zeros(shape, device=self.device)

    @property
    def n_words(self) -> int:
        return len(self.word_start)

    def append(self, pieces: Sequence[int]) -> None:
        if len(self.ids) + len(pieces) > self.model.cfg.max_positions:
            raise ValueError("window longer than the model's positions")
        self.word_start.append(len(self.ids))
        self.word_pos.extend([self.n_words - 1] * len(pieces))
        self.ids.extend(pieces)

    def truncate(self, n_words: int) -> None:
        """Forget words from ``n_words`` on (a revised tail)."""
        if n_words >= self.n_words:
            return
        cut = self.word_start[n_words]
        del self.ids[cut:], self.word_pos[cut:], self.word_start[n_words:]
        self.dirty = min(self.dirty, n_words)
        if self.model.cfg.n_tags:
            self.fusion_keys = self.fusion_keys[:, :, :n_words]
            self.fusion_values = self.fusion_values[:, :, :n_words]

    def _first_piece(self, word: int) -> int:
        if word < 0:
            return 0  # [CLS]
        return self.word_start[word] if word < self.n_words else len(self.ids)

    def stale(self) -> bool:
        return self.dirty < self.n_words or any(h.shape[1] != len(self.ids) for h in self.h)

    def compute(self) -> None:
        """Bring every layer's rows up to date with the words now in the window."""
        compute_many([self])

    def _last_piece(self, word: int) -> int:
        return (self.word_start[word + 1] if word + 1 < self.n_words else len(self.ids)) - 1

    @torch.no_grad()
    def logits(self, word: int, tags: Sequence[int] | None = None, final: bool = False) -> torch.Tensor:
        """(n_labels,) logits of a word of this window, as its words stand now.

        A POS-fused model also takes the tag ids of the window's words up to ``word``. Its fusion
        layer looks back only, so once ``word`` and its tag are final (``final=True``) the fusion
        keys and values of the words up to it are kept: a later word computes its own rows only.
        """
        self.compute()
        m = self.model
        if not m.cfg.n_tags:
            return m.head(self.h[-1][0, self._last_piece(word)]).float().cpu()
        if tags is None or len(tags) < word + 1:
            raise ValueError("a POS-fused model needs the tags of the window's words up to this one")
        kept = min(self.fusion_keys.shape[2], word)
        rows = list(range(kept, word + 1))
        h = self.h[-1][:, [self._last_piece(w) for w in rows]]  # (1, n, C)
        tag_ids = torch.tensor(list(tags[kept : word + 1]), dtype=torch.long, device=self.device)
        z = torch.cat([h, m.tag_emb(tag_ids)[None]], dim=-1)  # (1, n, C + pos_dim)
        k_new, v_new = m.fusion.attn.kv(z)
        keys = torch.cat([self.fusion_keys[:, :, :kept], k_new], dim=2)
        values = torch.cat([self.fusion_values[:, :, :kept], v_new], dim=2)
        if final:
            self.fusion_keys, self.fusion_values = keys, values
        everything = torch.ones(1, 1, 1, word + 1, dtype=torch.bool, device=self.device)
        return m.head(m.fusion.forward_rows(z[:, -1:], keys, values, everything)[0, 0]).float().cpu()


@torch.no_grad()
def compute_many(windows: Sequence[WindowState]) -> None:
    """Bring many windows up to date in one pass per layer (per model).

    Each window recomputes only its stale rows (see the module docstring); the rows of all windows
    go through each layer together, padded, so that B streams cost one batched forward pass.
    """
    todo = [w for w in windows if w.stale()]
    models = {id(w.model) for w in todo}
    if len(models) > 1:  # one pass per model
        for key in models:
            compute_many([w for w in todo if id(w.model) == key])
        return
    if not todo:
        return
    m, dev = todo[0].model, todo[0].device
    B = len(todo)
    T = [len(w.ids) for w in todo]
    w0 = [w.dirty for w in todo]
    d_prev = [min(w._first_piece(w.dirty), w.h[0].shape[1]) for w in todo]

    # Embeddings of the stale pieces of every window, as one flat batch of rows.
    ids = torch.tensor([i for w, d in zip(todo, d_prev) for i in w.ids[d:]], dtype=torch.long, device=dev)
    pos = torch.tensor(
        [p for w, d in zip(todo, d_prev) for p in range(d, len(w.ids))], dtype=torch.long, device=dev
    )
    emb = m.ln_emb(m.tok_emb(ids) + m.pos_emb(pos) + m.type_emb.weight[0])  # (sum rows, C)
    for w, d, rows in zip(todo, d_prev, emb.split([t - d for t, d in zip(T, d_prev)])):
        w.h[0] = torch.cat([w.h[0][:, :d], rows[None]], dim=1)  # (1, T, C)

    Tk = max(T)
    word_pos = torch.full((B, Tk), -1, dtype=torch.long, device=dev)
    valid = torch.zeros((B, Tk), dtype=torch.bool, device=dev)
    for b, w in enumerate(todo):
        word_pos[b, : T[b]] = torch.tensor(w.word_pos, device=dev)
        valid[b, : T[b]] = True
    for i, layer in enumerate(m.layers):
        k_i = torch.tensor([w.ks[i] for w in todo], device=dev)[:, None, None]  # windows may differ in k
        d = [
            min(w._first_piece(w0[b] - w.reach[i]), w.h[i + 1].shape[1], d_prev[b])
            for b, w in enumerate(todo)
        ]
        # Keys and values of the rows of h[i] that changed, then the padded caches.
        x_kv = _pad([w.h[i][0, dp:] for w, dp in zip(todo, d_prev)])  # (B, rows, C)
        k_new, v_new = layer.attn.kv(x_kv)  # (B, nh, rows, hs)
        for b, w in enumerate(todo):
            n = T[b] - d_prev[b]
            if i < len(w.keys):
                w.keys[i] = torch.cat([w.keys[i][:, :, : d_prev[b]], k_new[b : b + 1, :, :n]], dim=2)
                w.values[i] = torch.cat([w.values[i][:, :, : d_prev[b]], v_new[b : b + 1, :, :n]], dim=2)
            else:
                w.keys.append(k_new[b : b + 1, :, :n])
                w.values.append(v_new[b : b + 1, :, :n])
        if B == 1:
            keys, values = todo[0].keys[i], todo[0].values[i]
        else:
            keys = _pad([w.keys[i][0].transpose(0, 1) for w in todo]).transpose(1, 2)  # (B, nh, Tk, hs)
            values = _pad([w.values[i][0].transpose(0, 1) for w in todo]).transpose(1, 2)
        x_q = _pad([w.h[i][0, db:] for w, db in zip(todo, d)])  # (B, Tq, C)
        q_pos = _pad([word_pos[b, db : T[b]].unsqueeze(-1) for b, db in enumerate(d)]).squeeze(-1)  # (B, Tq)
        mask = valid[:, None, :] & (word_pos[:, None, :] <= q_pos[:, :, None] + k_i)  # (B, Tq, Tk)
        mask[:, :, 0] = True  # padding rows see [CLS] (their output is thrown away)
        out = layer.forward_rows(x_q, keys, values, mask[:, None, :, : keys.shape[2]])
        for b, w in enumerate(todo):
            w.h[i + 1] = torch.cat([w.h[i + 1][:, : d[b]], out[b : b + 1, : T[b] - d[b]]], dim=1)
        d_prev = d
    for w in todo:
        w.dirty = w.n_words


def _pad(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack (n_b, ...) tensors into (B, max n_b, ...), zero-padded."""
    return torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True)
