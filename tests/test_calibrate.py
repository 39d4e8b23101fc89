"""Decision offsets per lookahead: the tuning, where decisions apply them, and `calibrate`."""

import copy
import json
import random
import shutil

import pytest
import torch

from streampunct import CheckpointError, Punctuator
from streampunct.cli import main
from streampunct.engines import make_engine, token_logits, window_logits
from streampunct.metrics import score
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.stream import Word
from streampunct.text import LABELS, normalize_text
from streampunct.training.calibrate import LOOKAHEADS, _micro_f1, choose_window_from, tune_offsets

from .test_stream import run_stream, varied_words

# One row per lookahead k = 0 .. 4, then offline: each row pushes a different mark up
OFFSETS = ((0, 3, 0, 0), (0, 0, 3, 0), (0, 0, 0, 3), (0, 3, 3, 0), (0, 0, 3, 3), (0, -1, 0, 0))
# The window engine's, k = 0 .. 4
WINDOW_OFFSETS = ((0, 0, 3, 3), (0, 3, 0, 3), (0, 3, 0, 0), (0, 0, 0, 3), (0, 0, 3, 0))


def test_tuning_metric_is_the_iwslt_micro_f1():
    rng = random.Random(0)
    gold = [rng.choice(LABELS[:2] + LABELS) for _ in range(500)]
    pred = [rng.choice(LABELS[:3] + LABELS) for _ in range(500)]
    ids = {label: i for i, label in enumerate(LABELS)}
    fast = _micro_f1(torch.tensor([ids[x] for x in pred]), torch.tensor([ids[x] for x in gold]))
    assert fast == pytest.approx(score(gold, pred).micro_f1, abs=1e-9)


def test_tuning_finds_the_offsets_a_shy_model_needs():
    """Logits that know the mark but hold it 1.5 below O: offsets near +1.5 recover it."""
    torch.manual_seed(0)
    gold = torch.randint(0, 4, (2000,))
    logits = torch.nn.functional.one_hot(gold, 4).float() * 2 + torch.randn(2000, 4) * 0.3
    logits[:, 1:] -= 3.5  # every mark looks less likely than O
    before = _micro_f1(logits.argmax(-1), gold)
    offsets, after = tune_offsets(logits, gold)
    assert before < 10 and after > 95
    assert offsets[0] == 0 and all(1.5 < x < 3.0 for x in offsets[1:])


