"""What the recogniser heard at a word's end as evidence: its decoder's mark probabilities read from
the pass that runs, the fusion that decides with them, its fallback where they are missing, one computation for streams and predict(), and its fit on recorded speech."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from streampunct import Punctuator
from streampunct.errors import CheckpointError
from streampunct.hearing import INPUTS, MARK_INPUTS, SLOTS, SpeechFusion, inputs, slot_of
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.pipeline import call_to_json, calls_from_json
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.scoring import paired
from streampunct.speech.marks import MarkTokens, attach, word_marks
from streampunct.stream import Push
from streampunct.training.hearing import BLOCKS, Rows, fit
from streampunct.types import Cues, Word

TEXT = "so i think we should go now yeah okay what do you think don't you agree it's late".split()


@functools.cache
def model() -> Punctuator:
    """A random model with pause fusion (reading the recogniser's marks), no hearing yet."""
    torch.manual_seed(1)
    shape = dict(n_layer=2, n_head=2, n_embd=32, n_inner=64, block=4, context=6, dropout=0.0)
    cfg = ModelConfig(**shape, pause_hidden=8, pause_marks=True)
    return Punctuator(PunctModel(cfg).eval(), WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))


def period_fusion() -> SpeechFusion:
    """A fusion that marks PERIOD wherever the recogniser's decoder gave a period over a half."""
    fusion = SpeechFusion.identity()
    fusion.weights[:, 12, 2] = 20.0  # log P(PERIOD) -> the PERIOD logit
    fusion.weights[:, 10, 2] = 20.0 * np.log(2)  # with the marks there, P = 0.5 is where it wins
    return fusion


def heard(words: list[str], periods: set[int], marks: bool = True) -> list[Word]:
    out, clock = [], 0.0
    for i, w in enumerate(words):
        p = (0.0, 0.9, 0.0, 0.05) if i in periods else (0.01, 0.01, 0.0, 0.01)
        out.append(Word(w, round(clock, 3), round(clock + 0.25, 3), Cues(p if marks else None)))
        clock += 0.35
    return out


def with_hearing(fusion: SpeechFusion | None) -> Punctuator:
    p = model()
    return p.deciding_with(replace(p.decider, hearing=fusion))


def test_the_blocks_are_the_inputs_the_fusion_reads():
    assert MARK_INPUTS == 11 and INPUTS == BLOCKS["marks"].stop == BLOCKS["gated"].stop == 21


def test_the_gated_marks_are_the_marks_times_the_text_models_confidence():
    cues = Cues((0.1, 0.6, 0.05, 0.1))
    sure, unsure = np.array([8.0, 0.0, 0.0, 0.0]), np.zeros(4)
    a, b = inputs(sure, sure, None, cues), inputs(unsure, unsure, None, cues)
    assert np.allclose(a[BLOCKS["gated"]], a[11:16] * np.exp(a[:4].max()))
    assert np.allclose(b[BLOCKS["gated"]], b[11:16] / 4)  # four labels, equally likely
    assert not inputs(sure, sure, None, Cues(None))[BLOCKS["gated"]].any()


def test_a_fusion_fitted_before_the_gated_marks_loads_and_decides_as_it_did(tmp_path):
    fusion = period_fusion()
    fusion.save(tmp_path / "h.json")
    data = json.loads((tmp_path / "h.json").read_text())
    data["weights"] = np.array(data["weights"])[:, : INPUTS - 5].tolist()
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = SpeechFusion.load(tmp_path / "old.json")
    assert old.weights.shape == fusion.weights.shape and not old.weights[:, BLOCKS["gated"]].any()
    words = heard(TEXT, {3, 8})
    assert with_hearing(old).predict(words, 2) == with_hearing(fusion).predict(words, 2)


def test_the_text_prior_gives_the_text_models_decision_back():
    x = inputs(np.array([0.0, 2.0, 0.0, 0.0]), np.array([0.0, 0.0, 3.0, 0.0]), None, Cues(None))
    assert SpeechFusion.identity(0).logits(x[None], np.array([2]))[0].argmax() == 1
    assert SpeechFusion.identity().logits(x[None], np.array([2]))[0].argmax() == 2


def test_the_identity_fusion_decides_as_the_pause_fusion_does():
    words = heard(TEXT, {3, 8})
    plain = with_hearing(None).predict(words, 2)
    assert with_hearing(SpeechFusion.identity()).predict(words, 2) == plain


