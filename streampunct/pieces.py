"""From words to the model's input: word pieces, windows and padded batches.

Text of any length is cut into windows that depend only on absolute word positions: block ``b``
decides words ``[b*S, (b+1)*S)`` and is fed from ``b*S - C`` (left context) to the block's end
plus the lookahead (or plus ``C`` words offline). Word ``t``'s result is therefore a function of
words ``t - C - (t mod S)`` to ``t + k`` alone: a stream and a batch always agree, and nothing
after ``t + k`` (not even how many words there are) can change it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import CheckpointError, InputError
from .model import ModelConfig, window_limit

__all__ = ["Window", "plan_windows", "WordPieces", "collate", "collate_tags"]


@dataclass(frozen=True)
class Window:
    start: int  # first word fed
    first: int  # first word decided
    stop: int  # one past the last word decided
    end: int  # one past the last word fed


def plan_windows(n_words: int, cfg: ModelConfig, lookahead: int | None) -> list[Window]:
    right = cfg.context if lookahead is None else lookahead
    windows = []
    for first in range(0, n_words, cfg.block):
        stop = min(n_words, first + cfg.block)
        windows.append(Window(max(0, first - cfg.context), first, stop, min(n_words, stop + right)))
    return windows


class WordPieces:
    """WordPiece ids of words (cached), at most ``max_pieces`` per word."""

    def __init__(self, vocab_path: str | Path, max_pieces: int):
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        self._tok = Tokenizer(models.WordPiece.from_file(str(vocab_path), unk_token="[UNK]"))
        self._tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        self._tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self.max_pieces = max_pieces
        unk_id = self._tok.token_to_id("[UNK]")
        if unk_id is None:
            raise CheckpointError(f"{vocab_path}: the vocabulary has no [UNK]")
        self.unk_id: int = unk_id
        self._table: dict[str, tuple[int, ...]] = {}

    def encode(self, words: Sequence[str]) -> list[tuple[int, ...]]:
        """Pieces of each word; the tokenizer runs once per distinct word ever seen."""
        if len(self._table) > 500_000:  # a bound for servers that run for months
            self._table.clear()
        new = [w for w in dict.fromkeys(words) if w not in self._table]
        if new:
            for w, enc in zip(new, self._tok.encode_batch(new, add_special_tokens=False)):
                self._table[w] = tuple(enc.ids[: self.max_pieces]) or (self.unk_id,)
        return [self._table[w] for w in words]


def collate(
    windows: Sequence[Sequence[tuple[int, ...]]], cfg: ModelConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Word pieces of B windows -> input_ids (B, T), word_pos (B, T), word_ends (B, W), padded."""
    T = 1 + max(sum(len(p) for p in w) for w in windows)
    W = max(len(w) for w in windows)
    input_ids = torch.full((len(windows), T), cfg.pad_id, dtype=torch.long)
    word_pos = torch.full((len(windows), T), -1, dtype=torch.long)
    word_ends = torch.zeros((len(windows), W), dtype=torch.long)
    for b, pieces in enumerate(windows):
        ids = [cfg.cls_id]
        pos = [-1]
        for i, p in enumerate(pieces):
            ids.extend(p)
            pos.extend([i] * len(p))
            word_ends[b, i] = len(ids) - 1
        input_ids[b, : len(ids)] = torch.tensor(ids)
        word_pos[b, : len(pos)] = torch.tensor(pos)
    if T > window_limit(cfg):
        raise InputError(f"window of {T} pieces exceeds the model's {window_limit(cfg)} positions")
    return input_ids, word_pos, word_ends


def collate_tags(windows: Sequence[Sequence[int]]) -> torch.Tensor:
    """POS tag ids of B windows' words -> (B, W), padded with 0 (padding words are never seen)."""
    tags = torch.zeros((len(windows), max(len(w) for w in windows)), dtype=torch.long)
    for b, w in enumerate(windows):
        tags[b, : len(w)] = torch.tensor(list(w), dtype=torch.long)
    return tags
