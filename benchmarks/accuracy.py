"""Accuracy on IWSLT2011 test (Ref and ASR) at lookahead 0..4 under both engines, and offline, per class.

    python -m benchmarks.accuracy --data ../shared/data/iwslt [--model base|DIR] [--device cuda] [--readme]
    python -m benchmarks.accuracy --model base --docs-only   # the tables from the saved results

Writes benchmarks/results/accuracy.json for the default model, accuracy_<name>.json for another
(accuracy_base.json for the shipped base); with --readme, the model's per-class table and the
summary of every shipped model's results.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import RESULTS, machine, update_readme, write_json
from benchmarks.lib import doc_text
from streampunct import Punctuator, read_iwslt, score
from streampunct.model import ModelConfig
from streampunct.punctuator import DEFAULT_CHECKPOINT, SHIPPED_MODELS, checkpoint_dir

SETS = {"Ref": "test2011", "ASR": "test2011asr"}
LOOKAHEADS = [0, 1, 2, 3, 4]
MODES: list[tuple[str, int | None]] = [
    *(("masked", k) for k in LOOKAHEADS),
    *(("window", k) for k in LOOKAHEADS),
    ("masked", None),
]


def mode_name(k: int | None) -> str:
    return "offline" if k is None else f"k={k}"


def results_name(model_dir: Path) -> str:
    """accuracy.json for the default model, accuracy_<folder>.json for another."""
    return "accuracy.json" if model_dir == DEFAULT_CHECKPOINT else f"accuracy_{model_dir.name}.json"


def readme_section(model_dir: Path) -> str | None:
    """The README section of a shipped model's per-class table (None for any other folder)."""
    if model_dir not in {checkpoint_dir(name) for name in SHIPPED_MODELS}:
        return None
    return "accuracy" if model_dir == DEFAULT_CHECKPOINT else f"accuracy-{model_dir.name}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="folder with test2011 and test2011asr")
    ap.add_argument("--model", default=None, help="default, base or a checkpoint folder (default: default)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument(
        "--readme",
        action="store_true",
        help="also rewrite the accuracy tables in README.md and docs/results.md",
    )
    ap.add_argument(
        "--readme-only",
        "--docs-only",
        action="store_true",
        help="rewrite the README from the saved results, measure nothing",
    )
    args = ap.parse_args()
    if not args.data and not args.readme_only:
        ap.error("--data is required (unless --readme-only)")

    model_dir = checkpoint_dir(args.model)
    if args.readme_only:
        payload = json.loads((RESULTS / results_name(model_dir)).read_text())
    else:
        payload = measure(Punctuator.load(model_dir, device=args.device), model_dir, Path(args.data))
        print(f"wrote {write_json(results_name(model_dir), payload)}")
    if args.readme or args.readme_only:
        update_readme("accuracy-summary", shipped_summary())
        update_readme("accuracy-short", shipped_summary(short=True))
        section = readme_section(model_dir)
        if section:
            rows, name = payload["results"], results_name(model_dir)
            update_readme(section, table(rows, payload, name, explain=section == "accuracy"))


def measure(p: Punctuator, model_dir: Path, data: Path) -> dict:
    """Every mode of MODES on both sets, per class; the payload of the results file."""
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
        words, labels = read_iwslt(data / file_name)
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
    return {
        "machine": machine(),
        "device": str(p.device),
        "model": str(model_dir),
        "parameters": sum(w.numel() for w in p.model.parameters()),
        "training": training,
        "calibration": calibration,
        "results": rows,
    }


def shipped_summary(short: bool = False) -> str:
    """:func:`summary` of every shipped model's saved results (what the README's tables show)."""
    shipped, window_from = {}, {}
    for name in SHIPPED_MODELS:
        path = RESULTS / results_name(checkpoint_dir(name))
        if path.is_file():
            shipped[name] = json.loads(path.read_text())["results"]
            window_from[name] = ModelConfig.read(checkpoint_dir(name)).window_from
    return summary(shipped, window_from, short)


