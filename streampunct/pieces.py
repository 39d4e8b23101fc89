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
        table = self._table  # one table throughout, whatever another thread's call does
        if len(table) > 500_000:  # a bound for servers that run for months
            table = self._table = {}
        new = [w for w in dict.fromkeys(words) if w not in table]
        if new:
            for w, enc in zip(new, self._tok.encode_batch(new, add_special_tokens=False)):
                table[w] = tuple(enc.ids[: self.max_pieces]) or (self.unk_id,)
        return [table[w] for w in words]


def collate(
    windows: Sequence[Sequence[tuple[int, ...]]], cfg: ModelConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Word pieces of B windows -> input_ids (B, T), word_pos (B, T), word_ends (B, W), padded.

    Built with a few tensor operations over all the windows' pieces at once: Python touches each
    word once (its pieces), never each piece's place."""
    n_words = torch.tensor([len(w) for w in windows])  # (B,)
    words = [p for w in windows for p in w]
    n_pieces = torch.tensor([len(p) for p in words], dtype=torch.long)  # (words,)
    window_of = torch.repeat_interleave(torch.arange(len(windows)), n_words)  # each word's window
    first_word = torch.cumsum(n_words, 0) - n_words
    word_in_window = torch.arange(len(words)) - first_word[window_of]
    per_window = torch.zeros(len(windows), dtype=torch.long).index_add_(0, window_of, n_pieces)
    T = 1 + int(per_window.max()) if len(windows) else 1
    W = int(n_words.max()) if len(windows) else 0
    if T > window_limit(cfg):
        raise InputError(f"window of {T} pieces exceeds the model's {window_limit(cfg)} positions")
    # piece p of word w sits at 1 + (pieces before w in its window) + p
    first_piece = torch.cumsum(n_pieces, 0) - n_pieces  # over all windows
    start = first_piece - (torch.cumsum(per_window, 0) - per_window)[window_of] + 1  # (words,)
    piece_word = torch.repeat_interleave(torch.arange(len(words)), n_pieces)
    place = start[piece_word] + torch.arange(len(piece_word)) - first_piece[piece_word]
    rows = window_of[piece_word]
    input_ids = torch.full((len(windows), T), cfg.pad_id, dtype=torch.long)
    word_pos = torch.full((len(windows), T), -1, dtype=torch.long)
    input_ids[:, 0] = cfg.cls_id
    input_ids[rows, place] = torch.tensor([i for p in words for i in p], dtype=torch.long)
    word_pos[rows, place] = word_in_window[piece_word]
    word_ends = torch.zeros((len(windows), W), dtype=torch.long)
    word_ends[window_of, word_in_window] = start + n_pieces - 1
    return input_ids, word_pos, word_ends


def collate_tags(windows: Sequence[Sequence[int]]) -> torch.Tensor:
    """POS tag ids of B windows' words -> (B, W), padded with 0 (padding words are never seen)."""
    tags = torch.zeros((len(windows), max(len(w) for w in windows)), dtype=torch.long)
    for b, w in enumerate(windows):
        tags[b, : len(w)] = torch.tensor(list(w), dtype=torch.long)
    return tags
