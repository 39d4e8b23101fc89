"""POS-fusion ablation (Shi et al. 2021, Tables 2 and 3): no POS / random POS embeddings / POS
fusion initialised from the tagger, at k=0, k=2 and offline, on IWSLT2011 test Ref and ASR.

    python -m benchmarks.pos_ablation --data ../shared/data/iwslt \\
        --model "no POS=runs/base" --model "random POS=runs/random" --model "POS fusion=runs/fused" \\
        [--tags DIR] [--model-tags NAME=DIR] [--device cuda] [--stream-words 1000] [--readme]
    python -m benchmarks.pos_ablation --readme --from-json benchmarks/results/pos_ablation.json

A fused model is scored with the tags inference makes: the streaming tagger at the same
lookahead (offline tags offline), by the tagger the checkpoint streams with (its own ``tagger/``,
else flair's). They come from that tagger, or from files made by ``streampunct tag --lookahead K``:
``--tags DIR`` holds flair's, ``{set}_tags.npy`` (offline) and ``{set}_k{K}_tags.npy``, and
``--model-tags NAME=DIR`` those of a model with a tagger of its own.
Each fused model is also scored at k > 0 with offline tags, which a stream cannot have: the
difference is what training on offline tags costs at inference.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.common import machine, percentile, time_pushes, update_readme, write_json
from benchmarks.lib import doc_text
from streampunct import Punctuator, score
from streampunct.engines import label_tokens
from streampunct.text import LABELS, normalize_labeled, read_iwslt

SETS = {"Ref": "test2011", "ASR": "test2011asr"}
MODES: list[int | None] = [0, 2, None]


def mode_name(k: int | None) -> str:
    return "offline" if k is None else f"k={k}"


class Tags:
    """Tag ids of a test set's tokens at a lookahead, as a model's tagger makes them: from files
    (``{set}_tags.npy``, ``{set}_k{K}_tags.npy``), else from the tagger itself."""

    def __init__(self, folder: str | None, p: Punctuator):
        self.folder = Path(folder) if folder else None
        self.p = p

    def __call__(self, file_name: str, tokens: list[str], k: int | None) -> list[int]:
        if self.folder is None:
            return self.p.tags(tokens, k)  # type: ignore[return-value]
        suffix = "" if k is None else f"_k{k}"
        ids = np.load(self.folder / f"{file_name}{suffix}_tags.npy").tolist()
        if len(ids) != len(tokens):
            raise SystemExit(f"{file_name}{suffix}_tags.npy has {len(ids)} tags for {len(tokens)} tokens")
        return ids


def measure(args: argparse.Namespace) -> dict:
    data = {name: normalize_labeled(*read_iwslt(Path(args.data) / f)) for name, f in SETS.items()}
    own_tags = dict(spec.split("=", 1) for spec in args.model_tags)
    models = []
    rows = []
    for spec in args.model:
        name, _, folder = spec.partition("=")
        p = Punctuator.load(folder, device=args.device)
        fused = bool(p.model.cfg.n_tags)
        # --tags holds flair's tags; a model with a tagger of its own takes its own (or tags itself)
        tags = Tags(own_tags.get(name, None if p.tagger_dir else args.tags), p)
        training_file = Path(folder) / "training.json"
        training = json.loads(training_file.read_text()) if training_file.is_file() else None
        models.append({"name": name, "path": folder, "fused": fused, "training": training})
        for set_name, (tokens, labels) in data.items():
            for k in MODES:
                t0 = time.perf_counter()
                ids = tags(SETS[set_name], tokens, k) if fused else None
                report = score(labels, [LABELS[i] for i in label_tokens(p.model, p.pieces, tokens, k, ids)])
                row = {"model": name, "set": set_name, "mode": mode_name(k), **report.to_dict()}
                if fused and k is not None:
                    oracle = tags(SETS[set_name], tokens, None)
                    pred = label_tokens(p.model, p.pieces, tokens, k, oracle)
                    row["micro_f1_offline_tags"] = score(labels, [LABELS[i] for i in pred]).micro_f1
                rows.append(row)
                print(
                    f"{name:12} {set_name:4} {mode_name(k):8} micro-F1 {report.micro_f1:5.1f}"
                    f"  ({time.perf_counter() - t0:.1f}s)",
                    flush=True,
                )
        if args.stream_words:
            models[-1]["stream_ms"] = stream_cost(p, data["Ref"][0][: args.stream_words])
            print(f"{name:12} stream k=2: {models[-1]['stream_ms']}", flush=True)
    return {"machine": machine(), "device": args.device, "models": models, "results": rows}


def stream_cost(p: Punctuator, words: list[str], k: int = 2) -> dict[str, float]:
    """Compute time per pushed word of one stream (p50, p99, ms), the tagger's work included."""
    times = time_pushes(p, words, k)
    return {f"p{q}": round(1000 * percentile(times, q), 1) for q in (50, 99)}


