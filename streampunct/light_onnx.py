"""The light model as an ONNX graph, for runtimes without torch (onnxruntime, sherpa-onnx style).

    streampunct export-onnx [--model light] OUT.onnx

The graph labels a whole text at one lookahead: inputs ``pieces`` (T, max_pieces) int64 word-piece
ids (pad_id filled; :func:`~streampunct.light.piece_tensor`) and ``lookahead`` () int64 (-1:
offline); output ``logits`` (T, n_labels), the decision offsets added, so its argmax is the label
of each word, as :meth:`LightEngine.logits <streampunct.light.LightEngine.logits>` gives it (a text
of at most ``CHUNK`` words: longer texts attend in chunks there, the same keys either way).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from .light import LightModel

__all__ = ["export_onnx", "OnnxLight"]


class _Graph(nn.Module):
    def __init__(self, model: LightModel):
        super().__init__()
        self.model = model
        rows = model.cfg.label_bias or ((0.0,) * model.cfg.n_labels,) * 2
        self.bias = nn.Parameter(torch.tensor(rows), requires_grad=False)

    def forward(self, pieces: torch.Tensor, lookahead: torch.Tensor) -> torch.Tensor:
        m = self.model
        states, _ = m.recur(m.words(pieces)[None])
        pos = torch.arange(pieces.shape[0])
        # the last words are decided with the lookahead they have (-1: offline, every word)
        left = pieces.shape[0] - 1 - pos
        codes = torch.where(lookahead < 0, torch.full_like(pos, -1), torch.minimum(lookahead, left))
        logits = m.decide_codes(states[-1], m.kv(states), pos, pos, codes)[0]
        n = len(self.bias)
        rows = torch.where(codes < 0, torch.full_like(codes, n - 1), codes.clamp(max=n - 2))
        return logits + self.bias.index_select(0, rows)


def export_onnx(model: LightModel, path: str | Path) -> Path:
    """Write ``model`` as an ONNX graph (opset 17) to ``path``."""
    model = model.eval()
    pieces = torch.randint(
        1, model.cfg.vocab_size, (12, model.cfg.max_pieces), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on GRU shapes: the test checks the graph
        torch.onnx.export(
            _Graph(model).eval(),  # a new module is in training mode, and export restores it
            (pieces, torch.tensor(2)),
            str(path),
            input_names=["pieces", "lookahead"],
            output_names=["logits"],
            dynamic_axes={"pieces": {0: "words"}, "logits": {0: "words"}},
            opset_version=17,
            dynamo=False,  # the TorchScript exporter: its GRU is ONNX's, for any number of words
        )
    return Path(path)


class OnnxLight:
    """An exported light model under onnxruntime."""

    def __init__(self, path: str | Path):
        import onnxruntime  # type: ignore[import-untyped]

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def logits(self, pieces: torch.Tensor, lookahead: int | None) -> Any:
        """(T, n_labels) numpy logits, offsets added."""
        import numpy as np

        feeds = {"pieces": pieces.numpy(), "lookahead": np.array(-1 if lookahead is None else lookahead)}
        return self.session.run(["logits"], feeds)[0]