def test_the_decoders_period_decides_and_words_without_cues_keep_todays_path():
    periods = {3, 8, 12}
    p = with_hearing(period_fusion())
    labels = p.predict(heard(TEXT, periods), 2)
    assert [i for i, label in enumerate(labels) if label == "PERIOD"] == sorted(periods)
    bare = [Word(w.text, w.start, w.end) for w in heard(TEXT, periods)]
    assert p.predict(bare, 2) == with_hearing(None).predict(bare, 2)


def test_a_word_without_a_decoder_score_is_decided_on_the_rest():
    """A word whose pass gave no score (a word the recogniser's alignment split otherwise, a beam
    search, another policy): zeros and a flag of 0 in their place, and the fusion's decision on
    the text and the pause, here the pause fusion's."""
    fusion = period_fusion()
    words = heard(TEXT, {3}, marks=False)
    x = inputs(np.zeros(4), np.zeros(4), None, words[3].cues)
    assert not x[BLOCKS["marks"]].any()
    assert with_hearing(fusion).predict(words, 2) == with_hearing(None).predict(words, 2)
    assert with_hearing(fusion).predict(heard(TEXT, {3}), 2)[3] == "PERIOD"


@given(
    periods=st.sets(st.integers(0, len(TEXT) - 1)),
    scored=st.booleans(),
    k=st.sampled_from([0, 1, 2, 3]),
    engine=st.sampled_from(["masked", "window"]),
)
def test_a_stream_decides_as_predict_does_with_what_was_heard(periods, scored, k, engine):
    p = with_hearing(period_fusion())
    words = heard(TEXT, periods, marks=scored)
    s = p.stream(lookahead=k, engine=engine)
    finals = {}
    for i in range(0, len(words), 3):
        finals.update((e.index, e.label) for e in s.push(words[i : i + 3]) if e.final)
    finals.update((e.index, e.label) for e in s.finish() if e.final)
    assert [finals[i] for i in range(len(words))] == p.predict(words, k, engine)


def test_slots_are_the_lookahead_and_the_time_limit():
    assert [slot_of(a, False) for a in (0, 1, 2, 5, None)] == [0, 1, 2, 2, 2]
    assert slot_of(0, True) == slot_of(2, True) == len(SLOTS) - 1


