"""FFA's two-stream teacher (Wang et al., shared/papers/ffa-two-stream-attention.txt): a training
tool that did not ship (docs/decisions.md), kept for a GPU run.

It is the product's :class:`~streampunct.model.PunctModel` with parts that each can be left out
for FFA's ablation (``streampunct train --interaction --masked-stream --stream-fusion``, which
builds it from a plain checkpoint):

- ``interaction``: every attention layer mixes its heads' scores before the softmax (FFA's
  interaction self-attention, J + P J with a learnt heads x heads P): :class:`MixedAttention`.
- ``masked_stream``: a second encoder of the same shape reads the window under the strictest mask
  (a word sees no word after it), and each word's two states are concatenated.
- ``stream_fusion``: one transformer layer over that concatenation (FFA's fusion layer; False:
  straight to the classifier).

The teacher labels whole windows: text for a student to learn (``--teacher`` in training, or
``python -m streampunct.training.teacher --model DIR FILE``, word<TAB>LABEL lines). A stream of it
is refused, and so is ``Punctuator.load`` of its folder: :func:`load_model` and :func:`punctuator`
load it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import InputError
from ..model import Encoder, Layer, Linear, ModelConfig, PunctModel, SelfAttention, fusion_mask, read_config
from ..pieces import WordPieces
from ..punctuator import Punctuator, checkpoint_dir, resolve_device

__all__ = ["TeacherConfig", "TwoStreamTeacher", "load_model", "punctuator"]


@dataclass(frozen=True)
class TeacherConfig(ModelConfig):
    interaction: bool = False
    masked_stream: bool = False
    stream_fusion: bool = True


class MixedAttention(SelfAttention):
    """FFA's interaction self-attention: each head's scores plus a learnt mix of every head's,
    before the mask and the softmax."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        # FFA's footnote: initialised with a spread of 0.1 / sqrt(C)
        self.mix = nn.Parameter(torch.randn(cfg.n_head, cfg.n_head) * 0.1 / cfg.n_embd**0.5)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, _, Tq, _ = q.shape
        p = self.dropout if self.training else 0.0
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5  # (B, nh, Tq, Tk)
        scores = scores + torch.einsum("gh,bhqk->bgqk", self.mix.to(scores.dtype), scores)  # J + P J
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, -math.inf)
        else:  # an additive mask (relative position bias)
            scores = scores + mask.to(scores.dtype)
        y = F.dropout(scores.softmax(-1), p) @ v  # (B, nh, Tq, hs)
        return self.out(y.transpose(1, 2).reshape(B, Tq, -1))


class TwoStreamTeacher(PunctModel):
    """FFA's teacher: the encoder (its attention mixed with ``interaction``), the masked stream
    beside it with ``masked_stream``, the fusion layer over both with ``stream_fusion``, and the
    classifier. It reads text alone: no POS fusion."""

    cfg: TeacherConfig

    def __init__(self, cfg: TeacherConfig):
        if cfg.n_tags:
            raise InputError("the two-stream teacher reads text alone: no POS fusion")
        super().__init__(cfg)
        if cfg.interaction:
            for layer in self.layers:
                layer.attn = MixedAttention(cfg)
        # the masked stream: the same encoder's shape, plain attention, no word ahead
        self.masked = Encoder(cfg) if cfg.masked_stream else None
        width = cfg.n_embd * (2 if cfg.masked_stream else 1)
        fused = cfg.masked_stream and cfg.stream_fusion
        self.fusion = (
            Layer(replace(cfg, n_embd=width, n_head=cfg.fusion_heads, n_inner=2 * width)) if fused else None
        )
        self.head = Linear(width, cfg.n_labels)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T) word-piece ids, [CLS] first, padded with pad_id
        word_pos: torch.Tensor,  # (B, T) word index in the window per token; -1 for [CLS]
        word_ends: torch.Tensor,  # (B, W) position of each word's last piece; 0 pads
        lookahead: int | None,
        tags: torch.Tensor | None = None,  # unused: the teacher reads text alone
    ) -> torch.Tensor:
        ends = word_ends[..., None].expand(-1, -1, self.cfg.n_embd)
        h = torch.gather(self.encode(input_ids, word_pos, lookahead), 1, ends)  # (B, W, C)
        if self.masked is not None:  # the masked stream's words see no word after them, at any k
            h = torch.cat([h, torch.gather(self.masked.encode(input_ids, word_pos, 0), 1, ends)], dim=-1)
        if self.fusion is not None:  # over each word's two states (B, W, 2C)
            h = self.fusion(h, fusion_mask(word_ends > 0, lookahead))
        return self.head(self.drop(h))  # (B, W, n_labels)

    @classmethod
    def config_of(cls, directory: Path) -> TeacherConfig:
        return read_config(TeacherConfig, directory)


def is_teacher(directory: str | Path) -> bool:
    """Whether a checkpoint folder holds a two-stream teacher (a folder without a config does not:
    loading it says what is missing)."""
    if not (Path(directory) / "config.json").is_file():
        return False
    cfg = read_config(TeacherConfig, directory)
    return cfg.interaction or cfg.masked_stream


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> PunctModel:
    """A checkpoint folder as the teacher where its config makes one, else as the product's model."""
    return (TwoStreamTeacher if is_teacher(directory) else PunctModel).load(directory, device)


def punctuator(model: str | Path | None = None, device: str | torch.device = "auto") -> Punctuator:
    """``Punctuator.load`` that also loads a teacher (offline labels, ``predict``; not streamed)."""
    d = checkpoint_dir(model)
    if not is_teacher(d):
        return Punctuator.load(d, device)
    teacher = TwoStreamTeacher.load(d, resolve_device(device))
    return Punctuator(teacher, WordPieces(d / "vocab.txt", teacher.cfg.max_pieces))


def main() -> None:
    ap = argparse.ArgumentParser(description="a text's word<TAB>LABEL lines, labelled offline")
    ap.add_argument("file", nargs="?", help="text file (default: stdin)")
    ap.add_argument("--model", required=True, help="a checkpoint folder: a teacher's, or any")
    ap.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if present)")
    args = ap.parse_args()
    text = Path(args.file).read_text(encoding="utf-8") if args.file else sys.stdin.read()
    words = text.split()
    labels = punctuator(args.model, args.device).predict(words) if words else []
    sys.stdout.writelines(f"{w}\t{label}\n" for w, label in zip(words, labels))


if __name__ == "__main__":
    main()
