"""Fine-tune the POS tagger on what the plugin sees: UD English-EWT in ASR style.

flair's tagger was trained on cased, punctuated news; a recogniser's words are lower case and
unpunctuated. This keeps the tagger's two character language models as they are and trains the
rest (the word BiLSTM, the output layer and the CRF; optionally the reprojection) on EWT's train
set turned into ASR style (:func:`read_asr_style`), starting from flair's weights. The result is a
tagger folder in the same format, so :meth:`Tagger.load(directory) <streampunct.pos.Tagger.load>`
and every POS option take it unchanged.

Training sees documents as streams: random spans of consecutive words, cut anywhere (sentence
boundaries are invisible in ASR output), and the character LM vectors are computed once per
100-word segment and kept (they do not train).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn as nn
from tqdm import tqdm

from ..errors import DataFormatError
from ..pos import Tagger, installed_tagger

__all__ = ["read_asr_style", "TaggerTrainConfig", "train_tagger"]

SEGMENT = 100  # words per span whose character LM vectors are computed together


def read_asr_style(path: str | Path) -> list[tuple[list[str], list[str]]]:
    """(words, Penn tags) per document of a CoNLL-U file, in ASR style: every word lower case,
    punctuation tokens (UPOS PUNCT, and SYM tokens with no letter or digit) removed."""
    p = Path(path)
    if not p.is_file():
        raise DataFormatError("no such file", str(p))
    docs: list[tuple[list[str], list[str]]] = []
    for line in p.read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc"):
            docs.append(([], []))
        cols = line.split("\t")
        if line.startswith("#") or len(cols) != 10 or not cols[0].isdigit():
            continue  # comments, blank lines, multiword ranges (3-4), empty nodes (8.1)
        form, upos, xpos = cols[1], cols[3], cols[4]
        if upos == "PUNCT" or (upos == "SYM" and not any(c.isalnum() for c in form)):
            continue
        if not docs:
            docs.append(([], []))
        docs[-1][0].append("_".join(form.lower().split()))
        docs[-1][1].append(xpos)
    return [d for d in docs if d[0]]


@dataclass(frozen=True)
class TaggerTrainConfig:
    ewt: str
    out: str
    steps: int = 800
    batch: int = 32
    lr: float = 5e-4
    span: tuple[int, int] = (4, 100)
    train_reproject: bool = False
    eval_every: int = 250
    seed: int = 0
    threads: int = 0

    HELP: ClassVar[dict[str, str]] = {  # what each field is (and the help of its CLI flag)
        "steps": "training steps",
        "batch": "spans per training step",
        "lr": "learning rate (Adam)",
        "seed": "random seed",
        "ewt": "folder with en_ewt-ud-{train,dev}.conllu",
        "out": "folder for the trained tagger (tagger.json, tagger.safetensors; Tagger.load(OUT))",
        "span": "fewest and most words per training span, drawn uniformly",
        "train_reproject": "train the reprojection layer too",
        "eval_every": "steps between dev evaluations",
        "threads": "torch CPU threads (0: torch's default)",
    }


def _crf_nll(tagger: Tagger, emissions: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
    """Mean CRF negative log-likelihood per word of equal-length spans (B, n), with the tagger's
    transitions ([to, from], as its Viterbi reads them)."""
    tr = tagger.transitions
    B, n, _ = emissions.shape
    alpha = emissions[:, 0] + tr[:, tagger.start]
    for t in range(1, n):
        alpha = torch.logsumexp(alpha[:, None, :] + tr[None], dim=2) + emissions[:, t]
    log_z = torch.logsumexp(alpha + tr[tagger.stop], dim=1)
    gold = emissions.gather(2, tags[..., None])[..., 0].sum(1)
    gold = gold + tr[tags[:, 0], tagger.start] + tr[tagger.stop, tags[:, -1]]
    gold = gold + tr[tags[:, 1:], tags[:, :-1]].sum(1)
    return (log_z - gold).sum() / (B * n)


def _lm_vectors(
    tagger: Tagger, docs: list[tuple[list[str], list[str]]]
) -> list[tuple[torch.Tensor, list[int]]]:
    """Per segment of up to SEGMENT words: (n, 2048) fp16 character LM vectors, tag ids."""
    segments = [
        (words[a : a + SEGMENT], tags[a : a + SEGMENT])
        for words, tags in docs
        for a in range(0, len(words), SEGMENT)
    ]
    out = []
    unknown = tagger.index["<unk>"]
    bar = tqdm(total=len(segments), desc="character LM vectors", unit="segment", dynamic_ncols=True)
    with torch.no_grad(), bar:
        for i in range(0, len(segments), 32):
            chunk = segments[i : i + 32]
            spans = [w for w, _ in chunk]
            fw, bw = tagger._forward_vectors(spans), tagger._backward_vectors(spans)
            for (_, tags), f, b in zip(chunk, fw, bw):
                ids = [tagger.index.get(t, unknown) for t in tags]  # EWT's GW is not a Penn tag
                out.append((torch.cat([f, b], dim=1).half(), ids))
            bar.update(len(chunk))
    return out


def _spans(
    segments: list[tuple[torch.Tensor, list[int]]], cfg: TaggerTrainConfig, rng: random.Random
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of ``cfg.batch`` spans of one random length, cut anywhere in the segments."""
    longest = max(len(ids) for _, ids in segments)
    while True:
        n = min(rng.randint(*cfg.span), longest)  # spans of one length: no padding in the CRF
        fits = [s for s in segments if len(s[1]) >= n]
        xs, ys = [], []
        for lm, ids in rng.choices(fits, weights=[len(ids) - n + 1 for _, ids in fits], k=cfg.batch):
            a = rng.randint(0, len(ids) - n)
            xs.append(lm[a : a + n].float())
            ys.append(torch.tensor(ids[a : a + n]))
        yield torch.stack(xs), torch.stack(ys)


