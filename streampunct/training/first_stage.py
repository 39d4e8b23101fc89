"""Train the cascade's first stage for a checkpoint, and choose its threshold on dev text.

    streampunct train-first-stage --model default --train ted_train.tsv --dev dev2012 [--out DIR]

The first stage (:class:`~streampunct.cascade.FirstStage`) learns the reference labels of
``--words`` training tokens, each read from its neighbours as the checkpoint's own embeddings
give them (a quarter of them with fewer tokens ahead, as a stream's newest tokens and a
lookahead under its own are read). Its threshold is then chosen on ``--dev-words`` of dev text at
``ahead`` words of lookahead: the lowest probability of no mark (the most tokens cleared) at which
the cascade's micro-F1 is no more than ``--max-loss`` under the window engine's on the same tokens.
The two files go into the checkpoint folder (or ``--out``), with the dev figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from ..cascade import CascadeEngine, FirstStage, FirstStageConfig
from ..engines import WindowEngine
from ..metrics import score
from ..punctuator import Punctuator, checkpoint_dir
from ..text import LABELS, normalize_labeled, read_iwslt

THRESHOLDS = (0.9, 0.93, 0.95, 0.96, 0.97, 0.98, 0.985, 0.99, 0.995, 0.998)
FEWER_AHEAD = 0.25  # the share of training tokens read with fewer tokens ahead


@dataclass(frozen=True)
class FirstStageTraining:
    model: str = "default"
    train: str = ""
    dev: str = ""
    out: str | None = None  # default: the checkpoint's folder
    words: int = 2_000_000
    epochs: int = 1
    batch: int = 512
    lr: float = 1e-3
    dev_words: int = 30_000
    max_loss: float = 0.1
    seed: int = 1
    threads: int = 1

    HELP: ClassVar[dict[str, str]] = {
        "model": "checkpoint folder or shipped name whose first stage this is",
        "train": "word<TAB>LABEL file to learn from (TED)",
        "dev": "word<TAB>LABEL file the threshold is chosen on (IWSLT dev2012)",
        "out": "folder for first_stage.json and .safetensors (default: the checkpoint's)",
        "words": "training words (from the start of --train)",
        "epochs": "passes over them",
        "batch": "tokens a step",
        "lr": "peak learning rate (AdamW, one cycle)",
        "dev_words": "dev words the threshold is chosen on",
        "max_loss": "micro-F1 the cascade may lose against the window engine on dev",
        "seed": "random seed",
        "threads": "torch threads",
    }


def read_tokens(path: str | Path, words: int) -> tuple[list[str], list[str]]:
    """The first ``words`` words of a word<TAB>LABEL file as normalised tokens and their labels."""
    w, labels = read_iwslt(path)
    return normalize_labeled(w[:words], labels[:words])


def fit(
    stage: FirstStage, p: Punctuator, tokens: list[str], labels: list[str], cfg: FirstStageTraining
) -> None:
    """Train ``stage`` on the tokens' reference labels."""
    types = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    means = stage.means(p.pieces.encode(list(types)))  # (types, C), the embeddings frozen
    ids = torch.tensor([types[t] for t in tokens])
    y = torch.tensor([LABELS.index(label) for label in labels])
    n, ahead = len(tokens), stage.cfg.ahead
    steps = cfg.epochs * n // cfg.batch
    opt = torch.optim.AdamW(stage.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=max(1, steps))
    g = torch.Generator().manual_seed(cfg.seed)
    t0 = time.perf_counter()
    stage.train()
    for step in range(steps):
        ts = torch.randint(0, n, (cfg.batch,), generator=g)
        reads = torch.where(
            torch.rand(cfg.batch, generator=g) < FEWER_AHEAD,
            torch.randint(0, ahead, (cfg.batch,), generator=g),
            ahead,
        )
        ends = torch.minimum(ts + reads + 1, torch.tensor(n))
        index = stage.index(ts.tolist(), ends.tolist(), 0, n)  # rows among the text's tokens
        at = index.clamp(min=0)
        vectors = stage.proj(means[ids[at.flatten()]])  # only the rows this batch reads
        rows = torch.where(index >= 0, torch.arange(index.numel()).view_as(index), -1)
        loss = nn.functional.cross_entropy(stage(vectors, rows), y[ts])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 500 == 0 or step == steps - 1:
            print(
                f"step {step + 1}/{steps} loss {loss.item():.3f} ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    stage.eval()


def choose_threshold(
    stage: FirstStage, p: Punctuator, tokens: list[str], labels: list[str], max_loss: float
) -> tuple[float, dict]:
    """The lowest threshold whose cascade is within ``max_loss`` of the window engine on the dev
    tokens, at the stage's ``ahead`` words of lookahead; and the figures of every threshold."""
    k = stage.cfg.ahead
    ids = p.pieces.encode(tokens)
    t0 = time.perf_counter()
    window = WindowEngine(p.model).logits(ids, k).argmax(-1).numpy()
    window_s = time.perf_counter() - t0
    cascade = CascadeEngine(p.model, stage)
    probs = cascade.full_probabilities(ids, k)

    def f1(predicted: np.ndarray) -> float:
        return score(labels, [LABELS[i] for i in predicted]).micro_f1

    base = f1(window)
    rows = []
    for threshold in THRESHOLDS:
        replace_threshold(stage, threshold)
        sure = np.zeros(len(ids), dtype=bool)
        sure[: len(probs)] = cascade.sure(probs)
        rows.append(
            {
                "threshold": threshold,
                "cleared": round(float(sure.mean()), 4),
                "micro_f1": round(f1(np.where(sure, 0, window)), 2),
            }
        )
    ok = [r for r in rows if r["micro_f1"] >= base - max_loss]
    chosen = min(ok, key=lambda r: r["threshold"])["threshold"] if ok else 1.0
    return chosen, {
        "tokens": len(ids),
        "lookahead": k,
        "window_micro_f1": round(base, 2),
        "window_s": round(window_s, 1),
        "max_loss": max_loss,
        "thresholds": rows,
    }


def replace_threshold(stage: FirstStage, threshold: float) -> FirstStage:
    stage.cfg = replace(stage.cfg, threshold=threshold)
    return stage


def train_first_stage(cfg: FirstStageTraining, stage_cfg: FirstStageConfig | None = None) -> Path:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    p = Punctuator.load(cfg.model, device="cpu")
    stage = FirstStage.of(p.model, stage_cfg or FirstStageConfig())
    train_tokens, train_labels = read_tokens(cfg.train, cfg.words)
    print(
        f"first stage: {sum(x.numel() for x in stage.parameters()):,} parameters, {len(train_tokens):,} tokens",
        flush=True,
    )
    fit(stage, p, train_tokens, train_labels, cfg)
    dev_tokens, dev_labels = read_tokens(cfg.dev, cfg.dev_words)
    threshold, dev = choose_threshold(stage, p, dev_tokens, dev_labels, cfg.max_loss)
    replace_threshold(stage, threshold)
    for r in dev["thresholds"]:
        print(
            f"threshold {r['threshold']}: cleared {r['cleared']:.1%}, micro-F1 {r['micro_f1']} (window {dev['window_micro_f1']})"
        )
    print(f"chosen threshold {threshold}")
    out = Path(cfg.out) if cfg.out else checkpoint_dir(cfg.model)
    out.mkdir(parents=True, exist_ok=True)
    stage.save(
        out,
        {**dev, "train": Path(cfg.train).name, "train_tokens": len(train_tokens), "dev": Path(cfg.dev).name},
    )
    return out
