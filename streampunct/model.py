"""The punctuation model, read top to bottom: a BERT encoder under a word-level lookahead mask.

Each token carries the index of the word it belongs to. In layer l a token of word w may attend to
the tokens of words ``<= w + k_l``; the per-layer budgets ``k_l`` add up to the lookahead ``k``
(see :func:`layer_lookaheads`), so the whole network's receptive field for word ``t`` ends at
word ``t + k`` however many layers are stacked (CT-Transformer's controllable time delay, built
from FFA's masked self-attention). ``lookahead=None`` is the offline mode: every word sees every
word of its window. The ``[CLS]`` token counts as word -1, so it obeys the same rule.

The encoder is BERT's (MiniLM-L6) or MPNet's: MPNet adds a relative position bias per head, shared
by every layer, and has no segment embedding (:meth:`PunctModel.from_encoder` reads either).

A checkpoint is ``config.json`` (the :class:`ModelConfig`) plus ``model.safetensors``; it rebuilds
the model with :meth:`PunctModel.load`. Weights are fp16, or int8 for the large matrices
(``save(..., int8=True)``: ``<name>.q8`` with an fp16 ``<name>.scale`` per ``Q8_GROUP`` weights of
a row), which halves a checkpoint again; loading rebuilds fp32 weights either way. The evidence
beside the text (``pauses.safetensors``, ``hearing.json``) is the decision's, not the model's:
:class:`streampunct.decision.Decider` reads it from the same folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from .errors import CheckpointError, InputError

__all__ = ["ModelConfig", "PunctModel", "layer_lookaheads", "window_limit"]

C = TypeVar("C")
M = TypeVar("M", bound=nn.Module)

Q8_GROUP = 32  # int8 checkpoints: one scale per this many weights of a row
Q8_MIN_SIZE = 100_000  # matrices smaller than this stay fp16
PAUSE_PREFIX = "pause_fusion."  # the pause fusion's weights in a checkpoint's files (streampunct.decision)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 30522
    n_layer: int = 6
    n_head: int = 12
    n_embd: int = 384
    n_inner: int = 1536
    max_positions: int = 512
    n_labels: int = 4
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    # How text is cut into windows (words): predicted blocks of `block` words, each seen with
    # `context` words before it and, offline, `context` words after it.
    block: int = 64
    context: int = 32
    max_pieces: int = 3  # word pieces kept per word, so a window always fits max_positions
    cls_id: int = 101
    pad_id: int = 0
    # MPNet: positions start at `pos_offset` (2) in the position table, there is no segment
    # embedding (0 types), and attention adds a bias per head for each key's offset from the
    # query, from `rel_buckets` log-spaced buckets (0: no bias, BERT).
    n_types: int = 2
    pos_offset: int = 0
    rel_buckets: int = 0
    rel_max_distance: int = 128
    # POS fusion (Shi et al. 2021, §2.1): each word's last hidden state is concatenated with the
    # embedding of its POS tag, and one more layer over the words fuses them. 0 tags: no fusion.
    n_tags: int = 0
    pos_dim: int = 512  # the tagger's softmax weights are (n_tags, 512)
    fusion_heads: int = 8
    # Offsets added to the logits before a decision, one row per lookahead (k = 0, 1, ..., the
    # last calibrated k also serving every larger one) and a last row for offline. A model trained
    # on cross-entropy marks too rarely where it sees little ahead; `streampunct calibrate` tunes
    # these on dev data (training/calibrate.py). Empty: the plain argmax.
    label_bias: tuple[tuple[float, ...], ...] = ()
    # The same for the window engine (a word decided by the offline model over a window that ends
    # k words after it, see punctuator.py): one row per lookahead from k=0, the last for larger k.
    window_bias: tuple[tuple[float, ...], ...] = ()
    # engine="auto" takes the window engine from this lookahead on, the masked one below it:
    # calibrate sets it where the window engine starts to score higher on dev data.
    window_from: int = 1
    # Pauses as evidence (streampunct.prosody, read by streampunct.decision): the width of the small
    # network that corrects a decision's logits from its word times. 0: none, the text alone decides.
    pause_hidden: int = 0
    # Whether that network also reads the mark each word arrived with (the recogniser's own).
    pause_marks: bool = False
    # Whether it also reads a sentence-end mark followed by a word in lower case (a streamed
    # recogniser's mid-sentence period that a later pass went on from).
    pause_continued: bool = False

    @classmethod
    def read(cls, directory: str | Path) -> ModelConfig:
        return read_config(cls, directory)


def read_config(cls: type[C], directory: str | Path) -> C:
    """A checkpoint's ``config.json`` as ``cls`` (a config dataclass; keys this version does not
    know are left out)."""
    raw = json.loads((Path(directory) / "config.json").read_text())
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in raw.items() if k in known})


def write_config(directory: str | Path, cfg: object) -> None:
    """``config.json`` of a config dataclass, the folder made if need be."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")  # type: ignore[call-overload]


