"""Offline and streaming accuracy on conversation and on IWSLT2011 (Ref and ASR), model by model.

    streampunct prepare-conversation --out CONV          # the chit-chat sets, once
    python -m benchmarks.conversation --conv CONV --iwslt ../shared/data/iwslt \\
        --models before=default after=runs/conv/best [--name conversation]

For each model (label=name-or-folder), the IWSLT protocol (per-class P/R/F1, micro-F1, macro-F1,
SER) at k = 0 and 2 (the checkpoint's own engine, "auto") and offline on: the conversational test
set (``chat_test.tsv``, held-out chit-chat conversations; ``--dev`` scores ``chat_dev.tsv``, the
set used for model selection, instead), IWSLT2011 test Ref and ASR. Writes
benchmarks/results/<name>.json and prints a markdown table of micro-F1.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.common import machine, write_json
from streampunct import Punctuator, read_iwslt, score
from streampunct.text import normalize_labeled

MODES: list[tuple[str, int | None]] = [("k=0", 0), ("k=2", 2), ("offline", None)]


def evaluate(p: Punctuator, path: Path, modes: list[str]) -> dict[str, dict]:
    tokens, labels = normalize_labeled(*read_iwslt(path))
    out = {}
    for name, k in [(name, k) for name, k in MODES if name in modes]:
        t0 = time.perf_counter()
        report = score(labels, p.predict(tokens, k))
        out[name] = {**report.to_dict(), "seconds": round(time.perf_counter() - t0, 1)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conv", required=True, help="folder written by streampunct prepare-conversation")
    ap.add_argument("--iwslt", required=True, help="folder with test2011 and test2011asr")
    ap.add_argument("--models", nargs="+", required=True, help="label=name-or-folder ...")
    ap.add_argument("--dev", action="store_true", help="score chat_dev.tsv instead of chat_test.tsv")
    ap.add_argument("--sets", nargs="+", default=["Conversation", "Ref", "ASR"], help="which sets to score")
    ap.add_argument("--modes", nargs="+", default=[m for m, _ in MODES], help="k=0, k=2, offline")
    ap.add_argument("--name", default="conversation", help="results file name (without .json)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (the same labels up to rounding)")
    args = ap.parse_args()
    conv = "chat_dev.tsv" if args.dev else "chat_test.tsv"
    sets = {"Conversation": Path(args.conv) / conv, "Ref": Path(args.iwslt) / "test2011"}
    sets["ASR"] = Path(args.iwslt) / "test2011asr"
    sets = {s: path for s, path in sets.items() if s in args.sets}
    results = {}
    for spec in args.models:
        label, _, model = spec.partition("=")
        p = Punctuator.load(model or label, device=args.device)
        scores = {s: evaluate(p, path, args.modes) for s, path in sets.items()}
        results[label] = {"model": model or label, **scores}
        print(f"{label}: done", flush=True)
    write_json(f"{args.name}.json", {"machine": machine(), "conversation_set": conv, "results": results})
    print("| model | " + " | ".join(f"{s} {m}" for s in sets for m in args.modes) + " |")
    print("|---" * (1 + len(sets) * len(args.modes)) + "|")
    for label, r in results.items():
        cells = [f"{r[s][m]['micro_f1']:.1f}" for s in sets for m in args.modes]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
