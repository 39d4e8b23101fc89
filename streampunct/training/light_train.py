"""Train the light model (:mod:`streampunct.light`) on labelled text.

    python -m streampunct.training.light_train --train TRAIN.tsv --dev DEV.tsv --out RUN [--minutes 90]

Each batch is ``--batch`` windows of ``--window`` words at random places (with the encoder
training's ASR-like noise), all decided at one lookahead drawn from ``LOOKAHEADS`` (None:
offline); no loss on the words whose lookahead the window cuts short. The word-piece embeddings
start from the default checkpoint's, reduced to ``n_embd`` dimensions by PCA (``--init-embed``),
so words the training text never shows still start somewhere sensible. Every ``--eval-every``
steps dev micro-F1 is measured at k = 0, 2 and offline; ``RUN/best`` keeps the best mean, and
``RUN/last.pt`` (weights, optimiser, step) lets a run go on (``--resume``). ``--teacher DIR``
distils a streampunct checkpoint that reads the same word pieces (the default model): the loss adds
the KL divergence from its probabilities at the batch's lookahead (``--distill``, ``--temperature``).
``--device cuda`` runs the same script on a GPU (``scripts/gpu_light.sh``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..light import LightConfig, LightEngine, LightModel, piece_tensor
from ..metrics import score
from ..model import PunctModel
from ..pieces import WordPieces, collate
from ..punctuator import DEFAULT_CHECKPOINT
from ..text import LABELS, normalize_labeled, read_iwslt
from .train import Corpus, distill_loss

LOOKAHEADS: tuple[int | None, ...] = (None, None, 0, 1, 2, 2, 3, 4, 6, 8)
EVAL_LOOKAHEADS: tuple[int | None, ...] = (0, 2, None)


def pca_embeddings(checkpoint: Path, dim: int) -> torch.Tensor:
    """The checkpoint's word-piece embeddings projected on their first ``dim`` principal axes,
    scaled to unit variance per axis times 0.5."""
    from safetensors.torch import load_file

    emb = load_file(str(checkpoint / "model.safetensors"))["tok_emb.weight"].float()
    centred = emb - emb.mean(0)
    _, _, v = torch.linalg.svd(centred[torch.randperm(len(centred))[:8000]], full_matrices=False)
    low = centred @ v[:dim].T
    return 0.5 * low / low.std(0)


def evaluate(model: LightModel, pieces: WordPieces, tokens: list[str], labels: list[str]) -> dict[str, float]:
    model.eval()
    engine = LightEngine(model)
    ids = pieces.encode(tokens)
    out = {}
    for k in EVAL_LOOKAHEADS:
        pred = engine.logits(ids, k).argmax(-1).tolist()
        out["offline" if k is None else f"k={k}"] = round(
            score(labels, [LABELS[i] for i in pred]).micro_f1, 2
        )
    model.train()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=90)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--eval-every", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--teacher", default=None, help="a streampunct checkpoint to distil (same vocabulary)")
    ap.add_argument("--distill", type=float, default=0.5, help="the teacher's weight in the loss, 0 to 1")
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init-embed", default=str(DEFAULT_CHECKPOINT))
    for f in ("n_embd", "n_input", "n_hidden", "n_layer", "n_head", "context", "offline_ahead"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(LightConfig, f))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = LightConfig(
        **{
            f: getattr(args, f)
            for f in ("n_embd", "n_input", "n_hidden", "n_layer", "n_head", "context", "offline_ahead")
        }
    )
    vocab = Path(args.init_embed) / "vocab.txt"
    pieces = WordPieces(vocab, cfg.max_pieces)
    model = LightModel(cfg)
    with torch.no_grad():
        model.embed.weight.copy_(pca_embeddings(Path(args.init_embed), cfg.n_embd))
        model.embed.weight[cfg.pad_id].zero_()
    model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    step, best = 0, -1.0
    if args.resume and (out / "last.pt").is_file():
        saved = torch.load(out / "last.pt", weights_only=False, map_location=args.device)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        step, best = saved["step"], saved["best"]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"light model: {n_params / 1e6:.2f} M parameters", flush=True)

    teacher = None
    if args.teacher:  # its logits at the batch's lookahead, on the same words (the masked engine's way)
        teacher = PunctModel.load(args.teacher, args.device).requires_grad_(False)
        if (
            teacher.cfg.max_pieces != cfg.max_pieces
            or (Path(args.teacher) / "vocab.txt").read_text() != vocab.read_text()
        ):
            raise SystemExit("the teacher must read the same word pieces (vocab.txt, max_pieces)")
    corpus = Corpus(args.train, pieces)
    type_pieces = piece_tensor(corpus.type_pieces, cfg, args.device)
    dev_tokens, dev_labels = normalize_labeled(*read_iwslt(args.dev))
    log = (out / "log.jsonl").open("a")
    model.train()
    t0, budget = time.time(), args.minutes * 60
    losses: list[float] = []
    while time.time() - t0 < budget:
        done = (time.time() - t0) / budget
        lr = args.lr * min(1.0, (step + 1) / 200) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))
        for g in opt.param_groups:
            g["lr"] = lr
        k = LOOKAHEADS[int(rng.integers(len(LOOKAHEADS)))]
        windows = [corpus.sample(rng, args.window, args.noise) for _ in range(args.batch)]
        T = min(len(p) for p, _ in windows)
        words = torch.tensor(np.stack([corpus.words[p[:T]] for p, _ in windows]), dtype=torch.long)
        target = torch.tensor([lab[:T] for _, lab in windows], device=args.device)
        cut = cfg.offline_ahead if k is None else k
        logits = model(type_pieces[words.to(args.device)], k)[:, : T - cut]
        loss = F.cross_entropy(logits.reshape(-1, cfg.n_labels), target[:, : T - cut].reshape(-1))
        if teacher is not None:
            inputs = collate([[corpus.type_pieces[w] for w in row] for row in words.tolist()], teacher.cfg)
            with torch.no_grad():
                taught = teacher(*(x.to(args.device) for x in inputs), k)[:, : T - cut]
            keep = torch.ones(taught.shape[:2], dtype=torch.bool, device=args.device)
            soft = distill_loss(logits, taught, keep, args.temperature)
            loss = (1 - args.distill) * loss + args.distill * soft
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % args.eval_every == 0 or time.time() - t0 >= budget:
            dev = evaluate(model, pieces, dev_tokens, dev_labels)
            mean = sum(dev.values()) / len(dev)
            row = {
                "step": step,
                "minutes": round((time.time() - t0) / 60, 1),
                "loss": round(float(np.mean(losses)), 4),
                "lr": lr,
                **dev,
                "mean": round(mean, 2),
            }
            losses.clear()
            print(json.dumps(row), flush=True)
            log.write(json.dumps(row) + "\n")
            log.flush()
            if mean > best:
                best = mean
                model.save(out / "best")
                (out / "best" / "vocab.txt").write_text(vocab.read_text())
                (out / "best" / "training.json").write_text(
                    json.dumps(
                        {"args": vars(args), "step": step, "dev2012": dev, "parameters": n_params}, indent=2
                    )
                    + "\n"
                )
            torch.save(
                {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "best": best},
                out / "last.pt",
            )


if __name__ == "__main__":
    main()
