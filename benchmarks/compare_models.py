"""Checkpoints on the same labelled words: is one better than the other, or is it chance?

    python -m benchmarks.compare_models --data DEV.tsv --models default DIR [DIR ...] \\
        [--modes 0 2 offline] [--block 250] [--out NAME]

Each model labels the words of ``--data`` (``word<TAB>LABEL``, as ``streampunct evaluate`` reads
it) in each mode, under its own engine (``auto``); every model after the first is compared with
the first on the same words by a paired bootstrap over consecutive blocks of ``--block`` words
(``streampunct.scoring.paired``: the difference in micro-F1, its 95 % interval, and the share of
resamples in which the later model is worse). For decisions, on dev data only. Writes
``benchmarks/results/compare_models.json`` (``--out NAME``: NAME.json).
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import machine, write_json
from streampunct import read_iwslt
from streampunct.metrics import count
from streampunct.scoring import TALLY, paired
from streampunct.training import teacher


def block_tallies(labels: list[str], predicted: list[str], block: int) -> dict[int, np.ndarray]:
    """``paired``'s tallies for each block of words (no word errors: the words are the reference's)."""
    out = {}
    for b, i in enumerate(range(0, len(labels), block)):
        n = count(labels[i : i + block], predicted[i : i + block])
        row = np.zeros(len(TALLY), dtype=np.int64)
        row[1] = len(labels[i : i + block])
        row[2:] = [sum(n.tp.values()), sum(n.fp.values()), sum(n.fn.values())]
        out[b] = row
    return out


def mode_name(k: int | None) -> str:
    return "offline" if k is None else f"k={k}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument(
        "--models",
        nargs="+",
        required=True,
        help="shipped names or checkpoint folders; the first is the baseline",
    )
    ap.add_argument("--modes", nargs="+", default=["2", "offline"], help="lookaheads, or offline")
    ap.add_argument("--block", type=int, default=250, help="words in a resampled block")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="compare_models", help="results name (benchmarks/results/OUT.json)")
    args = ap.parse_args()
    words, labels = read_iwslt(args.data)
    modes = [None if m == "offline" else int(m) for m in args.modes]
    tallies: dict[str, dict[str, dict[int, np.ndarray]]] = {}
    for name in args.models:
        p = teacher.punctuator(name, device=args.device)  # a plain checkpoint, or FFA's teacher
        tallies[name] = {
            mode_name(k): block_tallies(labels, p.predict(words, lookahead=k), args.block) for k in modes
        }
    base, *others = args.models
    results = {
        other: {mode: paired(tallies[other][mode], tallies[base][mode])["micro_f1"] for mode in tallies[base]}
        for other in others
    }
    for other, by_mode in results.items():
        for mode, r in by_mode.items():
            print(
                f"{other} - {base}, {mode}: {r['a']} - {r['b']} = {r['diff']:+.2f} {r['ci95']} (worse in {r['p_worse']:.1%})"
            )
    payload = {
        "machine": machine(),
        "data": args.data,
        "words": len(words),
        "block": args.block,
        "baseline": base,
        "results": results,
    }
    print(write_json(f"{args.out}.json", payload))


if __name__ == "__main__":
    main()
