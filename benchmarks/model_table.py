"""One table of every model and training variant, from the results already saved: parameters, compute
per word, micro-F1 on IWSLT2011 Ref and ASR and on held-out conversation, beside published anchors.

    python benchmarks/model_table.py [--extra "NAME=FILE[:KEY]" ...] [--readme]

Measures nothing and loads no model: it reads the JSON files in benchmarks/results (accuracy.py,
conversation.py, pos_ablation.py and stream_latency.py write them) and counts parameters from the
headers of a checkpoint's safetensors files. ROWS says which file gives which row. ``--extra`` adds
a source without editing code, for a row of its own or an existing one (a later training stage:
``--extra "default, stage 8=accuracy_stage8.json" --extra "default, stage 8=conversation_stage8.json:after"
--extra "default, stage 8=/path/to/checkpoint"``). Writes benchmarks/results/model_table.json and,
with --readme, the model-table section of docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, machine, update_readme, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = "streampunct/checkpoints/default"  # a checkpoint folder as a source: its parameter count
BASE = "streampunct/checkpoints/base"

# (row, source, key), in table order. A source is a JSON file in benchmarks/results or a checkpoint
# folder. The key picks what the file holds for this row: the label in a conversation.py file, the
# model in a pos_ablation.py file, the engine in an accuracy.py file ("auto": the one the checkpoint's
# window_from gives each k, as the README reports) or in a stream_latency.py file. A row takes each
# cell from the first of its sources that measured it.
ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("default, stage 5", "conversation_default_before.json@8b63caf", "default"),
    ("default, stage 5", DEFAULT, None),  # the same architecture (so for every default row)
    ("default, stage 6", "accuracy.json@37fafb9", "auto"),  # while it shipped
    ("default, stage 6", "conversation_offline_retuned.json@8b63caf", "conv"),  # its offline offsets
    ("default, stage 6", "conversation_conv_after.json@8b63caf", "conv"),  # k=0, k=2: the same offsets
    ("default, stage 6", "stream_latency.json", "window"),  # auto's engine at k=2
    ("default, stage 6", DEFAULT, None),
    ("default, stage 7 (not shipped)", "conversation_default_stage7.json@8b63caf", "after"),
    ("default, stage 7 (not shipped)", DEFAULT, None),
    ("default, stage 8 (shipped)", "accuracy.json", "auto"),
    ("default, stage 8 (shipped)", "conversation.json", "stage 8"),
    ("default, stage 8 (shipped)", "stream_latency.json", "window"),  # the same architecture and engine
    ("default, stage 8 (shipped)", "stream_latency_cuda.json", "masked"),  # a GPU: a note, not a cell
    ("default, stage 8 (shipped)", "stream_capacity.json", None),
    ("default, stage 8 (shipped)", DEFAULT, None),
    ("base, stage 1", "conversation_base_gpu.json@8b63caf", "before"),
    ("base, stage 1", "conversation_base.json@8b63caf", "base"),
    ("base, stage 1", BASE, None),
    ("base, stage 2 (shipped)", "accuracy_base.json", "auto"),
    ("base, stage 2 (shipped)", "conversation_base_stage2.json@8b63caf", "base"),
    ("base, stage 2 (shipped)", BASE, None),
    ("light (not shipped)", "accuracy_light.json@c69e20c", "light"),
    ("light (not shipped)", "stream_latency_light.json@c69e20c", "light"),
    ("light (not shipped)", "stream_capacity_light.json@c69e20c", None),
    ("POS ablation: no POS ‡", "pos_ablation.json", "no POS"),
    ("POS ablation: no POS ‡", DEFAULT, None),
    ("POS ablation: random POS ‡", "pos_ablation.json", "random POS"),
    ("POS ablation: POS fusion ‡", "pos_ablation.json", "POS fusion"),
    ("POS ablation: POS fusion, EWT-tuned tagger ‡", "pos_ablation.json", "POS fusion, EWT-tuned tagger"),
)

# Published offline micro-F1 on IWSLT2011 test Ref: (model, parameters in M where the source gives
# them, micro-F1, source). Checked against the papers in shared/papers where there is a copy.
ANCHORS: tuple[tuple[str, float | None, float, str], ...] = (
    (
        "FFA, two streams (BART-large, funnel-xlarge)",
        None,
        85.2,
        "the FFA paper (a Feature Fusion framework based on two-type Attentions), Table 1, overall F1",
    ),
    (
        "DeBERTa-large + generated data and RL",
        304,
        85.1,
        "Lai et al. 2023, Boosting Punctuation Restoration with Data Generation and Reinforcement "
        "Learning, Table 1 (REF; 304 M as that table gives it)",
    ),
    (
        "funnel-transformer-xlarge + POS fusion + SBS",
        400,
        84.3,
        "Shi et al. 2021, Incorporating External POS Tagger for Punctuation Restoration, Table 2, "
        "micro F1 (400 M: the encoder, as Lai et al. 2023, Table 1, give it)",
    ),
    (
        "RoBERTa-base, aggregated over windows",
        None,
        83.9,
        "Courtland et al. 2020, as the FFA paper's Table 1 lists it (`RoBERTa-base`); Shi et al. 2021, "
        "Table 2, gives it as mean F1 (`Aggregate`)",
    ),
    (
        "RoBERTa-base",
        None,
        80.3,
        "Alam et al. 2020, as Shi et al. 2021, Table 2, list it (roberta-base, `Bi-LSTM`), micro F1",
    ),
    (
        "CT-Transformer",
        None,
        74.9,
        "Chen et al. 2020, as Shi et al. 2021, Table 2, and the FFA paper's Table 1 list it",
    ),
    (
        "sherpa-onnx online CNN-BiLSTM",
        7.4,
        71.0,
        "You and Li 2024, A light-weight and efficient punctuation and word casing prediction model "
        "for on-device streaming ASR (arXiv:2407.13142), the model sherpa-onnx ships; no copy in "
        "shared/papers, not checked",
    ),
)

SETS = ("Ref", "ASR", "Conversation")
MODES = ("k=0", "k=1", "k=2", "k=4", "offline")
COLUMNS = ("params", "ms", "streams", *(f"{s} {m}" for s in SETS for m in MODES))
HEADS = {"params": "parameters (M)", "ms": "ms a word, k=2, CPU †", "streams": "streams a core §"}


@dataclass
class Row:
    """A row of the table: its cells (column: value), and which source gave each cell."""

    name: str
    cells: dict[str, float] = field(default_factory=dict)
    given_by: dict[str, str] = field(default_factory=dict)  # column: source label
    sources: list[str] = field(default_factory=list)  # one line per source: what it gave, where
    notes: list[str] = field(default_factory=list)  # disagreements between sources, and the like


def resolve(source: str, results: Path) -> Path | None:
    """The file or folder a source names: absolute, or under the results folder, the repository
    or the working directory; ``FILE@COMMIT``: a result file as it was at that commit (a benchmark
    keeps one current file, git its history); None where there is none."""
    if "@" in source:
        return from_git(*source.rsplit("@", 1))
    for path in (Path(source), results / source, ROOT / source, Path.cwd() / source):
        if path.exists():
            return path
    return None


def from_git(name: str, commit: str) -> Path | None:
    """benchmarks/results/NAME as it was at COMMIT, in a temporary folder (None: not in git here)."""
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:benchmarks/results/{name}"], capture_output=True
    )
    if shown.returncode:
        return None
    path = Path(tempfile.mkdtemp(prefix="streampunct-results-")) / name
    path.write_bytes(shown.stdout)
    return path


def checkpoint_params(folder: Path) -> int:
    """Parameters stored in a checkpoint's safetensors files, from their headers alone (8 bytes of
    header length, then the header's JSON): every tensor but the scales of int8 weights."""
    total = 0
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{folder}: no safetensors files to count parameters from")
    for path in files:
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        total += sum(math.prod(t["shape"]) for name, t in header.items() if not name.endswith(".scale"))
    return total


