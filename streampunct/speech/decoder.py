"""Whisper's decoder in PyTorch, from the weights of a CTranslate2 Whisper folder, for the one thing
CTranslate2 does not give: the cross-attention of the alignment heads on each token
(:mod:`.alignatt` commits by it). It reads ``model.bin`` itself (the CTranslate2 format: a header,
then each variable's name, shape, type and bytes, then aliases), in float32, once per model.

The decoder is Whisper's (Radford et al. 2022): token and learned position embeddings, pre-norm
blocks of causal self-attention, cross-attention on the encoder's output and a GELU MLP, a final
norm, and the token embedding as the output projection. It runs teacher-forced: one call takes a
whole token sequence, as the attention at a token depends only on the tokens before it, a
decoder that writes a sequence and one that reads it after see the same attention.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import StreamPunctError

__all__ = ["WhisperDecoder", "read_ctranslate2"]

# CTranslate2's DataType ids (include/ctranslate2/types.h) as numpy types.
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ctranslate2(path: str | Path) -> dict[str, np.ndarray]:
    """Every variable of a CTranslate2 ``model.bin`` (format version 6) by name, aliases included."""
    data = Path(path).read_bytes()
    at = 0

    def take(fmt: str) -> tuple[int, ...]:
        nonlocal at
        values = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return values

    def text() -> str:
        nonlocal at
        (n,) = take("<H")
        at += n
        return data[at - n : at].rstrip(b"\0").decode()

    (version,) = take("<I")
    if version != 6:
        raise StreamPunctError(f"{path}: CTranslate2 model format {version}, not 6")
    text(), take("<I")  # the spec's name and revision
    (count,) = take("<I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = text()
        (rank,) = take("<B")
        shape = take(f"<{rank}I")
        dtype, size = take("<BI")
        if dtype not in _DTYPES:
            raise StreamPunctError(f"{path}: {name} has CTranslate2 type {dtype}, which is not read here")
        variables[name] = np.frombuffer(data, _DTYPES[dtype], size // np.dtype(_DTYPES[dtype]).itemsize, at)
        variables[name] = variables[name].reshape(shape)
        at += size
    (aliases,) = take("<I")
    for _ in range(aliases):
        alias = text()
        variables[alias] = variables[text()]
    return variables


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int, cross: bool):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.query = nn.Linear(width, width)
        self.key_value = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)
        self.cross = cross

    def forward(self, x: torch.Tensor, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, T, W) attends to ``source`` (itself, causally, or the audio); the output and
        the attention weights (B, heads, T, S)."""
        h = self.norm(x)
        q = self.query(h)
        k, v = self.key_value(source if self.cross else h).chunk(2, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if not self.cross:
            t = x.shape[1]
            scores = scores.masked_fill(
                torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf")
            )
        weights = scores.softmax(-1)
        return x + self.out((weights @ v).transpose(1, 2).flatten(2)), weights


class _Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.self_attention = _Attention(width, heads, cross=False)
        self.cross_attention = _Attention(width, heads, cross=True)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, _ = self.self_attention(x, x)
        x, weights = self.cross_attention(x, audio)
        return x + self.mlp(self.mlp_norm(x)), weights


class WhisperDecoder(nn.Module):
    """Whisper's decoder; ``alignment_heads``: (layer, head) pairs whose cross-attention follows
    the audio (the model's config.json has them)."""

    def __init__(
        self, vocabulary: int, width: int, layers: int, heads: int, alignment_heads: list[list[int]]
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.positions = nn.Parameter(torch.zeros(448, width))
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.alignment_heads = [(int(layer), int(head)) for layer, head in alignment_heads]

    @classmethod
    def load(cls, folder: str | Path) -> WhisperDecoder:
        """The decoder of a CTranslate2 Whisper folder (``model.bin`` and ``config.json``)."""
        folder = Path(folder)
        weights = read_ctranslate2(folder / "model.bin")
        config = json.loads((folder / "config.json").read_text())
        vocabulary, width = weights["decoder/embeddings/weight"].shape
        layers = 1 + max(int(m[1]) for m in map(re.compile(r"decoder/layer_(\d+)/").match, weights) if m)
        heads = int(weights["decoder/num_heads"])
        decoder = cls(vocabulary, width, layers, heads, config["alignment_heads"])
        decoder.load_state_dict(_state_dict(weights, layers))
        return decoder.eval()

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens`` (B, T) read on ``audio`` (B, frames, W), the encoder's output: the logits
        (B, T, vocabulary) and the alignment heads' cross-attention (B, heads, T, frames)."""
        x = self.embedding(tokens) + self.positions[: tokens.shape[1]]
        attention = {}
        for layer, block in enumerate(self.blocks):
            x, weights = block(x, audio)
            attention[layer] = weights
        logits = self.norm(x) @ self.embedding.weight.T
        return logits, torch.stack([attention[layer][:, head] for layer, head in self.alignment_heads], 1)


def _state_dict(weights: dict[str, np.ndarray], layers: int) -> dict[str, torch.Tensor]:
    """This module's parameters from CTranslate2's variables (self-attention's query, key and
    value are one matrix there)."""
    ours: dict[str, np.ndarray] = {
        "embedding.weight": weights["decoder/embeddings/weight"],
        "positions": weights["decoder/position_encodings/encodings"],
        "norm.weight": weights["decoder/layer_norm/gamma"],
        "norm.bias": weights["decoder/layer_norm/beta"],
    }

    def linear(name: str, variable: str, rows: slice = slice(None)) -> None:
        ours[name + ".weight"] = weights[variable + "/weight"][rows]
        ours[name + ".bias"] = weights[variable + "/bias"][rows]

    def norm(name: str, variable: str) -> None:
        ours[name + ".weight"] = weights[variable + "/gamma"]
        ours[name + ".bias"] = weights[variable + "/beta"]

    width = ours["norm.weight"].shape[0]
    for i in range(layers):
        block, layer = f"blocks.{i}.", f"decoder/layer_{i}/"
        norm(block + "self_attention.norm", layer + "self_attention/layer_norm")
        linear(block + "self_attention.query", layer + "self_attention/linear_0", slice(0, width))
        linear(block + "self_attention.key_value", layer + "self_attention/linear_0", slice(width, None))
        linear(block + "self_attention.out", layer + "self_attention/linear_1")
        norm(block + "cross_attention.norm", layer + "attention/layer_norm")
        linear(block + "cross_attention.query", layer + "attention/linear_0")
        linear(block + "cross_attention.key_value", layer + "attention/linear_1")
        linear(block + "cross_attention.out", layer + "attention/linear_2")
        norm(block + "mlp_norm", layer + "ffn/layer_norm")
        linear(block + "mlp.0", layer + "ffn/linear_0")
        linear(block + "mlp.2", layer + "ffn/linear_1")
    return {name: torch.from_numpy(value.astype(np.float32)) for name, value in ours.items()}
