"""The light model, after DRNN-LWMA (Kim 2019) in streaming form: a forward recurrence read by
layer-wise multi-head attention that sees at most ``k`` words ahead.

A word is its word pieces (at most ``max_pieces``, each slot its own embedding, concatenated and
projected). Stacked forward GRUs read the words in order, so a word's states in every layer depend
on it and the words before it only. Word ``t`` is decided by attention from its top-layer state
(the query) over each layer's states of the words ``t - context`` to ``t + k`` (one multi-head
attention per layer, with a learned bias per head for each key's offset from ``t``; the layers'
readings, the top state and an embedding of ``k`` go to the classifier). Offline, ``k`` is
``offline_ahead`` words. Every state a decision reads is final once its word has arrived, so a
stream computes each word's states once, when it arrives (one GRU step per layer), and a decision
is one query over at most ``context + k + 1`` cached keys: exact, incremental, cheap per word.

A checkpoint is ``config.json`` (the :class:`LightConfig`, ``"arch": "light"``), ``model.safetensors``
(fp16) and the vocabulary ``vocab.txt`` of the word pieces; :func:`is_light` tells one from an
encoder checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .errors import CheckpointError
from .model import fit_state, read_config, write_config

__all__ = [
    "LightConfig",
    "LightModel",
    "LightEngine",
    "LightStream",
    "LightWork",
    "compute_light",
    "is_light",
]

Pieces = tuple[int, ...]
CHUNK = 512  # a long text's queries are attended in chunks of this many words


@dataclass(frozen=True)
class LightConfig:
    arch: str = "light"
    vocab_size: int = 30522
    pad_id: int = 0
    max_pieces: int = 3
    n_embd: int = 128  # each word piece's embedding
    n_input: int = 256  # a word's input to the first GRU
    n_hidden: int = 320  # every GRU layer's state
    n_layer: int = 2
    n_head: int = 4
    context: int = 24  # words before t that each attention reads
    offline_ahead: int = 24  # words after t that the offline mode reads
    max_ahead: int = 8  # lookaheads beyond this share its embedding
    n_labels: int = 4
    dropout: float = 0.1
    n_tags: int = 0  # no POS fusion (the interface's field)
    window_from: int | None = None  # no window engine (the interface's field)
    # Decision offsets added to the logits, a row per lookahead k = 0 .. len-2, then offline.
    label_bias: tuple[tuple[float, ...], ...] = ()

    @classmethod
    def read(cls, directory: str | Path) -> LightConfig:
        cfg = read_config(cls, directory)
        return replace(cfg, label_bias=tuple(tuple(r) for r in cfg.label_bias))


def is_light(directory: str | Path) -> bool:
    """Whether a checkpoint folder holds a light model."""
    try:
        return json.loads((Path(directory) / "config.json").read_text()).get("arch") == "light"
    except (OSError, ValueError):
        return False


class LightModel(nn.Module):
    pause_fusion = None  # no pause fusion (the interface's field)

    def __init__(self, cfg: LightConfig):
        super().__init__()
        self.cfg = cfg
        H, L = cfg.n_hidden, cfg.n_layer
        self.embed = nn.Embedding(cfg.vocab_size, cfg.n_embd, padding_idx=cfg.pad_id)
        self.inp = nn.Linear(cfg.max_pieces * cfg.n_embd, cfg.n_input)
        self.grus = nn.ModuleList(nn.GRU(cfg.n_input if i == 0 else H, H, batch_first=True) for i in range(L))
        self.query = nn.Linear(H, L * H)
        self.keys = nn.ModuleList(nn.Linear(H, 2 * H) for _ in range(L))
        self.rel_bias = nn.Parameter(torch.zeros(L, cfg.n_head, cfg.context + 1 + cfg.offline_ahead))
        self.ahead_embed = nn.Embedding(cfg.max_ahead + 2, H)
        self.out = nn.Sequential(
            nn.Linear((L + 1) * H, H), nn.GELU(), nn.Dropout(cfg.dropout), nn.Linear(H, cfg.n_labels)
        )
        self.drop = nn.Dropout(cfg.dropout)
        self._label_bias = torch.tensor(cfg.label_bias) if cfg.label_bias else None

    # --- the parts ---------------------------------------------------------------------------

    def words(self, pieces: torch.Tensor) -> torch.Tensor:
        """(..., max_pieces) piece ids, pad_id filled -> (..., n_input) word inputs."""
        return self.drop(self.inp(self.embed(pieces).flatten(-2)))

    def recur(
        self, x: torch.Tensor, h: Sequence[torch.Tensor | None] | None = None
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(B, T, n_input) -> each layer's states (B, T, H), and each layer's last state (1, B, H)
        to go on from (``h``: the states to start from, None: zeros)."""
        states, last = [], []
        for i, gru in enumerate(self.grus):
            x, h_n = gru(x, None if h is None else h[i])
            states.append(x)
            last.append(h_n)
            x = self.drop(x)
        return states, last

    def kv(self, states: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Each layer's keys and values of its states: (..., T, 2H)."""
        return [proj(s) for proj, s in zip(self.keys, states)]

    def decide(
        self,
        top: torch.Tensor,  # (B, Tq, H) the queries' top-layer states
        kv: Sequence[torch.Tensor],  # per layer (B, Tk, 2H)
        q_pos: torch.Tensor,  # (Tq,) the queries' word positions
        k_pos: torch.Tensor,  # (Tk,) the keys'
        ahead: int | None | Sequence[int | None],
    ) -> torch.Tensor:
        """(B, Tq, n_labels) plain logits: each query reads the keys from ``context`` words before
        it to ``ahead`` after it (None: ``offline_ahead``; one for all, or one per query)."""
        aheads = [ahead] * top.shape[1] if ahead is None or isinstance(ahead, int) else list(ahead)
        codes = torch.tensor([-1 if a is None else a for a in aheads], device=top.device)
        return self.decide_codes(top, kv, q_pos, k_pos, codes)

    def decide_codes(
        self,
        top: torch.Tensor,
        kv: Sequence[torch.Tensor],
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        codes: torch.Tensor,  # (Tq,) or (B, Tq): each query's lookahead, -1 for offline
        key_valid: torch.Tensor | None = None,  # (B, Tk): False for a padding key
    ) -> torch.Tensor:
        """:meth:`decide` with the lookaheads as a tensor (what the ONNX graph computes, and what
        a batch of streams does, each with its own lookaheads and padding)."""
        cfg = self.cfg
        B, Tq, H = top.shape
        nh, hd = cfg.n_head, H // cfg.n_head
        offline = codes < 0
        reach = torch.where(
            offline, torch.full_like(codes, cfg.offline_ahead), codes.clamp(max=cfg.offline_ahead)
        )
        ids = torch.where(offline, torch.full_like(codes, cfg.max_ahead + 1), codes.clamp(max=cfg.max_ahead))
        offset = k_pos[None, :] - q_pos[:, None]  # (Tq, Tk)
        allowed = (offset >= -cfg.context) & (offset <= reach[..., None])  # ([B,] Tq, Tk)
        if key_valid is not None:
            allowed = allowed & key_valid[:, None, :]
        allowed = allowed.view(-1, 1, Tq, offset.shape[1])  # (B or 1, 1, Tq, Tk)
        rel = (offset + cfg.context).clamp(0, cfg.context + cfg.offline_ahead)
        queries = self.query(top).view(B, Tq, len(kv), nh, hd)
        read = [top]
        for i, kv_i in enumerate(kv):
            k, v = kv_i.view(B, -1, 2, nh, hd).unbind(2)  # (B, Tk, nh, hd)
            q = queries[:, :, i].transpose(1, 2)  # (B, nh, Tq, hd)
            bias = self.rel_bias[i][:, rel].masked_fill(~allowed, float("-inf"))  # (B or 1, nh, Tq, Tk)
            ctx = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias)
            read.append(ctx.transpose(1, 2).reshape(B, Tq, H))
        emb = self.ahead_embed(ids)  # ([B,] Tq, H)
        hidden = torch.cat(read, -1) + torch.cat([emb] * (len(kv) + 1), -1)
        return self.out(self.drop(hidden))

    def forward(self, pieces: torch.Tensor, ahead: int | None) -> torch.Tensor:
        """(B, T, max_pieces) -> (B, T, n_labels) plain logits, each word seeing ``ahead`` words
        after it (those there are) and the window's words before it (training's whole pass)."""
        states, _ = self.recur(self.words(pieces))
        pos = torch.arange(pieces.shape[1], device=pieces.device)
        return self.decide(states[-1], self.kv(states), pos, pos, ahead)

    def biased(self, logits: torch.Tensor, lookahead: int | None | Sequence[int | None]) -> torch.Tensor:
        """CPU logits (..., n_labels) plus the decision offsets of ``lookahead`` (one for all the
        rows, or one per row)."""
        logits = logits.float().cpu()
        if self._label_bias is None:
            return logits
        rows = self._label_bias
        if lookahead is None or isinstance(lookahead, int):
            return logits + rows[-1 if lookahead is None else min(lookahead, len(rows) - 2)]
        return logits + rows[[-1 if a is None else min(a, len(rows) - 2) for a in lookahead]]

    def set_label_bias(
        self,
        rows: Sequence[Sequence[float]],
        window_rows: Sequence[Sequence[float]] = (),
        window_from: int | None = None,
    ) -> None:
        """Replace the decision offsets (a row per lookahead from k=0, then offline; ``()``: none).
        A light model has no window engine: ``window_rows`` must be empty."""
        if window_rows:
            raise CheckpointError("the light model has no window engine to take offsets")
        self.cfg = replace(self.cfg, label_bias=tuple(tuple(float(x) for x in r) for r in rows))
        self._label_bias = torch.tensor(self.cfg.label_bias) if rows else None

    # --- checkpoints -------------------------------------------------------------------------

    def save(self, directory: str | Path) -> None:
        from safetensors.torch import save_file

        d = Path(directory)
        self.save_config(d)
        state = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(d / "model.safetensors"))

    def save_config(self, directory: str | Path) -> None:
        write_config(directory, self.cfg)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> LightModel:
        from safetensors.torch import load_file

        d = Path(directory)
        try:
            model = cls(LightConfig.read(d))
            state = {k: v.float() for k, v in load_file(str(d / "model.safetensors")).items()}
        except (OSError, ValueError, TypeError) as e:
            raise CheckpointError(f"cannot read checkpoint in {d}: {e}") from e
        return fit_state(model, state, d, device)


