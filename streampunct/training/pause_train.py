"""Training pause fusion (:mod:`streampunct.prosody`) on a frozen checkpoint.

    streampunct train-pauses --model DIR --train a.tsv [b.tsv ...] --out DIR

Text is cut into segments; each gets word times from the pause model
(:func:`~streampunct.prosody.synthetic_times`: a speaker's rate and pause length drawn per
segment) or, for a share ``shuffled`` of them, pauses that say nothing (drawn from the same model
with the marks shuffled), so that the fusion learns how far to trust a pause; with ``marks``, the
words also carry the marks a recogniser might have written
(:func:`~streampunct.prosody.synthetic_marks`; none at all for a share ``unmarked``). The
checkpoint computes each token's logits, decision offsets included, at each lookahead as a stream
decides it (``min(k, tokens left)``) and, with a time limit (``max_delay_ms``), the decisions a
stream makes at a word's deadline with no word after it, which read the silence heard after the
word (:func:`streampunct.decision.place`); the fusion learns its correction by cross-entropy, then the
output checkpoint is the input one with ``pause_hidden`` (and ``pause_marks``) set and the
fusion's weights added.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F

from ..decision import Decider, Place, places
from ..engines import token_logits
from ..errors import InputError
from ..metrics import score
from ..model import PunctModel
from ..options import StreamOptions
from ..pieces import WordPieces
from ..processes import in_processes
from ..prosody import N_FEATURES, PauseFusion, ahead_slot, synthetic_marks, synthetic_times
from ..punctuator import resolve_device
from ..text import LABEL_ID, LABELS, normalize_labeled, read_iwslt
from ..types import Lookahead, Word
from .calibrate import tune_offsets

__all__ = ["PauseTrainConfig", "train_pauses"]


@dataclass(frozen=True)
class PauseTrainConfig:
    model: str
    train: tuple[str, ...]
    out: str
    segments: int = 240
    segment_words: int = 150
    dev_share: float = 0.2
    lookaheads: tuple[int | None, ...] = (0, 1, 2, 3, None)
    shuffled: float = 0.15
    marks: bool = True
    unmarked: float = 0.2
    continued: bool = True
    max_delay_ms: float | None = StreamOptions.max_delay_ms
    hidden: int = 32
    epochs: int = 30
    lr: float = 3e-3
    seed: int = 1
    engine: Literal["auto", "masked", "window"] = "auto"
    workers: int = 1
    device: str = "cpu"

    HELP: ClassVar[dict[str, str]] = {  # what each field is (and the help of its CLI flag)
        "segment_words": "words per training segment",
        "epochs": "passes over the training segments",
        "lr": "learning rate (AdamW)",
        "seed": "random seed",
        "model": "checkpoint folder or shipped name (CLI default: default)",
        "train": "word<TAB>LABEL files the segments come from",
        "out": "folder for the checkpoint with pause fusion",
        "segments": "segments of text drawn from the training files, each its own speaker",
        "dev_share": "share of the segments held out to report the gain",
        "lookaheads": "lookaheads the fusion trains at (None: offline)",
        "shuffled": "share of segments whose pauses say nothing (marks shuffled)",
        "marks": "also learn from the marks the recogniser wrote (Whisper's own)",
        "unmarked": "share of segments whose recogniser writes no marks",
        "continued": "also learn from a sentence-end mark the recogniser went on from in lower case",
        "max_delay_ms": "the streams' time limit: also learn the decisions at a deadline, from the silence",
        "hidden": "width of the fusion's hidden layer",
        "engine": "the engine whose logits the fusion corrects",
        "workers": "processes that compute the text model's logits (each with its share of the cores)",
        "device": "where the text model's logits are computed (cpu, cuda, auto); a GPU with one worker",
    }


def _rows(model, pieces, segments, cfg, rng):
    """(logits, features, slots, targets) of every timed token of the segments at each lookahead.
    The times and marks are drawn here, in order; the logits, the costly part, in ``cfg.workers``
    processes when there are several (the same rows either way, up to rounding)."""
    timed = []
    for tokens, labels in segments:
        marks = list(labels)
        if rng.random() < cfg.shuffled:
            marks = list(rng.permutation(marks))
        words = synthetic_times(tokens, marks, rng)
        if cfg.marks:
            words = synthetic_marks(words, labels, rng, cfg.unmarked)
        timed.append((tokens, labels, words))
    jobs = [(tokens, k) for tokens, _, _ in timed for k in cfg.lookaheads]
    if cfg.workers > 1:
        one = functools.partial(_logits_in_worker, engine=cfg.engine)
        logits_of = in_processes(one, jobs, cfg.workers, _start_worker, cfg.model)
    else:
        logits_of = [token_logits(model, pieces, tokens, k, engine=cfg.engine) for tokens, k in jobs]
    logits, feats, slots, targets = [], [], [], []
    rows = iter(logits_of)
    for tokens, labels, words in timed:
        n = len(tokens)
        at = {k: next(rows) for k in cfg.lookaheads}
        for k in cfg.lookaheads:
            ahead = [None if k is None else min(k, n - 1 - t) for t in range(n)]
            features = [at.features(cfg.marks, cfg.continued) for at in places(words, list(range(n)), ahead)]
            logits.append(at[k])
            feats.append(torch.tensor(features, dtype=torch.float32))
            slots.append(torch.tensor([ahead_slot(a) for a in ahead]))
            targets.append(torch.tensor([LABEL_ID[lab] for lab in labels]))
        if cfg.max_delay_ms is not None and 0 in at:
            for t, features in _silences(words, cfg):
                logits.append(at[0][t : t + 1])
                feats.append(torch.tensor([features], dtype=torch.float32))
                slots.append(torch.tensor([ahead_slot(0)]))
                targets.append(torch.tensor([LABEL_ID[labels[t]]]))
    return torch.cat(logits), torch.cat(feats), torch.cat(slots), torch.cat(targets)


def _silences(words: list[Word], cfg: PauseTrainConfig) -> list[tuple[int, list[float]]]:
    """The words a stream with a lookahead of k >= 1 decides at their deadline with no word after
    them (the next word ends after the deadline; the same for every k), with their features: the
    silence after the word up to the next word's start or the deadline, as
    :func:`~streampunct.decision.place` reads it (one word a token). A segment's last
    word is left out: the text goes on after it, unseen."""
    policy = Lookahead(1, cfg.max_delay_ms)
    out = []
    for t, (word, after) in enumerate(zip(words, words[1:])):
        deadline = policy.deadline(word)
        if deadline is None or policy.ahead(word, [after], math.inf) != 0:
            continue
        until = deadline if after.start is None else min(after.start, deadline)
        silence = Place(word, words[t - 1] if t else None, Word("", until, until), True, True, True)
        features = silence.features(cfg.marks, cfg.continued)
        if features is not None:
            out.append((t, features))
    return out


_WORKER: dict = {}  # a worker process's model and word pieces (in_processes)


def _start_worker(model_dir: str) -> None:
    model = PunctModel.load(model_dir)
    model.requires_grad_(False)
    _WORKER["model"] = model
    _WORKER["pieces"] = WordPieces(Path(model_dir) / "vocab.txt", model.cfg.max_pieces)


def _logits_in_worker(job: tuple[list[str], int | None], engine: str) -> torch.Tensor:
    tokens, k = job
    return token_logits(_WORKER["model"], _WORKER["pieces"], tokens, k, engine=engine)


@torch.no_grad()
def tune_offsets_per_slot(
    fusion: PauseFusion, logits: torch.Tensor, features: torch.Tensor, slots: torch.Tensor, gold: torch.Tensor
) -> None:
    """Set the fusion's offsets, per lookahead, to those that maximise micro-F1 on these rows (the
    training rows: the offsets are 3 numbers a lookahead; the dev rows report the result)."""
    fusion.offsets.zero_()
    fused = fusion(logits, features, slots)
    for slot in range(len(fusion.offsets)):
        keep = slots == slot
        if keep.any():
            offsets, _ = tune_offsets(fused[keep], gold[keep])
            fusion.offsets[slot] = torch.tensor(offsets)


def _f1(pred: torch.Tensor, gold: torch.Tensor) -> float:
    return score([LABELS[i] for i in gold.tolist()], [LABELS[i] for i in pred.tolist()]).micro_f1


def train_pauses(cfg: PauseTrainConfig) -> dict:
    """Train and save; returns the report (also ``<out>/pauses.json``)."""
    # without the recogniser's marks there is no sentence end for it to go on from
    cfg = replace(cfg, continued=cfg.continued and cfg.marks)
    n_dev = int(cfg.segments * cfg.dev_share)
    if not 0 < n_dev < cfg.segments:
        raise InputError(
            f"{cfg.segments} segments with dev_share {cfg.dev_share} leave {n_dev} for dev and "
            f"{cfg.segments - n_dev} for training: both need at least one"
        )
    if cfg.workers > 1 and resolve_device(cfg.device).type != "cpu":
        raise InputError(f"--workers {cfg.workers} computes on the CPU; on {cfg.device}, use one process")
    t0 = time.time()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = PunctModel.load(cfg.model, device=resolve_device(cfg.device))
    model.requires_grad_(False)
    pieces = WordPieces(Path(cfg.model) / "vocab.txt", model.cfg.max_pieces)
    texts = [normalize_labeled(*read_iwslt(path)) for path in cfg.train]
    segments = []
    for i in range(cfg.segments):
        tokens, labels = texts[i % len(texts)]
        start = int(rng.integers(0, max(1, len(tokens) - cfg.segment_words)))
        segments.append(
            (tokens[start : start + cfg.segment_words], labels[start : start + cfg.segment_words])
        )
    dev = _rows(model, pieces, segments[:n_dev], cfg, rng)
    train = _rows(model, pieces, segments[n_dev:], cfg, rng)
    print(f"{len(train[0]):,} training rows, {len(dev[0]):,} dev rows, made in {time.time() - t0:.0f}s")

    fusion = PauseFusion(model.cfg.n_labels, cfg.hidden, dev[1].shape[1])
    opt = torch.optim.AdamW(fusion.parameters(), lr=cfg.lr, weight_decay=0.01)
    n = len(train[0])
    for _ in range(cfg.epochs):
        order = torch.randperm(n)
        for i in range(0, n, 1024):
            idx = order[i : i + 1024]
            out = fusion(train[0][idx], train[1][idx], train[2][idx])
            loss = F.cross_entropy(out, train[3][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    fusion.eval()
    tune_offsets_per_slot(fusion, *train)
    report: dict = {"rows": n, "dev_rows": len(dev[0]), "segments": cfg.segments, "by_lookahead": {}}
    report["offsets"] = fusion.offsets.tolist()
    with torch.no_grad():
        fused = fusion(dev[0], dev[1], dev[2]).argmax(-1)
        unmarked = dev[1].clone()
        unmarked[:, N_FEATURES:] = 0  # the same words from a recogniser that writes no marks
        fused_unmarked = fusion(dev[0], unmarked, dev[2]).argmax(-1)
    # a word's own pause after it at k=0: only the silence at a deadline (every token is a word here)
    silence = (dev[2] == 0) & (dev[1][:, 0] == 1)
    groups = [(k, dev[2] == slot) for slot, k in enumerate(("0", "1", "2", "3+", "offline"))]
    for k, keep in groups + [("0 at a deadline, after a silence", silence)]:
        if keep.any():
            report["by_lookahead"][k] = {
                "text": round(_f1(dev[0][keep].argmax(-1), dev[3][keep]), 2),
                "text+pauses": round(_f1(fused_unmarked[keep], dev[3][keep]), 2),
            }
            if cfg.marks:
                report["by_lookahead"][k]["text+pauses+marks"] = round(_f1(fused[keep], dev[3][keep]), 2)
    print(json.dumps(report["by_lookahead"]))

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(cfg.model).iterdir():  # the checkpoint's other files; none when out is the checkpoint
        if f.is_file() and f.name not in ("model.safetensors", "config.json") and not (out / f.name).exists():
            shutil.copy(f, out / f.name)
    timed = PunctModel(
        replace(model.cfg, pause_hidden=cfg.hidden, pause_marks=cfg.marks, pause_continued=cfg.continued)
    )
    timed.load_state_dict(model.state_dict())
    timed.save(out)  # fp16: the text model's weights as they were read
    Decider(fusion, None, cfg.marks, cfg.continued).save_pauses(out)
    report["seconds"] = round(time.time() - t0)
    (out / "pauses.json").write_text(
        json.dumps({**report, "config": cfg.__dict__}, indent=2, default=str) + "\n"
    )
    return report