def fit_state(model: M, state: dict[str, torch.Tensor], directory: Path, device: str | torch.device) -> M:
    """``model`` with a checkpoint's weights, on ``device``, in eval mode; a weight missing or left
    over is a CheckpointError naming the folder."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {directory} does not fit the model: {missing or unexpected}")
    return model.to(device).eval()


def window_limit(cfg: ModelConfig) -> int:
    """The most tokens (``[CLS]`` included) a window may hold."""
    return cfg.max_positions - cfg.pos_offset


def layer_lookaheads(lookahead: int | None, n_layer: int) -> list[int | None]:
    """Split a lookahead of k words over the layers, front-loaded: k=2 over 6 layers is 1,1,0,0,0,0."""
    if lookahead is None:
        return [None] * n_layer
    if lookahead < 0:
        raise InputError(f"lookahead must be >= 0, got {lookahead}")
    base, extra = divmod(lookahead, n_layer)
    return [base + (1 if i < extra else 0) for i in range(n_layer)]


FEW_ROWS = 64  # up to this many rows, CPU inference multiplies with prepacked weights


class Linear(nn.Linear):
    """``nn.Linear`` that is quick for a few rows at a time: a stream's newest words.

    In CPU inference with at most ``FEW_ROWS`` rows it multiplies by weights that oneDNN packed
    once: on an AVX2 CPU 1.3 to 2.4 times as fast as the default GEMM for 20 down to 3 rows, and
    each row's result is the same whatever rows share the call. Training, GPUs and large batches
    use ``F.linear``.
    """

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.int8 = False  # CPU inference in int8 (quantize_int8)
        # forms of the weight for inference, by kind: (the weight, its version, the form)
        self._made: dict[str, tuple[torch.Tensor, int, object]] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if not x.is_cpu or torch.is_grad_enabled() or self.training:
            return F.linear(x, w, self.bias)
        if self.int8:
            return self._int8_forward(x)
        if _ONEDNN and x.numel() <= FEW_ROWS * x.shape[-1] and x.dtype == w.dtype == torch.float32:
            packed = self._from_weight("packed", lambda w: torch.ops.mkldnn._reorder_linear_weight(w, 8))
            return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")
        return F.linear(x, w, self.bias)

    def _from_weight(self, kind: str, make: Callable[[torch.Tensor], Any]) -> Any:
        """A form of the weight, made once and again after any change to it (load_state_dict
        changes it in place)."""
        w = self.weight
        made = self._made.get(kind)
        if made is None or made[0] is not w or made[1] != w._version:
            made = self._made[kind] = (w, w._version, make(w.detach()))
        return made[2]

    def _int8_forward(self, x: torch.Tensor) -> torch.Tensor:
        """int8 weights (a scale per output row) times int8 inputs (a scale per input row): the
        products summed exactly in int32, then scaled back. A row's result depends on that row
        alone, whatever rows share the call, as in fp32."""
        wq, scale = self._from_weight("int8", _int8_rows)
        rows = x.reshape(-1, x.shape[-1])
        xs = (rows.abs().amax(1, keepdim=True) / 127).clamp(min=1e-12)
        y = torch._int_mm(torch.round(rows / xs).to(torch.int8), wq).float() * xs * scale
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], -1)

    def __getstate__(self) -> dict:  # a packed weight cannot be copied; it is made again
        return {**super().__getstate__(), "_made": {}}


def _int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight as int8 with a scale per row, transposed for ``torch._int_mm``."""
    scale = (w.abs().amax(1) / 127).clamp(min=1e-12)
    return torch.round(w / scale[:, None]).to(torch.int8).t().contiguous(), scale