def where(payload: dict[str, Any]) -> str:
    """The machine and day a result was measured on, in a few words."""
    m = payload.get("machine") or {}
    device = payload.get("device")
    if device is None and m.get("gpu"):  # not recorded (conversation.py): either, on that machine
        name = f"{m.get('cpu')} with {m['gpu']}"
    else:
        name = str(m.get("gpu") if str(device).startswith("cuda") else m.get("cpu") or "")
    return ", ".join(x for x in (name, str(m.get("date") or "")) if x)


def read(path: Path, key: str | None) -> tuple[dict[str, float], list[str], str, str]:
    """What one source gives a row: its cells, notes, where it was measured, and what its key
    picks ("engine" or "model")."""
    if path.is_dir():
        return {"params": checkpoint_params(path) / 1e6}, [], "safetensors headers", ""
    payload = json.loads(path.read_text())
    cells: dict[str, float] = {}
    notes: list[str] = []
    picks = "model"
    if isinstance(payload.get("parameters"), (int, float)):  # recorded by the benchmark
        cells["params"] = payload["parameters"] / 1e6
    results = payload.get("results")
    if "streams_sustained" in payload:  # stream_capacity.py
        return {"streams": payload["streams_sustained"]}, [], where(payload), "model"
    if "per_push" in payload:
        timed, notes = latency(payload, key or "masked", path)
        cells.update(timed)
        picks = "engine"
    elif isinstance(results, dict):
        cells.update(conversation(results, key, path))
    elif isinstance(results, list) and "models" in payload:
        scored, notes = ablation(payload, key, path)
        cells.update(scored)
    elif isinstance(results, list):
        cells.update(accuracy(payload, key or "auto", path))
        picks = "engine"
    else:
        raise SystemExit(f"{path}: not a result file this table reads")
    return cells, notes, where(payload), picks