def table(payload: dict, source: str = "pos_ablation.json") -> str:
    """Micro-F1 of each model by set and mode, beside the first (the baseline) and with offline tags;
    their cost and training, briefly; where they come from (``source``: the results file, which has
    the per-class F1 too)."""
    names = [m["name"] for m in payload["models"]]
    base = names[0]
    by_key = {(r["model"], r["set"], r["mode"]): r for r in payload["results"]}
    body = []
    for set_name in SETS:
        for k in MODES:
            mode = mode_name(k)
            ref = by_key[(base, set_name, mode)]["micro_f1"]
            cells = []
            for name in names:
                r = by_key[(name, set_name, mode)]
                extra = [] if name == base else [f"{round(r['micro_f1'] - ref, 1) + 0.0:+.1f}"]
                extra += [f"{r['micro_f1_offline_tags']:.1f}"] if "micro_f1_offline_tags" in r else []
                cells.append(f"{r['micro_f1']:.1f}" + (f" ({'; '.join(extra)})" if extra else ""))
            body.append([set_name, mode, *cells])
    lines = [*doc_text.table(["set", "mode", *names], body), ""]
    text = (
        f"Micro-F1 (%); in brackets, the change against {base}, then micro-F1 with offline tags, which a stream "
        "cannot have (per-class F1: the file)."
    )
    m = payload["machine"]
    device = payload.get("device", "cpu")
    text += f" Scored on {doc_text.where(m, device)} (torch {m['torch']})."
    costs = [
        f"{x['name']} {x['stream_ms']['p50']} / {x['stream_ms']['p99']}"
        for x in payload["models"]
        if "stream_ms" in x
    ]
    if costs:
        text += (
            f" Compute per pushed word of one k=2 stream, tagging included, p50 / p99 ms ({m['torch_threads']} "
            "torch threads): " + "; ".join(costs) + "."
        )
    text += training(payload["models"])
    command = str(payload.get("command", "python -m benchmarks.pos_ablation --data ../shared/data/iwslt"))
    return "\n".join([*lines, *doc_text.wrap(text), doc_text.provenance(source, command)])


def training(models: list[dict]) -> str:
    """Each model's last training stage in a sentence: what they share once, then each one's own."""
    said: dict[str, dict[str, str]] = {}
    for model in models:
        t = model.get("training")
        if not t:
            continue
        stage = t.get("stages", [t])[-1]
        cfg = stage["config"]
        said[model["name"]] = {
            "from": f"from {stage.get('start', 'the encoder')}",
            "batch": f"{cfg['batch']} windows a step",
            "on": f"on {doc_text.short_name(stage['machine'])}",
            "dev": f"dev2012 (first {stage['dev_words']:,} words) micro-F1 at k=2 / offline",
            "pos": f"POS embeddings from {cfg['pos_init']}" if cfg.get("tags") else "",
            "frozen": "encoder frozen" if cfg.get("freeze_encoder") else "",
            "stages": f"the last of {len(t['stages'])} stages" if "stages" in t else "",
        }
        said[model["name"]]["run"] = (
            f"{stage['steps']:,} steps, {stage['train_seconds'] / 60:.1f} min, "
            f"{stage['dev_f1_k2']:.1f} / {stage['dev_f1_offline']:.1f}"
        )
    if not said:
        return ""
    first = next(iter(said.values()))
    shared = [k for k in ("from", "batch", "on", "dev") if all(s[k] == first[k] for s in said.values())]
    each = []
    for name, s in said.items():
        own = [s[k] for k in s if k not in shared and k != "run" and s[k]]
        each.append(name + (f" ({', '.join(own)})" if own else "") + f": {s['run']}")
    return f" Training ({', '.join(first[k] for k in shared)}): " + "; ".join(each) + "."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="folder with test2011 and test2011asr")
    ap.add_argument("--model", action="append", default=[], help="NAME=DIR, the baseline first")
    ap.add_argument("--tags", help="folder of flair's precomputed tag ids (default: tag with the tagger)")
    ap.add_argument(
        "--model-tags",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="precomputed tag ids for one model, made by the tagger its checkpoint keeps",
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--stream-words", type=int, default=0, help="also time a k=2 stream of this many words per model"
    )
    ap.add_argument("--from-json", help="rewrite the README table from a saved result")
    ap.add_argument("--readme", action="store_true", help="also rewrite its table in docs/results.md")
    args = ap.parse_args()
    if args.from_json:
        payload = json.loads(Path(args.from_json).read_text())
    else:
        if not args.data or len(args.model) < 2:
            ap.error("--data and at least two --model NAME=DIR (the baseline first) are needed")
        payload = measure(args)
        print(f"wrote {write_json('pos_ablation.json', payload)}")
    if args.readme:
        update_readme("pos-ablation", table(payload))


if __name__ == "__main__":
    main()