def _onednn_linear() -> bool:
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(2, 2), 8)
        y = torch.ops.mkldnn._linear_pointwise(torch.ones(1, 2), w, None, "none", [], "")
        return bool(torch.equal(y, torch.full((1, 2), 2.0)))
    except (AttributeError, RuntimeError, TypeError, NotImplementedError):  # a private op: may change
        return False


_ONEDNN = torch.backends.mkldnn.is_available() and _onednn_linear()


def int8_available() -> bool:
    """Whether this torch multiplies int8 matrices on the CPU (``torch._int_mm``, private)."""
    try:
        a = torch.ones(1, 8, dtype=torch.int8)
        return bool(
            torch.equal(torch._int_mm(a, a.t().contiguous()), torch.full((1, 1), 8, dtype=torch.int32))
        )
    except (AttributeError, RuntimeError, TypeError, NotImplementedError):
        return False


def attention_mask(word_pos: torch.Tensor, valid: torch.Tensor, k: int | None) -> torch.Tensor:
    """(B, T) word index per token, (B, T) validity -> (B, 1, T, T) bool: may query i see key j."""
    keys = valid[:, None, :]  # (B, 1, T)
    if k is None:
        allowed = keys.expand(-1, word_pos.shape[1], -1)
    else:
        allowed = keys & (word_pos[:, None, :] <= word_pos[:, :, None] + k)  # (B, T, T)
    return allowed[:, None, :, :]


def fusion_mask(valid: torch.Tensor, lookahead: int | None) -> torch.Tensor:
    """(B, W) words that exist -> (B, 1, W, W): which words a word sees in the fusion layer (over
    each word's features: its last hidden state and its POS tag's embedding).
    With a lookahead, earlier words only: each feature of a word depends on words up to k after it,
    so the bound stays k. Offline, every word."""
    W = valid.shape[1]
    allowed = valid[:, None, :].expand(-1, W, -1)  # (B, W, W): key words that exist
    if lookahead is not None:
        allowed = allowed & torch.ones(W, W, dtype=torch.bool, device=valid.device).tril()
    return allowed[:, None]