def accuracy(payload: dict[str, Any], engine: str, path: Path) -> dict[str, float]:
    """Micro-F1 by set and mode from an accuracy.py file, under one engine (offline has none)."""
    window_from: int | None = (payload.get("calibration") or {}).get("window_from")
    config = ROOT / str(payload.get("model", "")) / "config.json"
    if window_from is None and config.is_file():  # not recorded: the checkpoint's, if it is here
        window_from = json.loads(config.read_text()).get("window_from")
    if engine == "auto" and window_from is None:
        raise SystemExit(f"{path}: no window_from recorded; name the engine (FILE:window or FILE:masked)")
    cells = {}
    for r in payload["results"]:
        if r["mode"] not in MODES:
            continue
        if r["mode"] != "offline":
            k = int(r["mode"].removeprefix("k="))
            auto = "window" if window_from is not None and k >= window_from else "masked"
            if r["engine"] != (auto if engine == "auto" else engine):
                continue
        cells[f"{r['set']} {r['mode']}"] = r["micro_f1"]
    return cells


def conversation(results: dict[str, Any], key: str | None, path: Path) -> dict[str, float]:
    """Micro-F1 by set and mode of one model of a conversation.py file."""
    if key is None and len(results) == 1:
        key = next(iter(results))
    if key not in results:
        raise SystemExit(f"{path}: no model {key!r} (it has {', '.join(results)}); name one as FILE:LABEL")
    scores = results[key]
    return {
        f"{s} {mode}": v["micro_f1"] for s in SETS for mode, v in scores.get(s, {}).items() if mode in MODES
    }


def ablation(payload: dict[str, Any], key: str | None, path: Path) -> tuple[dict[str, float], list[str]]:
    """Micro-F1 by set and mode of one model of a pos_ablation.py file, and its stream cost (masked
    engine, the tag stream included) with a note of the threads it had."""
    models = {m["name"]: m for m in payload["models"]}
    if key not in models:
        raise SystemExit(f"{path}: no model {key!r} (it has {', '.join(models)}); name one as FILE:NAME")
    cells = {f"{r['set']} {r['mode']}": r["micro_f1"] for r in payload["results"] if r["model"] == key}
    cells = {c: v for c, v in cells.items() if c.split(" ", 1)[1] in MODES}
    stream = models[key].get("stream_ms")
    if not stream or str(payload.get("device", "cpu")) != "cpu":
        return cells, []
    cells["ms"] = stream["p50"]
    threads = (payload.get("machine") or {}).get("torch_threads")
    return cells, [f"{threads} torch threads, the tag stream included"]