def summary(models: dict[str, list[dict]], window_from: dict[str, int], short: bool = False) -> str:
    """Micro-F1 by model, set and mode, one line per engine: what the default engine gives in bold
    (auto: the window engine from the model's ``window_from`` on); ``short``: that line alone."""
    modes = " | ".join(f"k={k}" for k in LOOKAHEADS) + " | offline |"
    head = ["| model | set | " + modes, "|---|---|" + "---|" * (len(LOOKAHEADS) + 1)]
    lines = [head[0].replace("| set |", "| set | engine |"), head[1] + "---|"] if not short else head
    for (model, rows), set_name in ((m, s) for m in models.items() for s in SETS):

        def f1(mode: str, engine: str, rows: list[dict] = rows, set_name: str = set_name) -> float:
            match = (set_name, mode, engine)
            return next(r for r in rows if (r["set"], r["mode"], r["engine"]) == match)["micro_f1"]

        offline = next(r for r in rows if r["set"] == set_name and r["mode"] == "offline")["micro_f1"]
        if short:
            auto = [f1(f"k={k}", "window" if k >= window_from[model] else "masked") for k in LOOKAHEADS]
            lines.append(
                f"| {model} | {set_name} | " + " | ".join(f"{x:.1f}" for x in [*auto, offline]) + " |"
            )
            continue
        for engine in ("masked", "window"):
            cells = [
                f"**{f1(f'k={k}', engine):.1f}**" if (engine == "window") == (k >= window_from[model])
                else f"{f1(f'k={k}', engine):.1f}"
                for k in LOOKAHEADS
            ]  # fmt: skip
            lines.append(
                f"| {model} | {set_name} | {engine} | " + " | ".join(cells) + f" | **{offline:.1f}** |"
            )
    return "\n".join(lines)


def table(rows: list[dict], payload: dict, source: str = "accuracy.json", explain: bool = True) -> str:
    """A model's per-class table, and what its figures are (``explain``: the columns too, which the
    first table on the page says for all) and where they come from (``source``: its results file)."""

    def f(x: float) -> str:
        return f"{x:.1f}"

    plain = any("micro_f1_plain_argmax" in r for r in rows)
    head = [
        "set",
        "mode",
        "engine",
        "COMMA P/R/F1",
        "PERIOD P/R/F1",
        "QUESTION P/R/F1",
        "micro-F1",
        "macro-F1",
    ]
    body = []
    for r in rows:
        cls = [
            " / ".join(f(r[c][m]) for m in ("precision", "recall", "f1"))
            for c in ("COMMA", "PERIOD", "QUESTION")
        ]
        argmax = [f(r["micro_f1_plain_argmax"]) if "micro_f1_plain_argmax" in r else "-"] if plain else []
        body.append(
            [
                r["set"],
                r["mode"],
                r["engine"],
                *cls,
                f"**{f(r['micro_f1'])}**",
                f(r["macro_f1"]),
                f(r["ser"]),
                *argmax,
            ]
        )
    lines = [*doc_text.table([*head, "SER", *(["argmax"] if plain else [])], body), ""]
    text = ""
    if explain:
        text = "P/R/F1: precision, recall, F1 (%); bold: micro-F1" + (
            "; argmax: the plain argmax (masked engine and offline), without the offsets that decisions add to "
            "the logits per lookahead and engine (`streampunct calibrate`)"
            if plain
            else ""
        )
    c = payload.get("calibration")
    if c:
        text += ", tuned" if explain and plain else (". " if text else "") + "Offsets tuned"
        text += f" on the first {c['words']:,} words of {c['dev']} ({c.get('window_words', c['words']):,} for the window engine)"
        r = c.get("offline_retuned")
        text += f", offline on {r['dev']} (dev micro-F1 {r['dev_micro_f1']:.1f})" if r else ""
    text += "."
    m = payload["machine"]
    where = f"{doc_text.short_name(m['cpu'])}, {m['cores']} cores, torch {m['torch']}, {m['date']}"
    if str(payload.get("device", "cpu")).startswith("cuda"):
        where = f"{doc_text.short_name(m['gpu'])}, host {where}"
    text += f" {where}" + (
        "; training: the checkpoint's `training.json`." if payload.get("training") else "."
    )
    text += f" {payload['note']}" if payload.get("note") else ""
    command = str(payload.get("command", "python -m benchmarks.accuracy --data ../shared/data/iwslt"))
    lines += [*doc_text.wrap(text.strip()), doc_text.provenance(source, command)]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