def _accuracy(tagger: Tagger, segments: list[tuple[torch.Tensor, list[int]]]) -> float:
    right = total = 0
    with torch.no_grad():
        for lm, ids in segments:
            path = tagger._viterbi(tagger._emissions(tagger.reproject(lm.float()[None])))[0].tolist()
            right += sum(p == g for p, g in zip(path, ids))
            total += len(ids)
    return 100 * right / total


def train_tagger(cfg: TaggerTrainConfig) -> Path:
    """Fine-tune and save the tagger; returns its folder."""
    from safetensors.torch import load_file, save_file

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    source = installed_tagger()  # flair's, as fetch-tagger installs it
    tagger = Tagger.load(source)
    ewt = Path(cfg.ewt)
    train_docs = read_asr_style(ewt / "en_ewt-ud-train.conllu")
    dev_docs = read_asr_style(ewt / "en_ewt-ud-dev.conllu")
    t0 = time.perf_counter()
    train, dev = _lm_vectors(tagger, train_docs), _lm_vectors(tagger, dev_docs)
    tqdm.write(
        f"character LM vectors of {sum(len(i) for _, i in train):,} + {sum(len(i) for _, i in dev):,} "
        f"words in {time.perf_counter() - t0:.0f}s"
    )

    # The word level trains in place, in the tagger itself: its own emissions and Viterbi.
    tagger.transitions = tagger.transitions.clone()
    weights = tagger.word_level()
    trained = [w for name, w in weights.items() if cfg.train_reproject or not name.startswith("embedding2nn")]
    for w in trained:
        w.requires_grad_(True)
    opt = torch.optim.Adam(trained, lr=cfg.lr)
    best = _accuracy(tagger, dev)
    tqdm.write(f"dev accuracy before: {best:.2f}")
    best_weights = {k: w.detach().clone() for k, w in weights.items()}
    batches = _spans(train, cfg, rng)
    t0, seen = time.perf_counter(), 0
    bar = tqdm(total=cfg.steps, dynamic_ncols=True, mininterval=5)
    for step in range(1, cfg.steps + 1):
        x, y = next(batches)
        for g in opt.param_groups:  # linear decay to zero
            g["lr"] = cfg.lr * (1 - (step - 1) / cfg.steps)
        loss = _crf_nll(tagger, tagger._emissions(tagger.reproject(x)), y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(trained, 5.0)
        opt.step()
        seen += y.numel()
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", words_s=f"{seen / (time.perf_counter() - t0):.0f}")
        if step % cfg.eval_every == 0 or step == cfg.steps:
            acc = _accuracy(tagger, dev)
            bar.write(f"step {step}: dev accuracy {acc:.2f}")
            if acc > best:
                best, best_weights = acc, {k: w.detach().clone() for k, w in weights.items()}
    bar.close()

    # The same format as the converted flair tagger: its character LMs, the trained rest.
    state = load_file(str(source / "tagger.safetensors"))
    state.update({k: w.to(torch.float16).contiguous() for k, w in best_weights.items()})
    config = json.loads((source / "tagger.json").read_text())
    config["source"] += (
        f"; word BiLSTM and CRF fine-tuned on UD English-EWT train in ASR style (dev {best:.2f} %)"
    )
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "tagger.safetensors"))
    (out / "tagger.json").write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n")
    tqdm.write(f"tagger saved in {out} (dev accuracy {best:.2f} %)")
    return out
