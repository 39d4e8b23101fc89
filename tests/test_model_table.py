"""benchmarks/model_table.py: the table built from hand-made result files has the cells they measured,
blank ones where they measured nothing, and the published anchors; no model is loaded."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from benchmarks.common import RESULTS
from benchmarks.lib.model_sources import build, checkpoint_params, resolve
from benchmarks.model_table import ANCHORS, ROWS, markdown, parse_extra


def report(micro_f1: float) -> dict[str, object]:
    return {"micro_f1": micro_f1, "macro_f1": 0.0, "ser": 0.0}


def accuracy_file(path: Path) -> None:
    """As accuracy.py writes it: Ref under both engines at k = 0 … 4 and offline, ASR at k=2 and
    offline only; auto turns to the window engine from k=1."""
    rows = [{"set": "Ref", "mode": "offline", "engine": "-", **report(70.0)}]
    for k in range(5):
        rows.append({"set": "Ref", "mode": f"k={k}", "engine": "masked", **report(40.0 + k)})
        rows.append({"set": "Ref", "mode": f"k={k}", "engine": "window", **report(50.0 + k)})
    rows.append({"set": "ASR", "mode": "k=2", "engine": "masked", **report(30.0)})
    rows.append({"set": "ASR", "mode": "k=2", "engine": "window", **report(31.0)})
    rows.append({"set": "ASR", "mode": "offline", "engine": "-", **report(60.04)})
    machine = {"cpu": "Test CPU", "gpu": None, "date": "2026-01-02"}
    payload = {"machine": machine, "device": "cpu", "model": "nowhere", "calibration": {"window_from": 1}}
    path.write_text(json.dumps({**payload, "results": rows}))


def conversation_file(path: Path) -> None:
    """As conversation.py writes it: two models, k=0, k=2 and offline."""
    after = {
        "model": "runs/after",
        "Conversation": {"k=0": report(45.0), "k=2": report(55.55), "offline": report(65.0)},
        "Ref": {"offline": report(99.0)},  # disagrees with the accuracy file, which comes first
    }
    before = {"model": "default", "Ref": {"k=2": report(44.0), "offline": report(66.0)}}
    machine = {"cpu": "Test CPU", "gpu": None, "date": "2026-01-03"}
    payload = {
        "machine": machine,
        "conversation_set": "chat_test.tsv",
        "results": {"before": before, "after": after},
    }
    path.write_text(json.dumps(payload))


def checkpoint(folder: Path) -> None:
    """A safetensors file with an int8 weight, its scales and a bias: 400 × 256 + 400 parameters."""
    tensors = {"w.q8": ("I8", [400, 256], 1), "w.scale": ("F16", [400, 8], 2), "b": ("F16", [400], 2)}
    header, offset = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        n = shape[0] * (shape[1] if len(shape) > 1 else 1) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    accuracy_file(tmp_path / "acc.json")
    conversation_file(tmp_path / "conv.json")
    checkpoint(tmp_path / "ckpt")
    return tmp_path


SPEC: list[tuple[str, str, str | None]] = [
    ("new (shipped)", "acc.json", "auto"),
    ("new (shipped)", "conv.json", "after"),
    ("new (shipped)", "ckpt", None),
    ("old", "conv.json", "before"),
    ("gone", "missing.json", None),  # not on this machine: no row
]


def table_rows(text: str) -> dict[str, list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return {
        cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)
    }


def test_rows_take_each_cell_from_the_first_source_that_measured_it(results):
    new, old = build(SPEC, results)
    assert (new.name, old.name) == ("new (shipped)", "old")
    assert new.cells["params"] == pytest.approx(102_800 / 1e6)
    # auto: masked at k=0, window from k=1; k=3 is not a column
    assert [new.cells[f"Ref {m}"] for m in ("k=0", "k=1", "k=2", "k=4", "offline")] == [40, 51, 52, 54, 70]
    assert new.cells["ASR k=2"] == 31.0 and "ASR k=0" not in new.cells and "ASR k=1" not in new.cells
    assert new.cells["Conversation k=2"] == 55.55
    assert new.cells["Ref offline"] == 70.0 and new.given_by["Ref offline"] == "acc.json (auto engine)"
    assert any("Ref offline: 70.0 from acc.json" in n and "99.0" in n for n in new.notes)
    assert old.cells == {"Ref k=2": 44.0, "Ref offline": 66.0}
    assert checkpoint_params(results / "ckpt") == 102_800


def test_the_table_has_the_cells_blanks_and_anchors(results):
    text = markdown(build(SPEC, results))
    rows = table_rows(text)
    head = rows.pop("model")
    # no row measured compute per word, ASR k=0/1/4 or Conversation k=1/4: those columns are left out
    assert head == [
        "parameters (M)",
        "Ref k=0", "k=1", "k=2", "k=4", "offline",
        "ASR k=2", "offline",
        "Conversation k=0", "k=2", "offline",
    ]  # fmt: skip
    assert rows["**new (shipped)**"] == ["0.1", "40.0", "51.0", "52.0", "54.0", "70.0", "31.0", "60.0", "45.0", "55.5", "65.0"]  # fmt: skip
    assert rows["old"] == ["", "", "", "44.0", "", "66.0", "", "", "", "", ""]
    for i, (model, params, f1, source) in enumerate(ANCHORS, 1):
        cells = rows[f"*{model}* [{i}]"]
        assert cells[head.index("offline")] == f"{f1:.1f}"  # the first "offline" is Ref's
        assert cells[0] == ("" if params is None else f"{params:g}")
        assert sum(bool(c) for c in cells) == 1 + (params is not None)
        assert f"{i}. {source}." in text
    assert "*FFA, two streams (BART-large, funnel-xlarge)* [1]" in text and "| 85.2 |" in text
    assert "- new (shipped): acc.json (auto engine): Ref k=0/1/2/4/offline; ASR k=2/offline" in text
    assert "conv.json[after]: Conversation k=0/2/offline" in text


def test_extra_sources_name_a_row_a_file_and_a_key():
    assert parse_extra("default, stage 8=accuracy_stage8.json") == (
        "default, stage 8",
        "accuracy_stage8.json",
        None,
    )
    assert parse_extra("s8=benchmarks/results/conv_s8.json:after") == (
        "s8",
        "benchmarks/results/conv_s8.json",
        "after",
    )
    assert parse_extra("s8=/runs/stage8/best") == ("s8", "/runs/stage8/best", None)
    with pytest.raises(SystemExit):
        parse_extra("no file")


def test_every_source_of_the_shipped_rows_is_in_the_checkout():
    rows = {r.name: r for r in build(list(ROWS))}
    for name in ("default, stage 8 (shipped)", "base, stage 2 (shipped)"):
        assert not [n for n in rows[name].notes if "not here" in n]
        assert all(
            f"{s} {m}" in rows[name].cells
            for s in ("Ref", "ASR")
            for m in ("k=0", "k=1", "k=2", "k=4", "offline")
        )
        assert all(f"Conversation {m}" in rows[name].cells for m in ("k=0", "k=2", "offline"))
    assert round(rows["default, stage 8 (shipped)"].cells["params"], 1) == 22.6


def test_a_source_at_a_commit_is_the_file_as_git_kept_it():
    """A benchmark keeps one current file; an earlier stage's row reads it at the commit where it
    was current (FILE@COMMIT)."""
    kept = resolve("accuracy.json@HEAD", RESULTS)
    assert kept is not None and kept.name == "accuracy.json"
    assert json.loads(kept.read_text()).keys() == json.loads((RESULTS / "accuracy.json").read_text()).keys()
    assert resolve("accuracy.json@no-such-commit", RESULTS) is None