def relative_buckets(offset: torch.Tensor, n_buckets: int, max_distance: int) -> torch.Tensor:
    """MPNet's bucket of each key's offset from its query (``key - query``, in tokens): half the
    buckets for keys before the query and half for keys after; offsets below a quarter of the
    buckets have one each, larger ones share log-spaced buckets up to ``max_distance``."""
    half = n_buckets // 2
    exact = half // 2
    n = offset.abs()
    spread = torch.log(n.clamp(min=1).float() / exact) / math.log(max_distance / exact) * (half - exact)
    large = (exact + spread.long()).clamp(max=half - 1)
    return (offset > 0).long() * half + torch.where(n < exact, n, large)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = Linear(cfg.n_embd, 3 * cfg.n_embd)  # queries, keys and values in one product
        self.out = Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def _heads(self, y: torch.Tensor) -> torch.Tensor:
        B, T, C = y.shape
        return y.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of tokens x (B, T, C): each (B, nh, T, hs)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._heads(q), self._heads(k), self._heads(v)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Queries (B, nh, Tq, hs) over keys and values (B, nh, Tk, hs) -> (B, Tq, C). A stream
        passes the keys and values it kept with the new tokens' queries."""
        B, _, Tq, _ = q.shape
        p = self.dropout if self.training else 0.0
        if mask.dtype != torch.bool:  # an additive mask (relative position bias): q's dtype
            mask = mask.to(q.dtype)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (B, nh, Tq, hs)
        return self.out(y.transpose(1, 2).reshape(B, Tq, -1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.attend(*self.project(x), mask)


class Layer(nn.Module):
    """A post-LayerNorm BERT layer."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.ln_attn = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.fc_in = Linear(cfg.n_embd, cfg.n_inner)
        self.fc_out = Linear(cfg.n_inner, cfg.n_embd)
        self.ln_mlp = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.after_attention(x, self.attn(x, mask))

    def after_attention(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The rest of the layer: residual and LayerNorm, feed-forward, residual and LayerNorm. A
        stream computes attention its own way (kept keys and values) and then this."""
        x = self.ln_attn(x + self.drop(attended))
        return self.ln_mlp(x + self.drop(self.fc_out(F.gelu(self.fc_in(x)))))


class Encoder(nn.Module):
    """Embeddings and the stack of layers: word pieces in, last hidden states out."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd, padding_idx=cfg.pad_id)
        self.pos_emb = nn.Embedding(cfg.max_positions, cfg.n_embd)
        # BERT's segment embedding (only type 0 is used); MPNet has none
        self.type_emb = nn.Embedding(cfg.n_types, cfg.n_embd) if cfg.n_types else None
        self.ln_emb = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.rel_bias = nn.Embedding(cfg.rel_buckets, cfg.n_head) if cfg.rel_buckets else None
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layer))

    def embed(self, input_ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Token ids and their positions in the window (``[CLS]`` is 0) -> embeddings (.., C)."""
        x = self.tok_emb(input_ids) + self.pos_emb(pos + self.cfg.pos_offset)
        if self.type_emb is not None:
            x = x + self.type_emb.weight[0]
        return self.ln_emb(x)

    def position_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """(nh, Tq, Tk) relative position bias of queries at ``q_pos`` over keys at ``k_pos``, or
        None for a model without (BERT)."""
        if self.rel_bias is None:
            return None
        buckets = relative_buckets(
            k_pos[None, :] - q_pos[:, None], self.cfg.rel_buckets, self.cfg.rel_max_distance
        )
        return self.rel_bias(buckets).permute(2, 0, 1)

    def encode(self, input_ids: torch.Tensor, word_pos: torch.Tensor, lookahead: int | None) -> torch.Tensor:
        """(B, T) word-piece ids and word index per token -> (B, T, C) last hidden states."""
        T = input_ids.shape[1]
        valid = input_ids != self.cfg.pad_id
        valid[:, 0] = True
        pos = torch.arange(T, device=input_ids.device)
        x = self.drop(self.embed(input_ids, pos))  # (B, T, C)
        bias = self.position_bias(pos, pos)
        masks: dict[int | None, torch.Tensor] = {}
        for layer, k in zip(self.layers, layer_lookaheads(lookahead, self.cfg.n_layer)):
            if k not in masks:
                masks[k] = attention_mask(word_pos, valid, k)
                if bias is not None:  # additive: the bias where allowed, -inf elsewhere
                    masks[k] = torch.where(masks[k], bias[None], -math.inf)
                    if torch.is_autocast_enabled(x.device.type):  # made once, not in every layer
                        masks[k] = masks[k].to(torch.get_autocast_dtype(x.device.type))
            x = layer(x, masks[k])
        return x


class PunctModel(Encoder):
    """The encoder and a classifier over each word's last piece (with POS fusion where the
    checkpoint has it)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        width = cfg.n_embd
        if cfg.n_tags:
            width += cfg.pos_dim
            self.tag_emb = nn.Embedding(cfg.n_tags, cfg.pos_dim)
        self.fusion = (
            Layer(replace(cfg, n_embd=width, n_head=cfg.fusion_heads, n_inner=2 * width))
            if cfg.n_tags
            else None
        )
        self.head = Linear(width, cfg.n_labels)
        self.set_label_bias(cfg.label_bias, cfg.window_bias)

    def set_label_bias(
        self,
        rows: Sequence[Sequence[float]],
        window_rows: Sequence[Sequence[float]] = (),
        window_from: int | None = None,
    ) -> None:
        """Replace the decision offsets (``ModelConfig.label_bias`` and ``window_bias``); ``()``
        removes them. ``window_from`` (unchanged when None): where "auto" turns to the window engine."""
        n = self.cfg.n_labels
        if rows and (len(rows) < 2 or any(len(row) != n for row in rows)):
            raise InputError(
                f"label_bias needs a row of {n} offsets for each lookahead from k=0 "
                f"and one for offline, got {[len(row) for row in rows]}"
            )
        if any(len(row) != n for row in window_rows):
            raise InputError(
                f"window_bias needs a row of {n} offsets for each lookahead from k=0, "
                f"got {[len(row) for row in window_rows]}"
            )
        window_from = self.cfg.window_from if window_from is None else window_from
        self.cfg = replace(
            self.cfg, label_bias=_rows(rows), window_bias=_rows(window_rows), window_from=window_from
        )
        self._label_bias = torch.tensor(self.cfg.label_bias) if rows else None
        self._window_bias = torch.tensor(self.cfg.window_bias) if window_rows else None

    def masked_offsets(self, logits: torch.Tensor, lookahead: int | None) -> torch.Tensor:
        """CPU logits (..., n_labels) plus the masked engine's decision offsets for ``lookahead``
        (``label_bias``: a row per lookahead from k=0, the last but one for every larger k, the
        last offline): what its decisions take the argmax of."""
        if self._label_bias is None:
            return logits
        rows = self._label_bias
        return logits + rows[-1 if lookahead is None else min(lookahead, len(rows) - 2)]

    def window_offsets(self, logits: torch.Tensor, lookahead: int | torch.Tensor) -> torch.Tensor:
        """CPU logits (..., n_labels) plus the window engine's decision offsets for ``lookahead``
        (``window_bias``: a row per lookahead from k=0, the last for every larger k); a tensor of
        lookaheads gives each row of ``logits`` its own."""
        if self._window_bias is None:
            return logits
        top = len(self._window_bias) - 1
        if isinstance(lookahead, torch.Tensor):
            return logits + self._window_bias[lookahead.clamp(max=top)]
        return logits + self._window_bias[min(lookahead, top)]

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T) word-piece ids, [CLS] first, padded with pad_id
        word_pos: torch.Tensor,  # (B, T) word index in the window per token; -1 for [CLS]
        word_ends: torch.Tensor,  # (B, W) position of each word's last piece; 0 pads
        lookahead: int | None,
        tags: torch.Tensor | None = None,  # (B, W) POS tag ids, for a model with n_tags
    ) -> torch.Tensor:
        ends = word_ends[..., None].expand(-1, -1, self.cfg.n_embd)
        h = torch.gather(self.encode(input_ids, word_pos, lookahead), 1, ends)  # (B, W, C)
        if self.cfg.n_tags:
            if tags is None:
                raise InputError("this model fuses POS tags: give the words' tags")
            h = torch.cat([h, self.tag_emb(tags)], dim=-1)
        if self.fusion is not None:  # over the words' concatenated features
            h = self.fusion(h, fusion_mask(word_ends > 0, lookahead))
        return self.head(self.drop(h))  # (B, W, n_labels)

    @torch.no_grad()
    def init_pos_embedding(self, weight: torch.Tensor) -> None:
        """Start the POS embeddings from a tagger's softmax weights (n_tags, pos_dim)."""
        if tuple(weight.shape) != tuple(self.tag_emb.weight.shape):
            raise InputError(
                f"POS weights {tuple(weight.shape)} do not fit {tuple(self.tag_emb.weight.shape)}"
            )
        self.tag_emb.weight.copy_(weight)

    # --- checkpoints -------------------------------------------------------------------------

    def save(self, directory: str | Path, dtype: torch.dtype = torch.float16, int8: bool = False) -> None:
        """``config.json`` and ``model.safetensors``: weights in ``dtype``, the large matrices in
        int8 with ``int8`` (see the module's docstring)."""
        from safetensors.torch import save_file

        d = Path(directory)
        self.save_config(d)
        state = {k: v.detach().to("cpu", torch.float32) for k, v in self.state_dict().items()}
        state = _quantize(state) if int8 else state
        save_file(
            {k: v if v.dtype == torch.int8 else v.to(dtype).contiguous() for k, v in state.items()},
            str(d / "model.safetensors"),
        )

    def save_config(self, directory: str | Path) -> None:
        """``config.json`` alone (the decision offsets change nothing else)."""
        write_config(directory, self.cfg)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> PunctModel:
        from safetensors.torch import load_file

        d = Path(directory)
        try:
            model = cls(cls.config_of(d))
            state = load_file(str(d / "model.safetensors"))
        except (OSError, ValueError, TypeError) as e:
            raise CheckpointError(f"cannot read checkpoint in {d}: {e}") from e
        # a checkpoint written before the pause fusion had a file of its own keeps it here: the decision's
        state = {k: v for k, v in state.items() if not k.startswith(PAUSE_PREFIX)}
        return fit_state(model, _fuse_qkv(_dequantize(state)), d, device)

    @classmethod
    def config_of(cls, directory: Path) -> ModelConfig:
        """A checkpoint's config. FFA's two-stream teacher, a training tool that did not ship
        (its config sets ``interaction`` or ``masked_stream``), is refused: it loads with
        :mod:`streampunct.training.teacher`."""
        raw = json.loads((directory / "config.json").read_text())
        if raw.get("interaction") or raw.get("masked_stream"):
            raise CheckpointError(
                f"{directory} is FFA's two-stream teacher, a training tool: load it with "
                "streampunct.training.teacher (TwoStreamTeacher.load, or punctuator() to label text)"
            )
        return ModelConfig.read(directory)

    def quantize_int8(self) -> PunctModel:
        """CPU inference with the encoder's matrices in int8 (:meth:`Linear._int8_forward`), the
        label head in fp32: a stream's word about 1.4 times as fast on a CPU with int8 instructions
        (VNNI, AMX), dev micro-F1 about 0.25 below fp32's (docs/decisions.md). Training and GPUs
        are unchanged."""
        if not int8_available():
            raise InputError("int8 inference needs torch._int_mm on the CPU (torch >= 2.4)")
        for mod in self.modules():
            if isinstance(mod, Linear) and mod is not self.head:
                mod.int8 = True
        return self

    @classmethod
    def from_encoder(cls, encoder_dir: str | Path, **overrides: object) -> PunctModel:
        """A fresh model whose encoder is a Hugging Face BERT (e.g. MiniLM-L6) or MPNet checkpoint
        (a folder with ``config.json``, ``model.safetensors`` and ``vocab.txt``)."""
        from safetensors.torch import load_file

        d = Path(encoder_dir)
        hf = json.loads((d / "config.json").read_text())
        kind = hf.get("model_type", "bert")
        if kind not in ENCODER_NAMES:
            raise CheckpointError(f"{d}: a {kind!r} encoder; streampunct reads {sorted(ENCODER_NAMES)}")
        vocab = {w: i for i, w in enumerate((d / "vocab.txt").read_text(encoding="utf-8").splitlines())}
        cls_token, pad_token = ("<s>", "<pad>") if kind == "mpnet" else ("[CLS]", "[PAD]")
        shape = dict(
            vocab_size=hf["vocab_size"],
            n_layer=hf["num_hidden_layers"],
            n_head=hf["num_attention_heads"],
            n_embd=hf["hidden_size"],
            n_inner=hf["intermediate_size"],
            max_positions=hf["max_position_embeddings"],
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            cls_id=vocab[cls_token],
            pad_id=vocab[pad_token],
        )
        if kind == "mpnet":  # positions count from padding_idx + 1, as in RoBERTa
            shape.update(
                n_types=0, pos_offset=hf["pad_token_id"] + 1, rel_buckets=hf["relative_attention_num_buckets"]
            )
        model = cls(ModelConfig(**{**shape, **overrides}))
        src = {
            k.removeprefix(f"{kind}."): v.float() for k, v in load_file(str(d / "model.safetensors")).items()
        }
        names, per_layer = ENCODER_NAMES[kind]
        names = dict(names)
        for i in range(model.cfg.n_layer):
            for ours, theirs in per_layer.items():
                for p in ("weight", "bias"):
                    names[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
        state = _fuse_qkv({ours: src[theirs] for ours, theirs in names.items()})
        nn.init.normal_(model.head.weight, std=0.02)
        nn.init.zeros_(model.head.bias)
        state["head.weight"] = model.head.weight.data
        state["head.bias"] = model.head.bias.data
        fresh = {k: v for k, v in model.state_dict().items() if k.startswith(("tag_emb.", "fusion."))}
        model.load_state_dict({**fresh, **state})
        return model

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


_EMBEDDINGS = {
    "tok_emb.weight": "embeddings.word_embeddings.weight",
    "pos_emb.weight": "embeddings.position_embeddings.weight",
    "ln_emb.weight": "embeddings.LayerNorm.weight",
    "ln_emb.bias": "embeddings.LayerNorm.bias",
}
# Our parameter names -> a Hugging Face encoder's: the model's own, then each layer's.
ENCODER_NAMES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "bert": (
        {**_EMBEDDINGS, "type_emb.weight": "embeddings.token_type_embeddings.weight"},
        {
            "attn.query": "attention.self.query",
            "attn.key": "attention.self.key",
            "attn.value": "attention.self.value",
            "attn.out": "attention.output.dense",
            "ln_attn": "attention.output.LayerNorm",
            "fc_in": "intermediate.dense",
            "fc_out": "output.dense",
            "ln_mlp": "output.LayerNorm",
        },
    ),
    "mpnet": (
        {**_EMBEDDINGS, "rel_bias.weight": "encoder.relative_attention_bias.weight"},
        {
            "attn.query": "attention.attn.q",
            "attn.key": "attention.attn.k",
            "attn.value": "attention.attn.v",
            "attn.out": "attention.attn.o",
            "ln_attn": "attention.LayerNorm",
            "fc_in": "intermediate.dense",
            "fc_out": "output.dense",
            "ln_mlp": "output.LayerNorm",
        },
    ),
}


def _rows(rows: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(x) for x in row) for row in rows)


def _quantize(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The matrices of ``Q8_MIN_SIZE`` weights or more as int8, a scale per ``Q8_GROUP`` of a row."""
    out = {}
    for k, v in state.items():
        if v.ndim != 2 or v.numel() < Q8_MIN_SIZE or v.shape[1] % Q8_GROUP:
            out[k] = v
            continue
        groups = v.reshape(v.shape[0], -1, Q8_GROUP)
        scale = (groups.abs().amax(dim=2).clamp(min=1e-8) / 127).half()  # (rows, cols / Q8_GROUP)
        out[k + ".q8"] = torch.round(groups / scale.float()[..., None]).to(torch.int8).reshape(v.shape)
        out[k + ".scale"] = scale
    return out


def _dequantize(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fp32 weights from a checkpoint's fp16 and int8 ones (see :func:`_quantize`)."""
    out = {}
    for k, v in state.items():
        if k.endswith(".q8"):
            name = k.removesuffix(".q8")
            scale = state[name + ".scale"].float()
            out[name] = (v.float().reshape(v.shape[0], -1, Q8_GROUP) * scale[..., None]).reshape(v.shape)
        elif not k.endswith(".scale"):
            out[k] = v.float()
    return out


def _fuse_qkv(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Separate query, key and value projections (BERT's, and checkpoints saved before they were
    fused) -> one ``qkv`` projection."""
    for name in [k for k in state if k.endswith("attn.query.weight")]:
        prefix = name.removesuffix("query.weight")
        for p in ("weight", "bias"):
            parts = [state.pop(f"{prefix}{part}.{p}") for part in ("query", "key", "value")]
            state[f"{prefix}qkv.{p}"] = torch.cat(parts)
    return state
