"""DRNN-LWMA (Kim 2019) in streaming-exact form, and its trainer: an experiment of issue 65.

    python -m streampunct.training.drnn --train TED.tsv --dev DEV2012 --out RUN [--minutes 40] [--resume]

The model: word pieces -> a word vector; ``n_layer`` stacked GRU layers; layer-wise multi-head
attention (one attention per layer, queried from the top layer) -> COMMA, PERIOD, QUESTION.
Each layer has two directions over the same input (the layer below's forward states):
- forward: a GRU over the history, run once per word as it arrives (final at once);
- backward: a GRU run from word ``t + k`` down to ``t`` for each decision (``k + 1`` steps, O(k)).
  Word ``j``'s backward state kept for later decisions is the one of its own decision (from
  ``j + k``); the decision at ``t`` also reads the states its own pass gives the words ``t+1 ..
  t+k``. Offline the backward GRU reads the whole window.
So word ``t``'s marks depend on words up to ``t + k`` alone, exactly, at any depth: the forward
stack reads forward states only, which are final once their word has arrived.

Training: batches are arrays (windows sampled and noised with NumPy, no Python loop per word),
one lookahead per batch drawn from ``LOOKAHEADS``, AdamW with a cosine schedule over the time
budget, dev micro-F1 on the first ``--dev-words`` of dev at k = 2 and offline every
``--eval-every`` steps (``RUN/log.jsonl``, ``RUN/best.pt``), and ``RUN/last.pt`` to go on
(``--resume``: same schedule position, same optimiser state).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..metrics import score
from ..pieces import WordPieces
from ..punctuator import DEFAULT_CHECKPOINT
from ..text import LABEL_ID, LABELS, normalize_labeled, read_iwslt

LOOKAHEADS: tuple[int | None, ...] = (None, None, 2, 2, 2, 1, 3, 4, 0)


@dataclass(frozen=True)
class DrnnConfig:
    vocab_size: int = 30522
    pad_id: int = 0
    max_pieces: int = 3
    n_embd: int = 80  # each word piece's embedding
    n_hidden: int = 256  # every GRU's state, each direction (the paper's 256)
    n_layer: int = 4  # the paper's 4
    n_head: int = 4
    n_attn: int = 256  # each layer's attention width
    context: int = 24  # words before t each attention reads
    offline_ahead: int = 24  # words after t the offline attention reads
    max_ahead: int = 8
    dropout: float = 0.3


class Drnn(nn.Module):
    def __init__(self, cfg: DrnnConfig):
        super().__init__()
        self.cfg = cfg
        H, L, A = cfg.n_hidden, cfg.n_layer, cfg.n_attn
        self.embed = nn.Embedding(cfg.vocab_size, cfg.n_embd, padding_idx=cfg.pad_id)
        self.inp = nn.Linear(cfg.max_pieces * cfg.n_embd, H)
        self.fwd = nn.ModuleList(nn.GRU(H, H, batch_first=True) for _ in range(L))
        self.bwd = nn.ModuleList(nn.GRU(H, H, batch_first=True) for _ in range(L))
        self.query = nn.Linear(2 * H, L * A)
        self.kv = nn.ModuleList(nn.Linear(2 * H, 2 * A) for _ in range(L))
        self.rel_bias = nn.Parameter(torch.zeros(L, cfg.n_head, cfg.context + 1 + cfg.offline_ahead))
        self.ahead_embed = nn.Embedding(cfg.max_ahead + 2, 2 * H + L * A)
        self.out = nn.Sequential(
            nn.Linear(2 * H + L * A, H), nn.GELU(), nn.Dropout(cfg.dropout), nn.Linear(H, len(LABELS))
        )
        self.drop = nn.Dropout(cfg.dropout)

    def window_back(self, i: int, x: torch.Tensor, k: int) -> torch.Tensor:
        """Layer ``i``'s backward GRU run from word t + k down to t for every t of ``x`` (B, T, H):
        (B, T, k+1, H), ``[:, t, d]`` the state at t + d (words past the end read as the last).
        nn.GRU's arithmetic, with the input projection made once per word, not once per window."""
        gru = self.bwd[i]
        T = x.shape[1]
        w_ih, b_ih, w_hh, b_hh = (
            getattr(gru, name) for name in ("weight_ih_l0", "bias_ih_l0", "weight_hh_l0", "bias_hh_l0")
        )
        gi = F.linear(x, w_ih, b_ih)  # (B, T, 3H)
        pos = torch.arange(T, device=x.device)
        states: list[torch.Tensor] = []
        h = None
        for d in range(k, -1, -1):
            g = gi[:, (pos + d).clamp(max=T - 1)]
            gh = b_hh.expand_as(g) if h is None else F.linear(h, w_hh, b_hh)
            ir, iz, inn = g.chunk(3, -1)
            hr, hz, hn = gh.chunk(3, -1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            n = torch.tanh(inn + r * hn)
            h = (1 - z) * n if h is None else (1 - z) * n + z * h
            states.append(h)
        return torch.stack(states[::-1], 2)

    def forward(self, pieces: torch.Tensor, ahead: int | None) -> torch.Tensor:
        """(B, T, max_pieces) -> (B, T, 4) logits; word t reads words up to t + ``ahead`` (None:
        the whole window both ways). Words whose lookahead the window cuts read what there is."""
        cfg = self.cfg
        B, T, _ = pieces.shape
        dev = pieces.device
        x = self.drop(self.inp(self.embed(pieces).flatten(-2)))
        C = cfg.context
        R = cfg.offline_ahead if ahead is None else 0  # the band of shared keys after t
        pos = torch.arange(T, device=dev)
        offset = pos[None, :] - pos[:, None]  # (T query, T key)
        band = (offset >= -C) & (offset <= R)
        rel = (offset + C).clamp(0, C + cfg.offline_ahead)
        layers = []  # per layer: (shared keys' states (B, T, 2H), per-query ahead states (B, T, k, 2H))
        top = None
        for i in range(cfg.n_layer):
            f, _ = self.fwd[i](x)  # (B, T, H)
            if ahead is None:
                b = self.bwd[i](x.flip(1))[0].flip(1)
                shared, extra = torch.cat([f, b], -1), None
            else:
                k = ahead
                s = self.window_back(i, x, k)  # (B, T, k+1, H): the state at t + d from t + k
                shared = torch.cat([f, s[:, :, 0]], -1)
                extra = None
                if k:
                    idx = (pos[:, None] + torch.arange(1, k + 1, device=dev)[None, :]).clamp(max=T - 1)
                    extra = torch.cat([f[:, idx], s[:, :, 1:]], -1)  # forward states of t+1 .. t+k
            layers.append((shared, extra))
            top = shared
            x = self.drop(f)
        assert top is not None
        nh, A = cfg.n_head, cfg.n_attn
        hd = A // nh
        q = self.query(top).view(B, T, cfg.n_layer, nh, hd)
        reads = [top]
        for i, (shared, extra) in enumerate(layers):
            kk, vv = self.kv[i](shared).view(B, T, 2, nh, hd).unbind(2)
            qi = q[:, :, i].transpose(1, 2)  # (B, nh, T, hd)
            scores = qi @ kk.permute(0, 2, 3, 1) / math.sqrt(hd)  # (B, nh, T, T)
            scores = (scores + self.rel_bias[i][:, rel]).masked_fill(~band, float("-inf"))
            values = vv.transpose(1, 2)  # (B, nh, T, hd)
            if extra is not None:
                k = extra.shape[2]
                ke, ve = self.kv[i](extra).view(B, T, k, 2, nh, hd).unbind(3)  # (B, T, k, nh, hd)
                ke, ve = ke.permute(0, 3, 1, 2, 4), ve.permute(0, 3, 1, 2, 4)  # (B, nh, T, k, hd)
                se = (qi.unsqueeze(3) * ke).sum(-1) / math.sqrt(hd)  # (B, nh, T, k)
                se = se + self.rel_bias[i][:, C + 1 : C + 1 + k][:, None, :]
                w = torch.cat([scores, se], -1).softmax(-1)
                ctx = w[..., :T] @ values + (w[..., T:].unsqueeze(-1) * ve).sum(3)
            else:
                ctx = scores.softmax(-1) @ values
            reads.append(ctx.transpose(1, 2).reshape(B, T, A))
        code = cfg.max_ahead + 1 if ahead is None else min(ahead, cfg.max_ahead)
        hidden = torch.cat(reads, -1) + self.ahead_embed.weight[code]
        return self.out(self.drop(hidden))


def piece_table(type_pieces: list[tuple[int, ...]], cfg: DrnnConfig) -> torch.Tensor:
    rows = [
        list(p[: cfg.max_pieces]) + [cfg.pad_id] * (cfg.max_pieces - len(p[: cfg.max_pieces]))
        for p in type_pieces
    ]
    return torch.tensor(rows, dtype=torch.long)


class Data:
    """A labelled corpus as arrays of word-type ids and label ids."""

    def __init__(self, path: str, pieces: WordPieces, cfg: DrnnConfig, limit: int | None = None):
        tokens, labels = normalize_labeled(*read_iwslt(path))
        if limit:
            tokens, labels = tokens[:limit], labels[:limit]
        types: dict[str, int] = {}
        self.words = np.array([types.setdefault(t, len(types)) for t in tokens], dtype=np.int64)
        self.labels = np.array([LABEL_ID[lab] for lab in labels], dtype=np.int64)
        self.table = piece_table(pieces.encode(list(types)), cfg)

    def batch(
        self, rng: np.random.Generator, n: int, length: int, noise: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` windows of ``length`` words at random places with ASR-like noise (each of
        duplication, substitution and deletion at rate ``noise``): (n, length) word types, labels."""
        span = length + length // 4
        starts = rng.integers(0, len(self.words) - span, n)
        pos = starts[:, None] + np.arange(span)[None, :]
        words, labels = self.words[pos].copy(), self.labels[pos].copy()
        r = rng.random((n, span))
        sub = (r >= noise) & (r < 2 * noise)
        words[sub] = self.words[rng.integers(0, len(self.words), int(sub.sum()))]
        dele = (r >= 2 * noise) & (r < 3 * noise)
        carry = dele & (labels > 0)  # a deleted word's mark moves to the word before when that has none
        carry[:, 0] = False
        prev = np.roll(carry, -1, axis=1)
        prev[:, -1] = False
        take = prev & (labels == 0) & ~dele
        labels[take] = np.roll(labels, -1, axis=1)[take]
        count = np.where(r < noise, 2, np.where(dele, 0, 1))  # duplication: the repeat has no mark
        out_w = np.empty((n, length), np.int64)
        out_l = np.empty((n, length), np.int64)
        for i in range(n):  # a row at a time: np.repeat over the row's counts
            w = np.repeat(words[i], count[i])
            lab = np.repeat(labels[i], count[i])
            dup_first = np.zeros(len(w), bool)
            dup_first[(np.cumsum(count[i]) - count[i])[count[i] == 2]] = True
            lab[dup_first] = 0
            out_w[i], out_l[i] = w[:length], lab[:length]
        return out_w, out_l


def pca_embeddings(checkpoint: Path, dim: int) -> torch.Tensor:
    """The default checkpoint's word-piece embeddings on their first ``dim`` principal axes."""
    from safetensors.torch import load_file

    emb = load_file(str(checkpoint / "model.safetensors"))["tok_emb.weight"].float()
    centred = emb - emb.mean(0)
    g = torch.Generator().manual_seed(0)
    _, _, v = torch.linalg.svd(centred[torch.randperm(len(centred), generator=g)[:8000]], full_matrices=False)
    low = centred @ v[:dim].T
    return 0.5 * low / low.std(0)


@torch.no_grad()
def evaluate(
    model: Drnn, dev: Data, aheads: tuple[int | None, ...] = (2, None), seg: int = 256, warm: int = 64
) -> dict[str, float]:
    """Dev micro-F1 at each lookahead: segments of ``seg`` words decided, each read with ``warm``
    words before it (a stream's history) and the lookahead after it."""
    model.eval()
    n = len(dev.words)
    out = {}
    for k in aheads:
        right = model.cfg.offline_ahead if k is None else k
        pred = np.zeros(n, np.int64)
        starts = list(range(0, n, seg))
        for c in range(0, len(starts), 32):
            group = starts[c : c + 32]
            lo = [max(0, s - warm) for s in group]
            hi = [min(n, s + seg + right) for s in group]
            T = max(h - lo_ for lo_, h in zip(lo, hi))
            words = np.zeros((len(group), T), np.int64)
            mask = np.zeros((len(group), T), bool)
            for j, (a, b) in enumerate(zip(lo, hi)):
                words[j, : b - a] = dev.words[a:b]
                mask[j, : b - a] = True
            pieces = dev.table[torch.from_numpy(words)]
            pieces[torch.from_numpy(~mask)] = model.cfg.pad_id
            logits = model(pieces, k).argmax(-1).numpy()
            for j, (s, a) in enumerate(zip(group, lo)):
                e = min(n, s + seg)
                pred[s:e] = logits[j, s - a : e - a]
        ref = [LABELS[i] for i in dev.labels]
        out["offline" if k is None else f"k={k}"] = round(score(ref, [LABELS[i] for i in pred]).micro_f1, 2)
    model.train()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="labelled training text (word<TAB>LABEL)")
    ap.add_argument("--dev", required=True)
    ap.add_argument("--out", help="the run's folder")
    ap.add_argument("--minutes", type=float, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--window", type=int, default=96)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--eval-every", type=int, default=400)
    ap.add_argument("--dev-words", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init-embed", default=str(DEFAULT_CHECKPOINT), help="'' for random embeddings")
    for f in ("n_embd", "n_hidden", "n_layer", "n_head", "n_attn"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(DrnnConfig, f))
    ap.add_argument("--dropout", type=float, default=DrnnConfig.dropout)
    ap.add_argument("--evaluate", default=None, help="a RUN/best.pt: score it on --dev (all of it) and stop")
    args = ap.parse_args()
    if args.evaluate:
        saved = torch.load(args.evaluate, weights_only=False)
        cfg = DrnnConfig(**saved["cfg"])
        model = Drnn(cfg)
        model.load_state_dict(saved["model"])
        data = Data(args.dev, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces), cfg)
        print(
            json.dumps(
                {
                    "checkpoint": args.evaluate,
                    "step": saved["step"],
                    "text": args.dev,
                    **evaluate(model, data, (0, 2, 4, None)),
                }
            )
        )
        return
    if not (args.train and args.out):
        ap.error("training needs --train and --out")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = DrnnConfig(
        **{f: getattr(args, f) for f in ("n_embd", "n_hidden", "n_layer", "n_head", "n_attn", "dropout")}
    )
    pieces = WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces)
    model = Drnn(cfg)
    if args.init_embed:
        with torch.no_grad():
            model.embed.weight.copy_(pca_embeddings(Path(args.init_embed), cfg.n_embd))
            model.embed.weight[cfg.pad_id].zero_()
    model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    step, best, spent = 0, -1.0, 0.0
    if args.resume and (out / "last.pt").is_file():
        saved = torch.load(out / "last.pt", weights_only=False, map_location=args.device)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        step, best, spent = saved["step"], saved["best"], saved["spent"]
        rng = np.random.default_rng((args.seed, step))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"drnn: {n_params / 1e6:.2f} M parameters", flush=True)
    train = Data(args.train, pieces, cfg)
    dev = Data(args.dev, pieces, cfg, limit=args.dev_words)
    (out / "config.json").write_text(
        json.dumps({"model": asdict(cfg), "args": vars(args), "parameters": n_params}, indent=1)
    )
    log = (out / "log.jsonl").open("a")
    budget = args.minutes * 60
    losses: list[torch.Tensor] = []
    t0 = time.time() - spent
    while time.time() - t0 < budget:
        done = (time.time() - t0) / budget
        lr = args.lr * min(1.0, (step + 1) / 200) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * done)))
        for g in opt.param_groups:
            g["lr"] = lr
        k = LOOKAHEADS[int(rng.integers(len(LOOKAHEADS)))]
        words, labels = train.batch(rng, args.batch, args.window, args.noise)
        x = train.table[torch.from_numpy(words)].to(args.device)
        y = torch.from_numpy(labels).to(args.device)
        logits = model(x, k)
        keep = args.window - (0 if k is None else k)  # words whose lookahead the window holds
        loss = F.cross_entropy(logits[:, :keep].reshape(-1, len(LABELS)), y[:, :keep].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
        step += 1
        if step % args.eval_every == 0 or time.time() - t0 >= budget:
            scores = evaluate(model, dev)
            row = {
                "step": step,
                "minutes": round((time.time() - t0) / 60, 1),
                "loss": round(float(torch.stack(losses).mean()), 4),
                "lr": round(lr, 6),
                **scores,
            }
            losses.clear()
            print(json.dumps(row), flush=True)
            log.write(json.dumps(row) + "\n")
            log.flush()
            mean = sum(scores.values()) / len(scores)
            if mean > best:
                best = mean
                torch.save(
                    {"model": model.state_dict(), "cfg": asdict(cfg), "step": step, "dev": scores},
                    out / "best.pt",
                )
            torch.save(
                {
                    "model": model.state_dict(),
                    "opt": opt.state_dict(),
                    "step": step,
                    "best": best,
                    "spent": time.time() - t0,
                },
                out / "last.pt",
            )


if __name__ == "__main__":
    main()