def latency(payload: dict[str, Any], engine: str, path: Path) -> tuple[dict[str, float], list[str]]:
    """A stream_latency.py file's p50 compute per word at k=2 under one engine: a cell on the CPU, a
    note on a GPU; the other engine's in a note."""
    row = next((r for r in payload["per_push"] if r["lookahead"] == 2), None)
    if row is None:
        return {}, []
    if payload.get("engine") == "light":  # a light model's one engine
        return {"ms": row["p50_ms"]}, [f"{payload.get('threads')} torch threads"]
    p50 = {"masked": row.get("p50_ms"), "window": row.get("window_p50_ms")}
    if p50.get(engine) is None:
        raise SystemExit(f"{path}: no {engine} engine at k=2")
    other = "window" if engine == "masked" else "masked"
    also = (
        f"{other} engine {p50[other]:.1f} ms" if p50.get(other) is not None else f"{other} engine not timed"
    )
    if str(payload.get("device", "cpu")) == "cpu":
        return {"ms": p50[engine]}, [f"{payload.get('threads')} torch threads", also]
    return {}, [f"no cell, a GPU: {p50[engine]:.1f} ms a word at k=2", also]


def label(path: Path, source: str, key: str | None, picks: str) -> str:
    """How the table names a source: a file, with the model or engine its key picks; a checkpoint."""
    if path.is_dir():
        return source
    name = path.name + (f" at {source.rsplit('@', 1)[1]}" if "@" in source else "")
    if key is None:
        return name
    return f"{name} ({key} engine)" if picks == "engine" else f"{name}[{key}]"


def build(spec: list[tuple[str, str, str | None]], results: Path = RESULTS) -> list[Row]:
    """The rows, in the order their names first appear in spec. A source that is not on this machine
    is left out, with a note; a row with no cells at all is dropped."""
    rows: dict[str, Row] = {}
    for name, source, key in spec:
        row = rows.setdefault(name, Row(name))
        path = resolve(source, results)
        if path is None:
            row.notes.append(f"{source}: not here, left out")
            continue
        cells, notes, measured, picks = read(path, key)
        src = label(path, source, key, picks)
        gave = [c for c in cells if c not in row.cells]
        for c in cells:
            if c in row.cells and round(cells[c], 1) != round(row.cells[c], 1):
                row.notes.append(
                    f"{c}: {row.cells[c]:.1f} from {row.given_by[c]} kept, {src} has {cells[c]:.1f}"
                )
        for c in gave:
            row.cells[c] = cells[c]
            row.given_by[c] = src
        said = describe(gave) if gave else f"nothing new (the same {describe(list(cells))})" if cells else ""
        detail = "; ".join([*notes, measured])
        row.sources.append(f"{src}: " + (f"{said} ({detail})" if said else detail))
    return [r for r in rows.values() if r.cells]


def describe(columns: list[str]) -> str:
    """The cells a source gave, in a few words: "parameters", "Ref, ASR k=0/2/offline"."""
    columns = sorted(columns, key=COLUMNS.index)
    parts = [
        {"params": "parameters", "ms": "ms a word", "streams": "streams a core"}[c]
        for c in columns
        if c in HEADS
    ]
    by_set: dict[str, list[str]] = {}
    for c in columns:
        if c not in HEADS:
            s, mode = c.split(" ", 1)
            by_set.setdefault(s, []).append(mode.removeprefix("k="))
    groups: dict[str, list[str]] = {}
    for s, modes in by_set.items():
        groups.setdefault("/".join(modes), []).append(s)
    parts += [f"{', '.join(sets)} k={modes}" for modes, sets in groups.items()]
    return "; ".join(p.replace("k=offline", "offline") for p in parts)


def cell(x: float | None, column: str = "") -> str:
    return "" if x is None else f"{x:.0f}" if column == "streams" else f"{x:.1f}"