def piece_tensor(ids: Sequence[Pieces], cfg: LightConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """(N, max_pieces) piece ids of N words, pad_id filled."""
    rows = [list(p[: cfg.max_pieces]) + [cfg.pad_id] * (cfg.max_pieces - len(p)) for p in ids]
    return torch.tensor(rows, dtype=torch.long, device=device).view(len(rows), cfg.max_pieces)


class LightEngine:
    """The engine interface (:mod:`streampunct.engines`) over a light model."""

    name = "light"

    def __init__(self, model: LightModel):
        self.model = model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def logits(
        self, ids: Sequence[Pieces], lookahead: int | None, tags: Sequence[int] | None = None
    ) -> torch.Tensor:
        m = self.model
        if not ids:
            return torch.zeros(0, m.cfg.n_labels)
        states, _ = m.recur(m.words(piece_tensor(ids, m.cfg, self.device))[None])
        kv = m.kv(states)
        n, a = len(ids), m.cfg.offline_ahead if lookahead is None else lookahead
        # the last words are decided with the lookahead they have, as a stream's are at its end
        aheads = [None if lookahead is None else min(lookahead, n - 1 - t) for t in range(n)]
        out = []
        for s in range(0, n, CHUNK):
            e = min(n, s + CHUNK)
            k0, k1 = max(0, s - m.cfg.context), min(n, e + a)
            q_pos = torch.arange(s, e, device=self.device)
            k_pos = torch.arange(k0, k1, device=self.device)
            kv_chunk = [x[:, k0:k1] for x in kv]
            out.append(m.decide(states[-1][:, s:e], kv_chunk, q_pos, k_pos, aheads[s:e])[0])
        return m.biased(torch.cat(out), aheads)

    def window_logits(
        self, ids: Sequence[Pieces], t: int, ahead: int, base: int = 0, tags: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Token ``t`` from the tokens ``ids`` hold (from ``base`` on: the recurrence starts there)
        and ``ahead`` after it."""
        return self.logits(ids[: t - base + ahead + 1], ahead)[t - base]

    def stream(self, lookahead: int, tagger: object = None) -> LightStream:
        return LightStream(self, lookahead)


class LightStream:
    """A light model's state for one stream: each token's layer states' keys and values, its top
    state, and the layers' states after it (to go on from, or back to after a revision); tokens
    from ``base`` on are held. New tokens wait in ``pending`` until a step computes them, for many
    streams at once (:func:`compute_light`), and with them every open token's decision."""

    def __init__(self, engine: LightEngine, lookahead: int):
        self.engine, self.model, self.k = engine, engine.model, lookahead
        self.base = 0  # the first token held
        self.pending: list[Pieces] = []  # tokens not computed yet, after the computed ones
        self.top: torch.Tensor | None = None  # (n, H) top-layer states of the computed tokens
        self.kv: list[torch.Tensor] = []  # per layer (n, 2H)
        self.last: list[list[torch.Tensor]] = []  # per computed token, the layers' states after it
        self.step: dict[tuple[int, int], torch.Tensor] = {}  # this step's decisions, from work()

    @property
    def computed(self) -> int:
        return 0 if self.top is None else len(self.top)

    @property
    def held(self) -> int:
        return self.computed + len(self.pending)

    def append(self, token: str, pieces: Pieces) -> None:
        self.pending.append(pieces)
        self.step.clear()

    def truncate(self, n: int) -> None:
        self.step.clear()
        keep = n - self.base
        if keep < 0:
            raise ValueError(f"token {n} was forgotten (held from {self.base})")
        if keep >= self.computed:
            del self.pending[keep - self.computed :]
            return
        self.pending.clear()
        assert self.top is not None
        self.top = self.top[:keep]
        self.kv = [x[:keep] for x in self.kv]
        del self.last[keep:]

    def close(self) -> None:
        pass

    def _absorb(self, states: Sequence[torch.Tensor], kv: Sequence[torch.Tensor]) -> None:
        """Take the pending tokens' computed rows: each layer's states (n, H), keys and values."""
        new_top = states[-1]
        self.top = new_top if self.top is None else torch.cat([self.top, new_top])
        self.kv = list(kv) if not self.kv else [torch.cat([a, b]) for a, b in zip(self.kv, kv)]
        self.last.extend(list(per_token) for per_token in zip(*states))
        self.pending.clear()

    def open_decisions(self, first_open: int) -> tuple[range, list[int]]:
        """The tokens this step decides (every computed one from ``first_open`` on), and the
        lookahead each has now (at most ``k``)."""
        end = self.base + self.computed
        tokens = range(max(first_open, self.base), end)
        return tokens, [min(self.k, end - 1 - t) for t in tokens]

    def work(self, first_open: int) -> list[LightWork]:
        return [LightWork(self, first_open)]

    def decide(self, t: int, ahead: int) -> torch.Tensor:
        row = self.step.get((t, ahead))
        if row is None:  # not one this step's work made (a time limit's: fewer words ahead)
            compute_states([self])
            if not (self.base <= t and t + ahead < self.base + self.computed):
                raise ValueError(f"token {t} cannot be decided with {ahead} ahead (held from {self.base})")
            row = decide_many([(self, range(t, t + 1), [ahead])])[0]
        return row

    def provisional(self, tokens: Sequence[int], first_open: int) -> list[torch.Tensor]:
        end = self.base + self.held
        return [self.decide(t, min(self.k, end - 1 - t)) for t in tokens]

    def settle(self, keep_from: int) -> None:
        """Forget the tokens no decision reads any more (those more than ``context`` before
        ``keep_from``), keeping the recurrent state."""
        self.step.clear()
        drop = keep_from - 1 - self.model.cfg.context - self.base
        if drop <= 0 or drop >= self.computed:
            return
        assert self.top is not None
        self.top = self.top[drop:]
        self.kv = [x[drop:] for x in self.kv]
        del self.last[:drop]
        self.base += drop

    def release(self) -> None:
        self.pending.clear()
        self.step.clear()
        self.top, self.kv, self.last = None, [], []


class LightWork:
    """One stream's model work for a step (what :meth:`LightStream.work` returns): its new tokens'
    states, then its open tokens' decisions. :func:`compute_light` does many streams' at once."""

    def __init__(self, stream: LightStream, first_open: int):
        self.stream, self.first_open = stream, first_open

    @property
    def model(self) -> LightModel:
        return self.stream.model

    @classmethod
    def compute_all(cls, works: Sequence[LightWork]) -> None:
        compute_light(works)


@torch.no_grad()
def compute_states(streams: Sequence[LightStream]) -> None:
    """The pending tokens of many streams of one model: one GRU pass per layer, each stream going
    on from its own state (padding after a stream's tokens changes none of its states)."""
    todo = [s for s in streams if s.pending]
    if not todo:
        return
    m, dev = todo[0].model, todo[0].engine.device
    n = [len(s.pending) for s in todo]
    pad = (m.cfg.pad_id,) * m.cfg.max_pieces
    rows = [p for s in todo for p in s.pending + [pad] * (max(n) - len(s.pending))]
    x = m.words(piece_tensor(rows, m.cfg, dev).view(len(todo), max(n), -1))
    zero = torch.zeros(m.cfg.n_hidden, device=dev)
    h = [torch.stack([s.last[-1][i] if s.last else zero for s in todo])[None] for i in range(m.cfg.n_layer)]
    states, _ = m.recur(x, h)
    kv = m.kv(states)
    for j, (s, nj) in enumerate(zip(todo, n)):
        s._absorb([x[j, :nj] for x in states], [x[j, :nj] for x in kv])


@torch.no_grad()
def compute_light(works: Sequence[LightWork]) -> None:
    """A step's work for many streams of one model: their new tokens' states (:func:`compute_states`),
    then every open token's decision, all streams' in one attention pass. Each stream's keys are
    placed so that its first open token sits ``context`` keys in; keys a stream lacks are padding."""
    models = {id(w.model) for w in works}
    if len(models) > 1:  # one pass per model
        for model_id in models:
            compute_light([w for w in works if id(w.model) == model_id])
        return
    compute_states([w.stream for w in works])
    asks = [(w.stream, *w.stream.open_decisions(w.first_open)) for w in works]
    asks = [a for a in asks if len(a[1])]
    for (s, tokens, aheads), rows in zip(asks, decide_many(asks)):
        s.step.update(((t, a), row) for t, a, row in zip(tokens, aheads, rows))


@torch.no_grad()
def decide_many(asks: Sequence[tuple[LightStream, range, Sequence[int]]]) -> list[torch.Tensor]:
    """Decisions of computed tokens of many streams of one model, in one attention pass: for each
    (stream, tokens, the lookahead of each), the (len(tokens), n_labels) logits with offsets. Each
    stream's keys are placed so that its first token sits ``context`` keys in; keys a stream
    lacks are padding."""
    if not asks:
        return []
    s0 = asks[0][0]
    m, dev, C = s0.model, s0.engine.device, s0.model.cfg.context
    spans = []  # per ask: its first token's index held, its first key's, its last key's + 1
    for s, tokens, aheads in asks:
        i0 = tokens[0] - s.base
        k1 = min(s.computed, i0 + max(q + a for q, a in enumerate(aheads)) + 1)
        spans.append((i0, max(0, i0 - C), k1))
    Q = max(len(tokens) for _, tokens, _ in asks)
    K = C + max(Q, *(k1 - i0 for i0, _, k1 in spans))
    top = torch.zeros(len(asks), Q, m.cfg.n_hidden, device=dev)
    kv = [torch.zeros(len(asks), K, 2 * m.cfg.n_hidden, device=dev) for _ in range(m.cfg.n_layer)]
    valid = torch.zeros(len(asks), K, dtype=torch.bool, device=dev)
    codes = torch.zeros(len(asks), Q, dtype=torch.long, device=dev)
    for j, ((s, tokens, aheads), (i0, k0, k1)) in enumerate(zip(asks, spans)):
        assert s.top is not None
        left = C - (i0 - k0)  # padding keys before this stream's first
        top[j, : len(tokens)] = s.top[i0 : i0 + len(tokens)]
        for layer, x in zip(kv, s.kv):
            layer[j, left : left + k1 - k0] = x[k0:k1]
        valid[j, left : left + k1 - k0] = True
        codes[j, : len(tokens)] = torch.tensor(aheads)
    q_pos = torch.arange(C, C + Q, device=dev)
    logits = m.decide_codes(top, kv, q_pos, torch.arange(K, device=dev), codes, valid)
    return [m.biased(logits[j, : len(tokens)], list(aheads)) for j, (_, tokens, aheads) in enumerate(asks)]
