"""Accuracy on IWSLT2011 test (Ref and ASR) at lookahead 0..4 under both engines, and offline, per class.

    python benchmarks/accuracy.py --data ../shared/data/iwslt [--model DIR] [--device cuda] [--readme]

Writes benchmarks/results/accuracy.json (and the README table with --readme).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, update_readme, write_json  # noqa: E402

from streampunct import Punctuator, read_iwslt, score  # noqa: E402
from streampunct.punctuator import DEFAULT_CHECKPOINT, resolve_engine  # noqa: E402

SETS = {"Ref": "test2011", "ASR": "test2011asr"}
LOOKAHEADS = [0, 1, 2, 3, 4]
MODES: list[tuple[str, int | None]] = [
    *(("masked", k) for k in LOOKAHEADS),
    *(("window", k) for k in LOOKAHEADS),
    ("masked", None),
]


def mode_name(k: int | None) -> str:
    return "offline" if k is None else f"k={k}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with test2011 and test2011asr")
    ap.add_argument("--model", default=None, help="checkpoint folder (default: the shipped model)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--readme", action="store_true", help="also rewrite the README's accuracy table")
    args = ap.parse_args()

    p = Punctuator.load(args.model, device=args.device)
    model_dir = Path(args.model) if args.model else DEFAULT_CHECKPOINT
    training = (
        json.loads((model_dir / "training.json").read_text())
        if (model_dir / "training.json").is_file()
        else None
    )
    offsets = (p.model.cfg.label_bias, p.model.cfg.window_bias)
    calibration_file = model_dir / "calibration.json"
    calibration = json.loads(calibration_file.read_text()) if calibration_file.is_file() else None
    rows = []
    for set_name, file_name in SETS.items():
        words, labels = read_iwslt(Path(args.data) / file_name)
        for engine, k in MODES:
            t0 = time.perf_counter()
            report = score(labels, p.predict(words, lookahead=k, engine=engine))
            seconds = time.perf_counter() - t0
            row = {
                "set": set_name,
                "mode": mode_name(k),
                "engine": "-" if k is None else engine,
                "seconds": round(seconds, 2),
                **report.to_dict(),
            }
            if any(offsets) and engine == "masked":  # the same model deciding by the plain argmax
                p.model.set_label_bias(())
                plain = p.predict(words, lookahead=k, engine=engine)
                row["micro_f1_plain_argmax"] = score(labels, plain).micro_f1
                p.model.set_label_bias(*offsets)
            rows.append(row)
            print(
                f"{set_name:4} {mode_name(k):8} {row['engine']:6} micro-F1 {report.micro_f1:5.1f}  ({seconds:.1f}s)",
                flush=True,
            )
    payload = {
        "machine": machine(),
        "model": str(model_dir),
        "training": training,
        "calibration": calibration,
        "results": rows,
    }
    print(f"wrote {write_json('accuracy.json', payload)}")
    if args.readme:
        update_readme("accuracy-summary", summary(rows, lambda k: resolve_engine(p.model, "auto", k)))
        update_readme("accuracy", table(rows, payload))


def summary(rows: list[dict], auto_engine: Callable[[int], str]) -> str:
    """Micro-F1 by set and mode, one line per engine: what the default engine (auto, which picks
    ``auto_engine(k)``) gives in bold."""
    lines = [
        "| set | engine | " + " | ".join(f"k={k}" for k in LOOKAHEADS) + " | offline |",
        "|---|---|" + "---|" * (len(LOOKAHEADS) + 1),
    ]
    for set_name in SETS:
        offline = next(r for r in rows if r["set"] == set_name and r["mode"] == "offline")
        for engine in ("masked", "window"):
            cells = []
            for k in LOOKAHEADS:
                r = next(
                    r for r in rows if (r["set"], r["mode"], r["engine"]) == (set_name, f"k={k}", engine)
                )
                cells.append(
                    f"**{r['micro_f1']:.1f}**" if auto_engine(k) == engine else f"{r['micro_f1']:.1f}"
                )
            lines.append(
                f"| {set_name} | {engine} | " + " | ".join(cells) + f" | **{offline['micro_f1']:.1f}** |"
            )
    return "\n".join(lines)


def run(stage: dict) -> str:
    """One training run of training.json in words: steps, data seen, time, machine, dev scores."""
    return (
        f"{stage['steps']:,} steps of {stage['config']['batch']} windows, {stage['seen_tokens'] / 1e6:.1f} M "
        f"word pieces, {stage['train_seconds'] / 60:.0f} min on {stage['machine']}; dev2012 (first "
        f"{stage['dev_words']:,} words) micro-F1 {stage['dev_f1_k2']:.1f} at k=2, {stage['dev_f1_offline']:.1f} offline."
    )


def table(rows: list[dict], payload: dict) -> str:
    def f(x: float) -> str:
        return f"{x:.1f}"

    plain = any("micro_f1_plain_argmax" in r for r in rows)
    lines = [
        "| set | mode | engine | COMMA P / R / F1 | PERIOD P / R / F1 | QUESTION P / R / F1 | micro-F1 | macro-F1 | SER |"
        + (" plain argmax |" if plain else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if plain else ""),
    ]
    for r in rows:
        cls = [
            " / ".join(f(r[c][m]) for m in ("precision", "recall", "f1"))
            for c in ("COMMA", "PERIOD", "QUESTION")
        ]
        lines.append(
            f"| {r['set']} | {r['mode']} | {r['engine']} | {' | '.join(cls)} | **{f(r['micro_f1'])}** | {f(r['macro_f1'])} | {f(r['ser'])} |"
            + (
                f" {f(r['micro_f1_plain_argmax']) if 'micro_f1_plain_argmax' in r else '-'} |"
                if plain
                else ""
            )
        )
    m = payload["machine"]
    lines.append("")
    lines.append(
        f"Measured {m['date']} on {m['cpu']} ({m['cores']} cores, torch {m['torch']}), `python benchmarks/accuracy.py`."
    )
    c = payload.get("calibration")
    if c:
        lines.append(
            f"Decisions add per-lookahead and per-engine offsets to the logits, tuned on the first {c['words']:,} "
            f"words of {c['dev']} ({c.get('window_words', c['words']):,} for the window engine; "
            "`streampunct calibrate`); the last column is the same model deciding by the plain argmax "
            "(masked engine and offline)."
        )
    t = payload.get("training")
    if t:
        lines.append("")
        for i, stage in enumerate(t.get("stages", [t]), 1):
            lines.append(f"- Training stage {i}: from {stage.get('start', 'the encoder')}, {run(stage)}")
            teacher = stage.get("teacher")
            if teacher:
                test = teacher.get("test2011_micro_f1", {})
                scores = ", ".join(
                    f"{k} {test[k]:.1f}" for k in ("Ref k=2", "Ref offline", "ASR offline") if k in test
                )
                lines.append(
                    f"  Distilled (weight {stage['config']['distill']}, temperature "
                    f"{stage['config']['temperature']:g}) from a teacher fine-tuned from {teacher['start']}, "
                    f"{run(teacher)}" + (f" Its test2011 micro-F1: {scores}." if scores else "")
                )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
