"""The sources of ``python -m benchmarks.model_table``: each result file (or checkpoint folder) read for
the cells it measured (accuracy, conversation, POS ablation, stream latency and capacity, parameters),
and the rows built from them."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS
from benchmarks.lib.doc_text import short_name

ROOT = Path(__file__).resolve().parents[2]

SETS = ("Ref", "ASR", "Conversation")
MODES = ("k=0", "k=1", "k=2", "k=4", "offline")
COLUMNS = ("params", "ms", "streams", *(f"{s} {m}" for s in SETS for m in MODES))
HEADS = {"params": "parameters (M)", "ms": "ms", "streams": "streams"}


@dataclass
class Row:
    """A row of the table: its cells (column: value), and which source gave each cell."""

    name: str
    cells: dict[str, float] = field(default_factory=dict)
    given_by: dict[str, str] = field(default_factory=dict)  # column: source label
    sources: list[str] = field(default_factory=list)  # one line per source: what it gave, where
    notes: list[str] = field(default_factory=list)  # disagreements between sources, and the like
    brief: list[tuple[str, str]] = field(default_factory=list)  # for the docs: (what a source gave, timed on)


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


def timed_on(payload: dict[str, Any], threads: object = None) -> str:
    """Where a timing was measured, in a few words: "AMD EPYC, 2 threads, 2026-11-22"."""
    m = payload.get("machine") or {}
    threads_text = f"{threads} thread{'s' * (threads != 1)}" if threads else ""
    return ", ".join(x for x in (short_name(m.get("cpu")), threads_text, str(m.get("date") or "")) if x)


def read(path: Path, key: str | None) -> tuple[dict[str, float], list[str], str, str, str]:
    """What one source gives a row: its cells, notes, where it was measured, what its key picks
    ("engine" or "model"), and where its timings were taken (:func:`timed_on`; "" for none)."""
    if path.is_dir():
        return {"params": checkpoint_params(path) / 1e6}, [], "safetensors headers", "", ""
    payload = json.loads(path.read_text())
    cells: dict[str, float] = {}
    notes: list[str] = []
    picks = "model"
    if isinstance(payload.get("parameters"), (int, float)):  # recorded by the benchmark
        cells["params"] = payload["parameters"] / 1e6
    results = payload.get("results")
    timing = ""
    if "streams_sustained" in payload:  # stream_capacity.py
        return {"streams": payload["streams_sustained"]}, [], where(payload), "model", timed_on(payload)
    if "per_push" in payload:
        timed, notes = latency(payload, key or "masked", path)
        cells.update(timed)
        picks, timing = "engine", timed_on(payload, payload.get("threads"))
    elif isinstance(results, dict):
        cells.update(conversation(results, key, path))
    elif isinstance(results, list) and "models" in payload:
        scored, notes = ablation(payload, key, path)
        cells.update(scored)
        timing = timed_on(payload, (payload.get("machine") or {}).get("torch_threads"))
    elif isinstance(results, list):
        cells.update(accuracy(payload, key or "auto", path))
        picks = "engine"
    else:
        raise SystemExit(f"{path}: not a result file this table reads")
    return cells, notes, where(payload), picks, timing


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
    name = path.name + (f"@{source.rsplit('@', 1)[1]}" if "@" in source else "")
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
        cells, notes, measured, picks, timing = read(path, key)
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
        if gave and not path.is_dir():  # a checkpoint gives parameters, as the table's note says
            row.brief.append((f"{src}: {describe(gave)}", timing if {"ms", "streams"} & set(gave) else ""))
    return [r for r in rows.values() if r.cells]


def describe(columns: list[str]) -> str:
    """The cells a source gave, in a few words: "parameters", "Ref, ASR k=0/2/offline"."""
    columns = sorted(columns, key=COLUMNS.index)
    parts = [{"params": "parameters", "ms": "ms", "streams": "streams"}[c] for c in columns if c in HEADS]
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