@pytest.fixture(scope="module")
def biased() -> Punctuator:
    """A tiny random model whose offsets differ by lookahead, so each decision shows its row."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=6, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0)
    model = PunctModel(cfg).eval()
    model.set_label_bias(OFFSETS, WINDOW_OFFSETS)
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))


@pytest.mark.parametrize("engine", ["masked", "window"])
def test_each_lookahead_decides_with_its_own_row(biased, engine):
    tokens, _ = normalize_text(varied_words(80, seed=1))
    m = biased.model
    modes = LOOKAHEADS if engine == "masked" else LOOKAHEADS[:-1]
    rows = OFFSETS if engine == "masked" else WINDOW_OFFSETS
    for k, row in zip(modes, rows):
        plain = token_logits(m, biased.pieces, tokens, k, engine=engine)
        m.set_label_bias(())
        raw = token_logits(m, biased.pieces, tokens, k, engine=engine)
        m.set_label_bias(OFFSETS, WINDOW_OFFSETS)
        stop = len(tokens) - (k or 0)  # the last k tokens see fewer words ahead: other rows
        torch.testing.assert_close(plain[:stop], raw[:stop] + torch.tensor(row, dtype=torch.float))
    # beyond k = 4: k = 4's row
    assert make_engine(m, engine, 9).offsets(torch.zeros(4), 9).tolist() == list(rows[4])


@pytest.mark.parametrize("engine", ["masked", "window"])
@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_a_biased_stream_equals_predict(biased, k, engine):
    words = varied_words(600, seed=30 + k)
    expected = biased.predict(words, lookahead=k, engine=engine)
    assert run_stream(biased.stream(lookahead=k, engine=engine), words, seed=k) == expected
    assert len(set(expected)) >= 2


@pytest.mark.parametrize("engine", ["masked", "window"])
def test_a_time_limit_decides_with_the_row_of_the_lookahead_it_had(biased, engine):
    """k=2, but "so" runs out of time with one word ahead: row k=1 decides."""
    s = biased.stream(lookahead=2, max_delay_ms=500, engine=engine)
    words = [Word("so", 0.0, 1.0), Word("we", 1.0, 1.2), Word("left", 1.6, 2.0)]
    finals = [e for e in s.push(words) if e.final]
    assert finals[0].index == 0
    m = biased.model
    ids = biased.pieces.encode(["so", "we"])
    m.set_label_bias(())
    raw = window_logits(m, ids, 0, 1, engine=engine)
    m.set_label_bias(OFFSETS, WINDOW_OFFSETS)
    row = (OFFSETS if engine == "masked" else WINDOW_OFFSETS)[1]
    assert finals[0].label == LABELS[int((raw + torch.tensor(row, dtype=torch.float)).argmax())]


def dev_file(path, text: str) -> list[str]:
    """A word<TAB>LABEL file of ``text`` (a label name after a word marks it); returns its lines."""
    lines: list[str] = []
    for w in text.split():
        if w in LABELS:
            lines[-1] = lines[-1].split("\t")[0] + f"\t{w}"
        else:
            lines.append(f"{w}\tO")
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_calibrate_command_rewrites_the_config_only(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEFAULT_CHECKPOINT, ckpt)
    weights = (ckpt / "model.safetensors").read_bytes()
    dev = tmp_path / "dev"
    dev_file(
        dev,
        "so what did you do today QUESTION i went home PERIOD and then well i slept COMMA a lot PERIOD " * 12,
    )
    assert main(["calibrate", "--dev", str(dev), "--model", str(ckpt), "--device", "cpu"]) == 0
    assert (ckpt / "model.safetensors").read_bytes() == weights
    cfg = json.loads((ckpt / "config.json").read_text())
    rows, window_rows = cfg["label_bias"], cfg["window_bias"]
    assert len(rows) == len(LOOKAHEADS) and all(len(r) == 4 and r[0] == 0 for r in rows)
    assert len(window_rows) == len(LOOKAHEADS) - 1 and all(len(r) == 4 and r[0] == 0 for r in window_rows)
    report = json.loads((ckpt / "calibration.json").read_text())
    windows = [f"k={k} window" for k in range(5)]
    assert [m["mode"] for m in report["modes"]] == ["k=0", "k=1", "k=2", "k=3", "k=4", "offline", *windows]
    assert all(m["calibrated"] >= m["dev_micro_f1"] for m in report["modes"])
    same = {e: {k: m[key] for k, m in enumerate(report["modes"][6:])} for e, key in
            (("masked", "masked_same_words"), ("window", "calibrated"))}  # fmt: skip
    assert report["window_from"] == cfg["window_from"] == choose_window_from(**same)
    p = Punctuator.load(ckpt, device="cpu")
    assert p.model.cfg.label_bias == tuple(tuple(r) for r in rows)
    assert p.model.cfg.window_bias == tuple(tuple(r) for r in window_rows)
    assert p.model.cfg.window_from == cfg["window_from"]


def test_calibrate_offline_only_retunes_the_offline_offsets_and_keeps_the_rest(tmp_path, capsys):
    """calibrate --offline-only: the offline row is tuned on the new dev words (what tune_offsets
    makes of the plain offline logits), every other offset and the weights stay, and the report
    keeps the full calibration beside offline_retuned."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEFAULT_CHECKPOINT, ckpt)
    before = json.loads((ckpt / "config.json").read_text())
    report_before = json.loads((ckpt / "calibration.json").read_text())
    text = "well i think so COMMA but what about you QUESTION we left early PERIOD it rained PERIOD "
    lines = dev_file(tmp_path / "dev", text * 15)
    args = [
        "calibrate",
        "--dev",
        str(tmp_path / "dev"),
        "--model",
        str(ckpt),
        "--device",
        "cpu",
        "--offline-only",
    ]
    assert main(args) == 0
    after = json.loads((ckpt / "config.json").read_text())
    assert after["label_bias"][:-1] == before["label_bias"][:-1]
    assert after["window_bias"] == before["window_bias"] and after["window_from"] == before["window_from"]
    p = Punctuator.load(DEFAULT_CHECKPOINT, device="cpu")
    p.model.set_label_bias(())
    tokens = [line.split("\t")[0] for line in lines]
    gold = torch.tensor([LABELS.index(line.split("\t")[1]) for line in lines])
    offsets, f1 = tune_offsets(token_logits(p.model, p.pieces, tokens, None, engine="masked"), gold)
    assert after["label_bias"][-1] == offsets
    report = json.loads((ckpt / "calibration.json").read_text())
    assert report["modes"] == report_before["modes"]
    assert report["offline_retuned"] == {
        "dev": "dev",
        "words": len(tokens),
        "offsets": offsets,
        "dev_micro_f1": round(f1, 2),
    }
    tiny = tmp_path / "plain"
    shutil.copytree(DEFAULT_CHECKPOINT, tiny)
    plain = json.loads((tiny / "config.json").read_text())
    (tiny / "config.json").write_text(json.dumps({**plain, "label_bias": [], "window_bias": []}))
    assert main([*args[:4], str(tiny), *args[5:]]) != 0  # nothing calibrated to keep
    assert "calibrate every mode first" in capsys.readouterr().err