def markdown(rows: list[Row], anchors: tuple[tuple[str, float | None, float, str], ...] = ANCHORS) -> str:
    """The table (columns blank in every model row left out), the anchors as its last rows, and
    where each row's cells come from."""
    columns = [c for c in COLUMNS if any(c in r.cells for r in rows)]
    heads, seen = [], set()
    for c in columns:
        if c in HEADS:
            heads.append(HEADS[c])
            continue
        s, mode = c.split(" ", 1)
        heads.append(mode if s in seen else f"{s} {mode}")
        seen.add(s)
    lines = ["| model | " + " | ".join(heads) + " |", "|---|" + "---|" * len(columns)]
    for r in rows:
        name = f"**{r.name}**" if r.name.endswith("(shipped)") else r.name
        lines.append(f"| {name} | " + " | ".join(cell(r.cells.get(c), c) for c in columns) + " |")
    for i, (model, params, f1, _) in enumerate(anchors, 1):
        given = {"params": "" if params is None else f"{params:g}", "Ref offline": f"{f1:.1f}"}
        lines.append(f"| *{model}* [{i}] | " + " | ".join(given.get(c, "") for c in columns) + " |")
    notes = [
        "Micro-F1 by the IWSLT protocol on IWSLT2011 test2011 (Ref) and test2011asr (ASR), and on the held-out "
        "chit-chat conversations (Conversation, `chat_test.tsv`), at each k under the engine that `auto` "
        "takes for the checkpoint (its calibrated `window_from`). Blank: not measured.",
        "Parameters: the tensors in the checkpoint (int8 scales not counted); an earlier stage has the "
        "architecture of the shipped checkpoint it led to.",
    ]
    if "ms" in columns:
        notes.append(
            "† Compute per pushed word of one k=2 stream, p50, under the engine of the row's k=2 F1 "
            "(machine and threads below)."
        )
    if "streams" in columns:
        notes.append(
            "§ Live streams of 3 words a second at k=2 that one CPU core (1 torch thread) sustains "
            "through the batching scheduler with p99 lag under 200 ms (benchmarks/stream_capacity.py)."
        )
    if any("‡" in r.name for r in rows):
        notes.append(
            "‡ The POS ablation, continued from the default of 2026-11-22 (Part-of-speech tags, below): "
            "plain argmax, masked engine, no decision offsets; its cost includes the tag stream."
        )
    notes.append("*Italic*: published offline Ref micro-F1, cited below.")
    lines += ["", " ".join(notes), ""]
    lines += [
        "Where each row's cells come from (result files in benchmarks/results):",
        "",
    ]
    for r in rows:
        extra = "".join(f" {n}." for n in r.notes)
        lines.append(f"- {r.name}: " + "; ".join(r.sources) + "." + extra)
    lines += ["", "Anchors:", ""]
    lines += [f"{i}. {source}." for i, (_, _, _, source) in enumerate(anchors, 1)]
    return "\n".join(lines)


def parse_extra(spec: str) -> tuple[str, str, str | None]:
    """NAME=FILE or NAME=FILE:KEY (a checkpoint folder for FILE: its parameter count)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise SystemExit(f"--extra {spec!r}: expected NAME=FILE or NAME=FILE:KEY")
    source, colon, key = rest.rpartition(":")
    if not colon or "/" in key or key.endswith(".json"):
        return name, rest, None
    return name, source, key


def commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME=FILE[:KEY]",
        help="another source for row NAME (a new row after the others, or more cells for an existing "
        "one): a result JSON (KEY: its label, model or engine) or a checkpoint folder",
    )
    ap.add_argument("--readme", action="store_true", help="also rewrite the table in docs/results.md")
    args = ap.parse_args()
    extra = [parse_extra(s) for s in args.extra]
    for _, source, _ in extra:
        if resolve(source, RESULTS) is None:
            raise SystemExit(f"--extra: {source}: no such file or checkpoint")
    rows = build([*ROWS, *extra])
    table = markdown(rows)
    print(table)
    payload: dict[str, object] = {
        "command": "python benchmarks/model_table.py"
        + "".join(f' --extra "{s}"' for s in args.extra)
        + (" --readme" if args.readme else ""),
        "commit": commit(),
        "machine": machine(),
        "rows": [
            {"name": r.name, "cells": r.cells, "given_by": r.given_by, "sources": r.sources, "notes": r.notes}
            for r in rows
        ],
        "anchors": [
            {"model": m, "parameters_m": p, "ref_offline_micro_f1": f1, "source": s}
            for m, p, f1, s in ANCHORS
        ],
    }
    print(f"wrote {write_json('model_table.json', payload)}")
    if args.readme:
        update_readme("model-table", table)


if __name__ == "__main__":
    main()
