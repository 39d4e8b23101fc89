"""One table of every model and training variant, from the results already saved: parameters, compute
per word, micro-F1 on IWSLT2011 Ref and ASR and on held-out conversation, beside published anchors.

    python -m benchmarks.model_table [--extra "NAME=FILE[:KEY]" ...] [--readme | --docs-only]

Measures nothing and loads no model: it reads the JSON files in benchmarks/results (accuracy.py,
conversation.py, pos_ablation.py and stream_latency.py write them) and counts parameters from the
headers of a checkpoint's safetensors files. ROWS says which file gives which row. ``--extra`` adds
a source without editing code, for a row of its own or an existing one (a later training stage:
``--extra "default, stage 8=accuracy_stage8.json" --extra "default, stage 8=conversation_stage8.json:after"
--extra "default, stage 8=/path/to/checkpoint"``). Writes benchmarks/results/model_table.json and,
with --readme, the model-table section of docs/results.md (--docs-only: that section alone).
"""

from __future__ import annotations

import argparse
from collections import Counter

from benchmarks.common import RESULTS, machine, update_readme, write_json
from benchmarks.lib.doc_text import KEEP, WIDTH, table, wrap
from benchmarks.lib.model_sources import COLUMNS, HEADS, Row, build, resolve

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
    ("no POS ‡", "pos_ablation.json", "no POS"),  # ‡: the POS ablation
    ("no POS ‡", DEFAULT, None),
    ("random POS ‡", "pos_ablation.json", "random POS"),
    ("POS fusion ‡", "pos_ablation.json", "POS fusion"),
    ("POS fusion, EWT tagger ‡", "pos_ablation.json", "POS fusion, EWT-tuned tagger"),
)

# Published offline micro-F1 on IWSLT2011 test Ref: (model, parameters in M where the source gives
# them, micro-F1, source). Checked against the papers in shared/papers where there is a copy. The docs
# list each as "N. source." on one line: at most 120 characters.
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
        "Learning, Table 1, REF",
    ),
    (
        "funnel-transformer-xlarge + POS fusion + SBS",
        400,
        84.3,
        "Shi et al. 2021, Incorporating External POS Tagger for Punctuation Restoration, Table 2, "
        "micro F1 (400 M: [2])",
    ),
    (
        "RoBERTa-base, aggregated over windows",
        None,
        83.9,
        "Courtland et al. 2020, in the FFA paper's Table 1 (`RoBERTa-base`); Shi et al. 2021, Table 2: "
        "mean F1 (`Aggregate`)",
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
        "You and Li 2024 (arXiv:2407.13142), the model sherpa-onnx ships; not in shared/papers, not checked",
    ),
)


def cell(x: float | None, column: str = "") -> str:
    return "" if x is None else f"{x:.0f}" if column == "streams" else f"{x:.1f}"


def markdown(rows: list[Row], anchors: tuple[tuple[str, float | None, float, str], ...] = ANCHORS) -> str:
    """The table (columns blank in every model row left out), the anchors as its last rows, and
    which source gave each row's cells (every source, and where they disagree: model_table.json)."""
    columns = [c for c in COLUMNS if any(c in r.cells for r in rows)]
    heads, seen = [], set()
    for c in columns:
        if c in HEADS:
            heads.append(HEADS[c])
            continue
        s, mode = c.split(" ", 1)
        heads.append(mode if s in seen else f"{s} {mode}")
        seen.add(s)
    body = [
        [
            f"**{r.name}**" if r.name.endswith("(shipped)") else r.name,
            *(cell(r.cells.get(c), c) for c in columns),
        ]
        for r in rows
    ]
    for i, (model, params, f1, _) in enumerate(anchors, 1):
        given = {"params": "" if params is None else f"{params:g}", "Ref offline": f"{f1:.1f}"}
        body.append([f"*{model}* [{i}]", *(given.get(c, "") for c in columns)])
    lines = table(["model", *heads], body)
    timings = Counter(t for r in rows for _, t in r.brief if t)
    usual = timings.most_common(1)[0][0] if timings else ""
    notes = [
        "Micro-F1 (IWSLT protocol) on IWSLT2011 test2011 (Ref), test2011asr (ASR) and held-out chit-chat "
        "(Conversation), each k under the engine `auto` takes; blank: not measured. Parameters: the checkpoint's "
        "tensors, int8 scales not counted."
    ]
    if "ms" in columns:
        notes.append("ms: compute per pushed word of a k=2 stream, p50, CPU.")
    if "streams" in columns:
        notes.append(
            "streams: live streams of 3 words/s at k=2 one CPU core sustains with p99 lag under 200 ms."
        )
    if usual:
        notes.append(f"Timed on {usual} where the sources below do not say.")
    if any("‡" in r.name for r in rows):
        notes.append(
            "‡ The POS ablation (below), from the default of 2026-11-22: plain argmax, masked engine, no "
            "offsets; its cost includes the tag stream."
        )
    notes.append(
        "*Italic*: published offline Ref micro-F1. Sources by row, in benchmarks/results (`FILE@COMMIT`: as git kept it):"
    )
    lines += ["", *wrap(" ".join(notes))]
    for r in rows:
        gave = [text + (f" ({t})" if t and t != usual else "") for text, t in r.brief]
        gave = [g.replace(" ", KEEP) if len(g) < WIDTH - 2 else g for g in gave]  # a source's part: one line
        gone = [n for n in r.notes if n.endswith("not here, left out")]
        lines += wrap(f"- {r.name}: " + "; ".join([*gave, *gone]) + ".", "  ")
    lines += [""]
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
    ap.add_argument(
        "--docs-only", action="store_true", help="rewrite the table in docs/results.md, not model_table.json"
    )
    args = ap.parse_args()
    extra = [parse_extra(s) for s in args.extra]
    for _, source, _ in extra:
        if resolve(source, RESULTS) is None:
            raise SystemExit(f"--extra: {source}: no such file or checkpoint")
    rows = build([*ROWS, *extra])
    text = markdown(rows)
    print(text)
    if args.docs_only:
        update_readme("model-table", text)
        return
    payload: dict[str, object] = {
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
        update_readme("model-table", text)


if __name__ == "__main__":
    main()