def test_window_from_is_where_the_window_engine_stays_ahead():
    masked = {0: 45.0, 1: 60.0, 2: 66.0, 3: 69.0, 4: 71.0}
    assert choose_window_from(masked, {0: 39.0, 1: 61.0, 2: 69.0, 3: 70.0, 4: 72.0}) == 1
    assert choose_window_from(masked, {0: 49.0, 1: 64.0, 2: 72.0, 3: 74.0, 4: 73.0}) == 0
    assert choose_window_from(masked, {0: 49.0, 1: 59.0, 2: 69.0, 3: 70.0, 4: 72.0}) == 2  # stays ahead
    assert choose_window_from(masked, {0: 40.0, 1: 59.0, 2: 65.0, 3: 68.0, 4: 70.0}) == 5  # never


def test_auto_follows_the_checkpoints_window_from(tiny):
    from streampunct.engines import resolve_engine

    m = copy.deepcopy(tiny.model)
    assert [resolve_engine(m, "auto", k) for k in (0, 1, 2)] == ["masked", "window", "window"]
    m.set_label_bias((), (), window_from=0)
    assert [resolve_engine(m, "auto", k) for k in (0, 1, None)] == ["window", "window", "masked"]
    m.set_label_bias((), (), window_from=3)
    assert [resolve_engine(m, "auto", k) for k in (2, 3)] == ["masked", "window"]
    assert resolve_engine(m, "window", 0) == "window"  # an explicit engine is kept


def test_calibrate_needs_dev_words(tmp_path):
    (tmp_path / "empty").write_text("")
    assert main(["calibrate", "--dev", str(tmp_path / "empty"), "--model", str(tmp_path)]) != 0


def test_a_malformed_label_bias_is_a_clear_error(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEFAULT_CHECKPOINT, ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["label_bias"] = [[0, 1, 1]]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="label_bias needs a row of 4 offsets"):
        Punctuator.load(ckpt, device="cpu")
    cfg["label_bias"], cfg["window_bias"] = [[0, 1, 1, 1]] * 6, [[0, 1]]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="window_bias needs a row of 4 offsets"):
        Punctuator.load(ckpt, device="cpu")


def _recorded_speech(text: str, seconds_a_word: float = 0.4) -> list[dict]:
    """A recognised stream as the caption pipeline records it: the words of ``text`` with times
    (a pause after each sentence), lower case, no marks, pushed three at a time, then the end."""
    words, clock = [], 0.0
    for token in text.split():
        words.append(
            {"text": token.strip(",.?").lower(), "start": round(clock, 3), "end": round(clock + 0.3, 3)}
        )
        clock += seconds_a_word + (0.6 if token[-1] in ".?" else 0.0)
    calls = [
        {"push": words[i : i + 3], "now": words[min(i + 2, len(words) - 1)]["end"], "tentative": []}
        for i in range(0, len(words), 3)
    ]
    return [*calls, {"finish": True}]


def test_calibrate_speech_tunes_the_pause_fusions_offsets_and_nothing_else(tmp_path, capsys):
    """calibrate --speech: on recordings of recognised speech (their calls and references), the
    fusion's offsets for the slots with words ahead are tuned on the decisions of k=2 streams, with
    the recogniser's marks and without, pooled (each slot's micro-F1 no lower in sample); the
    report says what each recording left out of its own tuning scores; only pauses.safetensors and
    calibration.json change."""
    from safetensors.torch import load_file

    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEFAULT_CHECKPOINT, ckpt)
    before = {name: (ckpt / name).read_bytes() for name in ("model.safetensors", "config.json")}
    text = (
        "so what did you do today? i went home. and then, well, i slept a lot. it rained, so we stayed in. "
    )
    cache = tmp_path / "speech"
    cache.mkdir()
    for n in range(3):
        rec = {"text": text * (n + 2), "streaming": {"tiny.en": {"calls": _recorded_speech(text * (n + 2))}}}
        (cache / f"r{n}.json").write_text(json.dumps(rec))
    assert main(["calibrate", "--speech", str(cache), "--model", str(ckpt), "--device", "cpu"]) == 0
    assert {name: (ckpt / name).read_bytes() for name in before} == before
    report = json.loads((ckpt / "calibration.json").read_text())["speech"]
    assert report["recordings"] == ["r0", "r1", "r2"] and report["lookaheads"] == [2]
    assert report["slots"] == [1, 2]  # slot 0 (nothing ahead) is left as trained
    assert all(after >= before for before, after in report["slot_micro_f1_before_after"].values())
    for marks in ("on", "off"):  # the words with the recogniser's marks and without, scored left out
        line = report[f"k=2 marks={marks}"]
        assert line["decisions"] >= 50 and 0 <= line["micro_f1_left_out"] <= 100
    offsets = load_file(str(ckpt / "pauses.safetensors"))["pause_fusion.offsets"]
    for slot in report["slots"]:
        assert offsets[slot].tolist() == pytest.approx(report["offsets"][str(slot)], abs=1e-6)
    shipped = load_file(str(DEFAULT_CHECKPOINT / "pauses.safetensors"))["pause_fusion.offsets"]
    assert torch.equal(offsets[0], shipped[0]) and torch.equal(offsets[3:], shipped[3:])  # the others stay