def test_a_checkpoint_keeps_its_hearing_and_a_bad_one_is_refused(tmp_path):
    fusion = period_fusion()
    fusion.report = {"note": "a test"}
    fusion.save(tmp_path / "hearing.json")
    back = SpeechFusion.load(tmp_path / "hearing.json")
    assert np.allclose(back.weights, fusion.weights) and back.report == {"note": "a test"}
    data = json.loads((tmp_path / "hearing.json").read_text())
    data["weights"] = data["weights"][:2]
    (tmp_path / "hearing.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="hearing.json"):
        SpeechFusion.load(tmp_path / "hearing.json")
    (tmp_path / "hearing.json").write_text("{")
    with pytest.raises(CheckpointError, match="hearing.json"):
        SpeechFusion.load(tmp_path / "hearing.json")


def test_a_recorded_call_keeps_what_was_heard():
    words = heard(TEXT[:4], {3})
    call = Push(tuple(words[:3]), 1.5, tuple(words[3:]))
    back = calls_from_json([json.loads(json.dumps(call_to_json(call, 1.5)))])[0]
    assert isinstance(back, Push)
    assert [w.cues for w in back.words + back.tentative] == [w.cues for w in words]


# --- the decoder's marks ---------------------------------------------------------------------


@functools.cache
def whisper_tokenizer():
    from faster_whisper.tokenizer import Tokenizer
    from tokenizers import Tokenizer as HF

    from streampunct.speech import resolve_asr_model

    hf = HF.from_file(f"{resolve_asr_model('tiny.en')}/tokenizer.json")
    return Tokenizer(hf, False, task="transcribe", language="en")


def test_the_marks_are_read_at_each_words_end_with_its_mark_merged():
    tok = whisper_tokenizer()
    classes = MarkTokens.of(tok)
    assert {tok.encode(m)[0] for m in (",",)} <= set(classes.comma.tolist())
    assert {tok.encode(m)[0] for m in (".", "!", "...")} <= set(classes.period.tolist())
    assert tok.encode("?")[0] in classes.question
    written = [tok.timestamp_begin, *tok.encode(" So how are you? Fine, thanks."), tok.timestamp_begin + 50]
    vocabulary = tok.eot + 1600
    logits = np.full((len(written) + 1, vocabulary), -30.0, dtype=np.float32)
    for step, token in enumerate(written[1:] + [tok.eot], start=1):
        logits[step, token] = 0.0  # each step sure of what it wrote
    words = word_marks(tok, classes, written, list(logits))
    assert [w for w, _ in words] == ["So", "how", "are", "you?", "Fine,", "thanks."]
    marks = dict(words)
    assert marks["you?"][2] > 0.99 and marks["Fine,"][0] > 0.99 and marks["thanks."][1] > 0.99
    assert marks["how"][:3] == pytest.approx((0, 0, 0), abs=1e-6)
    assert marks["thanks."][3] < 0.01  # the step after "thanks" wrote "."; the timestamp came after


def test_attach_matches_the_passes_words_in_order_and_leaves_unmatched_ones_bare():
    words = [Word("so", 0, 0.2), Word("how", 0.2, 0.4), Word("are", 0.4, 0.5), Word("you?", 0.5, 0.8)]
    p = (0.1, 0.2, 0.3, 0.1)
    out = attach(words, [("So", p), ("how", None), ("you?", p)])
    assert [w.cues and w.cues.marks for w in out] == [p, None, None, p]
    assert out == words  # cues never change what a word is


# --- the fit -------------------------------------------------------------------------------


def test_the_fit_learns_the_evidence_and_its_fallback_left_out():
    """Decisions whose gold PERIOD shows in the decoder's period probability: the fit finds it, a
    fit without the marks cannot, and a word without marks is decided as the text says."""
    rng = np.random.default_rng(0)
    n = 1200
    gold = rng.choice(4, n, p=[0.7, 0.1, 0.15, 0.05])
    x = np.zeros((n, INPUTS), dtype=np.float32)
    x[:, :8] = np.log(0.25)
    x[:, 10] = 1.0
    x[:, 11:16] = np.log(0.01)
    x[:, 12] = np.where(gold == 2, np.log(0.8), np.log(0.02)) + rng.normal(0, 0.3, n)
    rows = Rows(x, rng.choice([1, 2, 3], n), gold, rng.integers(0, 4, n))
    fusion = fit(rows, rows.recording != 0)
    held = rows.recording == 0
    guess = fusion.logits(x[held], rows.slot[held]).argmax(-1)
    assert ((guess == 2) == (gold[held] == 2)).mean() > 0.95
    blind = fit(rows, rows.recording != 0, drop=["marks"])
    assert not blind.weights[:, BLOCKS["marks"]].any()
    bare = x[held].copy()
    bare[:, BLOCKS["marks"]] = 0.0
    assert (fusion.logits(bare, rows.slot[held]).argmax(-1) != 2).mean() > 0.8


def test_the_two_level_bootstrap_is_wider_where_recordings_differ():
    rng = np.random.default_rng(0)
    a, b = {}, {}
    for rec, gain in enumerate([8, -6, 7, -5]):  # recordings that disagree on which system wins
        for unit in range(20):
            tp = int(rng.integers(5, 9))
            a[rec, unit] = np.array([5, 60, tp + gain // 4, 2, 2])
            b[rec, unit] = np.array([5, 60, tp, 2, 2])
    flat = paired(a, b, 2000)["micro_f1"]["ci95"]
    nested = paired(a, b, 2000, nested=True)["micro_f1"]["ci95"]
    assert nested[1] - nested[0] > 1.5 * (flat[1] - flat[0])


def test_cues_are_not_part_of_a_words_identity():
    w = Word("so", 0.0, 0.2)
    assert replace(w, cues=Cues((0.1, 0.2, 0.3, 0.1))) == w


# --- the recogniser, on speech ---------------------------------------------------------------

SPEECH = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@pytest.mark.e2e
@SPEECH
def test_the_recognisers_words_carry_what_it_heard_and_the_same_words_without(tmp_path):
    """Streamed espeak-ng speech: every committed word has the decoder's four probabilities from
    the pass that committed it; a period Whisper wrote is one its decoder believed; with cues
    off, the same words, bare."""
    from streampunct.clients.file import load_audio
    from streampunct.speech import SAMPLE_RATE, StreamingRecognizer, load_whisper

    wav = tmp_path / "speech.wav"
    text = "Good morning and welcome back. Did you sleep well last night? I think it will rain."
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), text], check=True)
    audio = np.concatenate([load_audio(str(wav)), np.zeros(SAMPLE_RATE, np.float32)])
    whisper = load_whisper("tiny.en", "cpu")
    runs = {}
    for cues in (True, False):
        r = StreamingRecognizer(whisper, cues=cues)
        words = []
        for start in range(0, len(audio), SAMPLE_RATE // 2):
            r.feed(audio[start : start + SAMPLE_RATE // 2])
            while r.ready():
                words += r.process().committed
        runs[cues] = words + r.finish()
    assert [w.text for w in runs[True]] == [w.text for w in runs[False]]
    assert len(runs[True]) >= 12 and all(w.cues is None for w in runs[False])
    for w in runs[True]:
        assert w.cues is not None and w.cues.marks is not None, w
        assert len(w.cues.marks) == 4 and 0 <= sum(w.cues.marks) <= 1 + 1e-6
    ends = [w for w in runs[True] if w.text.endswith((".", "?"))]
    assert ends and all(max(w.cues.marks[1:3]) > 0.3 for w in ends)


def test_calibrate_fits_the_hearing_on_recordings_and_the_checkpoint_decides_with_it(tmp_path, capsys):
    """``streampunct calibrate --speech REC... --hearing``: a fusion fitted on recorded streams
    whose reference sentence ends show in the decoder's period probability, written beside the
    checkpoint, read back by Punctuator.load and deciding there; its report holds the left-out
    figures and the ablation."""
    import shutil as sh

    from streampunct.cli import main

    ckpt = tmp_path / "ckpt"
    model().model.save(ckpt, dtype=torch.float32)
    model().decider.save_pauses(ckpt)
    sh.copy(DEFAULT_CHECKPOINT / "vocab.txt", ckpt / "vocab.txt")
    rng = np.random.default_rng(0)
    paths = []
    for n in range(2):
        words = [TEXT[i] for i in rng.integers(0, len(TEXT), 240)]
        ends = {i for i in range(len(words)) if rng.random() < 0.2}
        timed = heard(words, ends)
        text = " ".join(w + ("." if i in ends else "") for i, w in enumerate(words))
        calls = [call_to_json(Push(tuple(timed[i : i + 4]), None, ())) for i in range(0, len(timed), 4)]
        rec = {"text": text, "streaming": {"tiny.en": {"calls": calls + [{"finish": True}]}}}
        paths.append(tmp_path / f"rec{n}.json")
        paths[-1].write_text(json.dumps(rec))
    argv = ["calibrate", "--model", str(ckpt), "--speech", *map(str, paths), "--hearing", "--lookaheads", "2"]
    assert main(argv) == 0
    report = json.loads((ckpt / "hearing.json").read_text())["report"]
    assert set(report["ablation"]) == set(BLOCKS)
    assert report["k=2"]["left_out"]["micro_f1"] > 90 > report["ablation"]["marks"]["micro_f1"]
    p = Punctuator.load(ckpt, device="cpu")
    assert p.decider.hearing is not None
    words = heard(TEXT, {4, 9})
    labels = p.predict(words, 2)[:-1]  # the last word, with nothing ahead, is slot 0's: not fitted here
    assert [i for i, label in enumerate(labels) if label == "PERIOD"] == [4, 9]


@pytest.mark.parametrize(
    "marks",
    [
        (0.1, 0.2),
        (0.5, 0.5, 0.5, 0.0),
        (float("nan"), 0, 0, 0),
        (-0.1, 0, 0, 0),
        [0.1, 0.2, 0.3, 0.1],
        ("a", 0, 0, 0),
    ],
)
def test_bad_cues_are_a_clear_error(marks):
    from streampunct.errors import InputError

    with pytest.raises(InputError, match="cues.marks"):
        Cues(marks)


def test_a_step_sure_of_one_class_gives_probabilities_a_word_accepts():
    """A decoder sure of a segment's end sums its probabilities to 1 + a rounding error: the
    word's cues take it (the server once closed a stream on it)."""
    tok = whisper_tokenizer()
    classes = MarkTokens.of(tok)
    logits = np.full(tok.eot + 1600, -1e4, dtype=np.float32)
    for token in (tok.eot, tok.eot + 5, tok.eot + 9):
        logits[token] = 0.0
    p = classes.probabilities(logits)
    assert p[3] == pytest.approx(1.0) and all(0 <= x <= 1 for x in p)
    assert Cues(p).marks == p
    assert Cues((0.0, 0.0, 0.0, 1.0000000000000002)).marks[3] > 1.0  # a rounding error is no error
