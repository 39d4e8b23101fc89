"""The shipped checkpoint's learning curve: dev2012 micro-F1 at k=2 and offline against the word
pieces seen, over its training stages (read from the checkpoint's training.json).

    python -m benchmarks.learning_curve [--model DIR] [--readme]     # needs matplotlib (.[bench])
    python -m benchmarks.learning_curve --docs-only    # docs/results.md's paragraph from the saved result

Writes benchmarks/results/learning_curve.json and learning_curve.png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common import RESULTS, update_readme, write_json
from benchmarks.lib import doc_text
from streampunct.punctuator import checkpoint_dir

KEYS = ("dev_f1_k2", "dev_f1_offline")  # the two dev scores that training records and selects on


def curve(training: dict) -> list[dict]:
    """One point per dev evaluation, word pieces counted from the start of stage 1. Each stage
    starts from the previous stage's best checkpoint, so its count starts where that best was."""
    points, offset = [], 0
    for i, stage in enumerate(training.get("stages", [training]), 1):
        for r in stage["curve"]:
            points.append(
                {
                    "stage": i,
                    "machine": stage["machine"],
                    "dev_words": stage["dev_words"],
                    "seen_tokens": offset + r["seen_tokens"],
                    "dev_f1_k2": r["dev_f1_k2"],
                    "dev_f1_offline": r["dev_f1_offline"],
                    "engine_k2": engine_k2(stage),
                }
            )
        offset += stage["seen_tokens"]
    return points


def engine_k2(stage: dict) -> str:
    """The engine a run scored k=2 with: the window engine when it trained it (train --window-share)."""
    return "window" if stage["config"].get("window_share") else "masked"


def teachers(training: dict) -> list[dict]:
    """The teachers that stages were distilled from: their best dev2012 scores."""
    return [
        {
            "stage": i,
            "start": s["teacher"]["start"].split(" (")[0],
            "engine_k2": engine_k2(s["teacher"]),
            **{k: s["teacher"][k] for k in KEYS},
        }
        for i, s in enumerate(training.get("stages", []), 1)
        if s.get("teacher")
    ]


def plot(points: list[dict], teachers: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    stages = sorted({p["stage"] for p in points})
    lines = (
        ("dev_f1_offline", None, "offline", "tab:blue"),
        ("dev_f1_k2", "masked", "k=2, masked engine", "tab:orange"),
        ("dev_f1_k2", "window", "k=2, window engine", "tab:green"),
    )
    for key, engine, name, color in lines:
        labelled = False
        for s in stages:
            stage = [p for p in points if p["stage"] == s and engine in (None, p["engine_k2"])]
            if stage:
                xs, ys = [p["seen_tokens"] / 1e6 for p in stage], [p[key] for p in stage]
                ax.plot(xs, ys, "o-", ms=3, color=color, label=None if labelled else name)
                labelled = True
        for t in teachers:
            if engine in (None, t["engine_k2"]):
                ax.axhline(
                    t[key],
                    color=color,
                    lw=0.8,
                    ls="--",
                    label=f"{name}, teacher of stage {t['stage']} ({t['start']})",
                )
    for s in stages[1:]:
        first = min(p["seen_tokens"] for p in points if p["stage"] == s) / 1e6
        ax.axvline(first, color="grey", lw=0.6, ls=":")
    top = max([p[k] for p in points for k in KEYS] + [t[k] for t in teachers for k in KEYS])
    legend = []
    for s in stages:
        stage = [p for p in points if p["stage"] == s]
        ax.annotate(f"stage {s}", (stage[0]["seen_tokens"] / 1e6, top + 1), fontsize=7, color="grey")
        legend.append(
            f"stage {s}: {stage[0]['machine'].split(' (')[0]}, dev {stage[0]['dev_words'] // 1000}k words"
        )
    ax.text(0.01, 0.86, "\n".join(legend), transform=ax.transAxes, fontsize=7, color="grey", va="top")
    ax.set_ylim(top=top + 3)
    ax.set_xscale("log")
    ax.set_xlabel("word pieces seen (millions, log scale)")
    ax.set_ylabel("dev2012 micro-F1 (%)")
    ax.set_title("MiniLM-L6 learning curve (shipped checkpoint)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=6.5, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default (the default), base or a checkpoint folder")
    ap.add_argument("--readme", action="store_true", help="also rewrite its paragraph in docs/results.md")
    ap.add_argument(
        "--docs-only",
        action="store_true",
        help="rewrite that paragraph from learning_curve.json, nothing else",
    )
    args = ap.parse_args()
    if args.docs_only:
        update_readme("curve", section(json.loads((RESULTS / "learning_curve.json").read_text())))
        return
    model_dir = checkpoint_dir(args.model)
    training = json.loads((model_dir / "training.json").read_text())
    points, distilled_from = curve(training), teachers(training)
    payload = {"model": str(model_dir), "points": points, "teachers": distilled_from}
    print(f"wrote {write_json('learning_curve.json', payload)}")
    plot(points, distilled_from, RESULTS / "learning_curve.png")
    print(f"wrote {RESULTS / 'learning_curve.png'}")
    if args.readme:
        update_readme("curve", section(json.loads((RESULTS / "learning_curve.json").read_text())))


def section(payload: dict) -> str:
    """The plot and its best and last dev points, from learning_curve.json."""
    points = payload["points"]
    best = max(points, key=lambda p: p["dev_f1_k2"] + p["dev_f1_offline"])
    last = points[-1]
    text = (
        f"Best dev2012 point: {best['dev_f1_k2']:.1f} at k=2 ({best['engine_k2']} engine), "
        f"{best['dev_f1_offline']:.1f} offline, after {best['seen_tokens'] / 1e6:.1f} M word pieces"
    )
    if last is best:
        text += ", the last evaluation."
    else:
        text += f"; last: {last['dev_f1_k2']:.1f}, {last['dev_f1_offline']:.1f} at {last['seen_tokens'] / 1e6:.1f} M."
    command = str(payload.get("command", "python -m benchmarks.learning_curve --readme"))
    return "\n".join(
        [
            "![learning curve](../benchmarks/results/learning_curve.png)",
            "",
            *doc_text.wrap(text),
            doc_text.provenance("learning_curve.json", command),
        ]
    )


if __name__ == "__main__":
    main()
