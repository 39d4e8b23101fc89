"""A POS-fused checkpoint's stream (``n_tags > 0``, ``streampunct train --tags``): the masked
engine's stream (:class:`~streampunct.engines.MaskedStream`) with the words' tags beside them.

The tags come from a :class:`~streampunct.pos.TagStream` under the stream's lookahead: token
``t``'s tag is final once token ``t + k`` has arrived, as its decision at the full lookahead is.
A decision cut short (a time limit, the end) reads the tags as if the text ended at its last
token; a provisional label, the tagger's current view of the tokens not final. Each block's window
(:class:`FusedWindow`) runs the fusion layer over its words' last-layer rows and their tags'
embeddings; with a lookahead the fusion layer looks back only, so the fusion keys and values of
the words up to a final decision are kept, and a later word computes its own rows only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

import torch

from .engines import MaskedEngine, MaskedStream, Pieces
from .errors import InputError
from .incremental import Offsets, WindowState
from .model import Layer, PunctModel

if TYPE_CHECKING:
    from .pos import Tagger

__all__ = ["FusedStream", "FusedWindow"]


class FusedWindow(WindowState):
    """A block's window of a POS-fused model, with the fusion layer's keys and values of its words
    up to the last final decision."""

    def __init__(self, model: PunctModel, lookahead: int, offsets: Offsets):
        super().__init__(model, lookahead, offsets)
        cfg = model.cfg
        shape = (1, cfg.fusion_heads, 0, (cfg.n_embd + cfg.pos_dim) // cfg.fusion_heads)
        self.fusion_keys = self.fusion_values = torch.zeros(shape, device=self.device)

    def truncate(self, n_words: int) -> None:
        super().truncate(n_words)
        self.fusion_keys = self.fusion_keys[:, :, :n_words]
        self.fusion_values = self.fusion_values[:, :, :n_words]

    @torch.no_grad()
    def logits(self, word: int, tags: Sequence[int] = (), final: bool = False) -> torch.Tensor:
        """(n_labels,) logits of a word of this window, from its words as they stand now and
        ``tags``, the tag ids of the window's words up to ``word``. Once ``word`` and its tag are
        final (``final=True``) the fusion keys and values of the words up to it are kept."""
        if len(tags) < word + 1:
            raise InputError("a POS-fused model needs the tags of the window's words up to this one")
        self.compute()
        m = self.model
        top = self.h(m.cfg.n_layer)
        kept = min(self.fusion_keys.shape[2], word)
        h = top[[self._last_piece(w) for w in range(kept, word + 1)]][None]  # (1, n, C)
        tag_ids = torch.tensor(list(tags[kept : word + 1]), dtype=torch.long, device=self.device)
        z = torch.cat([h, m.tag_emb(tag_ids)[None]], dim=-1)  # (1, n, C + pos_dim)
        fusion = cast(Layer, m.fusion)  # a POS-fused model has its fusion layer
        q, k_new, v_new = fusion.attn.project(z)  # (1, heads, n, hs)
        keys = torch.cat([self.fusion_keys[:, :, :kept], k_new], dim=2)
        values = torch.cat([self.fusion_values[:, :, :kept], v_new], dim=2)
        if final:
            self.fusion_keys, self.fusion_values = keys, values
        everything = torch.ones(1, 1, 1, word + 1, dtype=torch.bool, device=self.device)
        attended = fusion.attn.attend(q[:, :, -1:], keys, values, everything)
        return self.decided(fusion.after_attention(z[:, -1:], attended)[0, 0])


class FusedStream(MaskedStream[FusedWindow]):
    """The masked engine's state for one stream of a POS-fused model: its windows
    (:class:`FusedWindow`), its tag stream under the same lookahead, and the final tag ids of its
    tokens from ``tokens.base`` on (a prefix of them)."""

    def __init__(self, engine: MaskedEngine, lookahead: int, tagger: Tagger):
        super().__init__(engine, lookahead, FusedWindow)
        self.tag_stream = tagger.stream(lookahead)
        self.index = tagger.index  # tag -> id
        self.tags: list[int] = []

    def _ids(self, tags: Iterable[str]) -> list[int]:
        return [self.index[tag] for tag in tags]

    def append(self, token: str, pieces: Pieces) -> None:
        super().append(token, pieces)
        self.tags += self._ids(tag for _, tag in self.tag_stream.push(token))

    def truncate(self, n: int) -> None:
        super().truncate(n)
        self.tag_stream.truncate(n)
        del self.tags[n - self.tokens.base :]

    def close(self) -> None:
        self.tags += self._ids(tag for _, tag in self.tag_stream.finish())

    def decide(self, t: int, ahead: int) -> torch.Tensor:
        start, end, base = self.engine.window_start(t), t + ahead + 1, self.tokens.base
        if ahead == self.k:  # the full lookahead: the block's window has it, and t's tag is final
            self.tokens.check(start, end)
            window = self.blocks[t // self.model.cfg.block]
            return window.logits(t - start, self.tags[start - base : t + 1 - base], final=True)
        # tags not final yet: as if the text ended at t + ahead
        tags = (self.tags + self._ids(self.tag_stream.peek(end)))[start - base : end - base]
        return self.engine.window_logits(self.tokens.span(start, end), t, ahead, base=start, tags=tags)

    def provisional(self, tokens: Sequence[int], first_open: int) -> list[torch.Tensor]:
        # final tags, then the tagger's current view of the rest
        tags, base = self.tags + self._ids(self.tag_stream.provisional()), self.tokens.base
        labels = []
        for t in tokens:
            start = self.engine.window_start(t)
            window = self.blocks[t // self.model.cfg.block]
            labels.append(window.logits(t - start, tags[start - base : t + 1 - base]))
        return labels

    def settle(self, keep_from: int) -> None:
        base = self.tokens.base
        super().settle(keep_from)
        del self.tags[: self.tokens.base - base]
