"""Pause fusion: word times as evidence, within the lookahead bound, optional, and one computation
for streams and predict()."""

from __future__ import annotations

import functools
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from streampunct import Punctuator
from streampunct.decision import places
from streampunct.errors import InputError
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.prosody import (
    MARK_FEATURES,
    N_FEATURES,
    pause_features,
    synthetic_marks,
    synthetic_times,
)
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.stream import Word
from streampunct.text import mark_of

TEXT = "so i think we should go now yeah okay what do you think don't you agree it's late".split()


@functools.cache
def timed_model(marks: bool = False, continued: bool = False) -> Punctuator:
    """A random model with pause fusion whose correction is large, so that pauses change labels;
    with ``marks``, the fusion also reads the recogniser's own marks (and with ``continued``, a
    sentence-end mark followed by a word in lower case)."""
    torch.manual_seed(1)
    shape = dict(n_layer=2, n_head=2, n_embd=32, n_inner=64, block=4, context=6, dropout=0.0)
    cfg = ModelConfig(**shape, pause_hidden=8, pause_marks=marks, pause_continued=continued)
    p = Punctuator(PunctModel(cfg).eval(), WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))
    with torch.no_grad():
        p.decider.pause_fusion.out.weight.normal_(0, 3.0)
    return p


def timed(words, gaps, marks=None, capitals=None) -> list[Word]:
    out, clock = [], 0.0
    for w, gap, mark, capital in zip(
        words, gaps, marks or [""] * len(words), capitals or [False] * len(words)
    ):
        clock += gap
        out.append(Word((w.capitalize() if capital else w) + mark, round(clock, 3), round(clock + 0.25, 3)))
        clock += 0.25
    return out


def test_features_read_only_what_the_decision_may_see():
    a, b, c = Word("hello", 0.0, 0.4), Word("there", 1.4, 1.7), Word("friend", 1.8, 2.0)
    seen = pause_features(b, a, c, last_of_word=True, first_of_word=True)
    assert len(seen) == N_FEATURES
    assert seen[0] == 1.0 and seen[1] == pytest.approx(np.log1p(1.0))  # 0.1 s after "there"
    assert seen[2] == 1.0 and seen[3] == pytest.approx(np.log1p(10.0))  # 1 s before it
    unseen = pause_features(b, a, None, last_of_word=True, first_of_word=True)
    assert unseen[0] == 0.0 and unseen[1] == 0.0  # k=0: the next word is not there yet
    inside = pause_features(Word("don't", 0.0, 0.3), a, c, last_of_word=False, first_of_word=True)
    assert inside[0] == 1.0 and inside[1] == 0.0  # "do" of "do n't": no pause inside a word
    assert pause_features(Word("hello"), a, c, True, True) is None  # no times: no evidence


def test_the_recognisers_own_mark_is_a_feature_of_the_words_last_token():
    a, c = Word("so", 0.0, 0.2), Word("okay", 1.0, 1.2)
    for text, onehot in [
        ("Yeah.", [0, 1, 0]),
        ("yeah", [0, 0, 0]),
        ("Really?", [0, 0, 1]),
        ("well,", [1, 0, 0]),
    ]:
        features = pause_features(Word(text, 0.3, 0.6), a, None, True, True, marks=True)
        assert len(features) == N_FEATURES + MARK_FEATURES and features[N_FEATURES:] == onehot
        assert pause_features(Word(text, 0.3, 0.6), a, None, True, True)[:N_FEATURES] == features[:N_FEATURES]
    inside = pause_features(
        Word("don't.", 0.3, 0.6), a, c, last_of_word=False, first_of_word=True, marks=True
    )
    assert inside[N_FEATURES:] == [0, 0, 0]  # "do" of "don't.": the mark is after "n't"


def test_a_sentence_end_the_recogniser_went_on_from_in_lower_case_is_a_feature_once_seen():
    before, word = Word("so", 0.0, 0.2), Word("concerned.", 0.3, 0.6)
    width = N_FEATURES + MARK_FEATURES + 1
    for own, after, expected in [
        ("concerned.", Word("differs", 0.7, 1.0), 1.0),  # a later pass went on with the sentence
        ("concerned?", Word("and", 0.7, 1.0), 1.0),
        ("concerned.", Word("Printing", 0.7, 1.0), 0.0),  # a new sentence
        ("concerned.", Word("I", 0.7, 1.0), 0.0),
        ("concerned.", Word("2006", 0.7, 1.0), 0.0),
        ("concerned,", Word("differs", 0.7, 1.0), 0.0),  # not a sentence end
        ("concerned", Word("differs", 0.7, 1.0), 0.0),
        ("concerned.", None, 0.0),  # k=0: the word after is not seen yet
    ]:
        features = pause_features(
            replace(word, text=own), before, after, True, True, marks=True, continued=True
        )
        assert len(features) == width and features[-1] == expected, (own, after)
    inside = pause_features(Word("don't.", 0.3, 0.6), before, Word("go", 0.7, 0.9), False, True, True, True)
    assert inside[-1] == 0.0  # "do" of "don't.": the mark is after "n't"


def test_marks_count_at_k0_and_can_be_turned_off():
    p = timed_model(marks=True)
    gaps = [0.1] * len(TEXT)
    plain = timed(TEXT, gaps)
    marked = timed(TEXT, gaps, [".", "?", ",", ""] * 5)
    assert p.predict(marked, 0) != p.predict(plain, 0)  # a mark is known when its word arrives
    assert p.predict(marked, 0, pauses=False) == p.predict(TEXT, 0)
    assert timed_model().predict(marked, 0) == timed_model().predict(TEXT, 0)  # pauses alone: not at k=0


def test_a_checkpoint_keeps_its_pause_fusion(tmp_path):
    p = timed_model()
    p.model.save(tmp_path)
    p.decider.save_pauses(tmp_path)
    (tmp_path / "vocab.txt").write_bytes((DEFAULT_CHECKPOINT / "vocab.txt").read_bytes())
    again = Punctuator.load(tmp_path, device="cpu")
    assert again.model.cfg.pause_hidden == 8
    words = timed(TEXT, [0.05, 0.9, 0.0, 0.3, 1.5] * 4)
    assert again.predict(words, 2) == p.predict(words, 2)
    # the fusion is a file of its own, so retraining it leaves the text model's weights as they were
    text = load_file(str(tmp_path / "model.safetensors"))
    assert not [k for k in text if k.startswith("pause_fusion")]
    assert set(load_file(str(tmp_path / "pauses.safetensors"))) == {
        f"pause_fusion.{k}" for k in p.decider.pause_fusion.state_dict()
    }
    # a checkpoint written before that, with the fusion inside model.safetensors, still loads
    (tmp_path / "pauses.safetensors").unlink()
    save_file(
        {**text, **{f"pause_fusion.{k}": v for k, v in p.decider.pause_fusion.state_dict().items()}},
        str(tmp_path / "model.safetensors"),
    )
    assert Punctuator.load(tmp_path, device="cpu").predict(words, 2) == p.predict(words, 2)


def test_pauses_change_decisions_and_can_be_turned_off():
    p = timed_model()
    text_only = p.predict(TEXT, 2)
    words = timed(TEXT, [0.02, 1.2, 0.0, 0.6, 2.0] * 4)
    assert p.predict(words, 2) != text_only  # the random fusion's correction is large
    assert p.predict(words, 2, pauses=False) == text_only
    assert p.predict([Word(w) for w in TEXT], 2) == text_only  # words without times


@given(
    gaps=st.lists(st.sampled_from([0.0, 0.05, 0.2, 0.7, 2.0]), min_size=len(TEXT), max_size=len(TEXT)),
    marks=st.none()
    | st.lists(st.sampled_from(["", "", ".", ",", "?", "!"]), min_size=len(TEXT), max_size=len(TEXT)),
    capitals=st.lists(st.booleans(), min_size=len(TEXT), max_size=len(TEXT)),
    continued=st.booleans(),
    k=st.sampled_from([0, 1, 2, 4]),
    engine=st.sampled_from(["masked", "window"]),
    cut=st.integers(0, len(TEXT) - 1),
)
def test_a_stream_decides_as_predict_does_and_within_its_lookahead(
    gaps, marks, capitals, continued, k, engine, cut
):
    p = timed_model(marks=marks is not None, continued=marks is not None and continued)
    words = timed(TEXT, gaps, marks, capitals)
    s = p.stream(lookahead=k, engine=engine)
    finals = {}
    for i in range(0, len(words), 3):
        for e in s.push(words[i : i + 3]):
            if e.final:
                finals[e.index] = e.label
    for e in s.finish():
        if e.final:
            finals[e.index] = e.label
    assert [finals[i] for i in range(len(words))] == p.predict(words, k, engine)
    # The bound: moving the words more than k tokens after a word changes nothing of its label.
    later = words[: cut + k + 1] + [
        Word(w.text.swapcase() + "?", w.start + 5.0, w.end + 5.0) for w in words[cut + k + 1 :]
    ]
    assert p.predict(later, k, engine)[cut] == p.predict(words, k, engine)[cut]


def test_a_word_decided_at_its_deadline_hears_the_silence_after_it():
    """With a time limit, a word that nothing follows by its deadline is decided with the silence
    heard after it as its pause (the shipped default, k=2, the clients' 1.5 s limit): a sentence
    that the text alone leaves open ends there; "and" does not end one; and the silence counts
    only once the deadline has passed (at the end of the stream before it, the text decides)."""
    p = Punctuator.load(device="cpu")

    def last_label(text: str, pauses: bool, tick: bool) -> str:
        words = [Word(w, 0.3 * i, 0.3 * i + 0.25) for i, w in enumerate(text.split())]
        s = p.stream(lookahead=2, max_delay_ms=1500, pauses=pauses)
        events = s.push(words, now=words[-1].end)
        events += s.tick(words[-1].end + 1.5) if tick else s.finish()
        return [e.label for e in events if e.final and e.index == len(words) - 1][0]

    assert last_label("we talked about the weather", pauses=False, tick=True) == "O"
    assert last_label("we talked about the weather", pauses=True, tick=True) == "PERIOD"
    assert last_label("we talked about the weather", pauses=True, tick=False) == "O"
    assert last_label("we went to the shop and", pauses=True, tick=True) == "O"


def test_at_k0_the_silence_ends_where_the_recognisers_guess_starts():
    """At k=0 no tentative word is lookahead, yet a word decided at its deadline hears the silence
    after it only up to where the recogniser's guess after it starts, as at k >= 1 (found by the
    stream state machine: the stream heard silence up to the deadline)."""
    p = Punctuator.load(device="cpu")
    words = [Word(w, 0.3 * i, 0.3 * i + 0.25) for i, w in enumerate("we talked about the weather".split())]
    end = words[-1].end

    def last_label(limit_ms: float, tentative: list[Word]) -> str:
        s = p.stream(lookahead=0, max_delay_ms=limit_ms)
        events = s.push(words, now=end + 2.0, tentative=tentative)
        return [e.label for e in events if e.final and e.index == len(words) - 1][0]

    guess = [Word("and", end + 0.1, end + 0.3)]
    assert last_label(1500, []) == "PERIOD"  # 1.5 s of silence ends the sentence
    assert last_label(1500, guess) == last_label(100, []) == "O"  # 0.1 s of it does not


def test_token_features_follow_the_words_of_split_tokens():
    words = [Word("i", 0.0, 0.1), Word("don't", 0.5, 0.8), Word("know", 1.8, 2.0)]
    feats = [at.features(False, False) for at in places(words, [0, 1, 1, 2], [None] * 4)]
    assert feats[1][1] == 0.0 and feats[1][3] > 0  # "do": a pause before, none inside the word
    assert feats[2][1] == pytest.approx(np.log1p(10.0)) and feats[2][3] == 0.0  # "n't": 1 s after


def test_synthetic_times_pause_more_after_sentences():
    rng = np.random.default_rng(0)
    labels = ["O", "O", "COMMA", "O", "PERIOD"] * 400
    words = synthetic_times(["word"] * len(labels), labels, rng)
    gap = {lab: [] for lab in ("O", "COMMA", "PERIOD")}
    for w, nxt, lab in zip(words, words[1:], labels):
        assert w.start < w.end <= nxt.start
        gap[lab].append(nxt.start - w.end)
    assert np.mean(gap["PERIOD"]) > np.mean(gap["COMMA"]) > np.mean(gap["O"])


def test_synthetic_marks_are_a_streamed_recognisers_periods_at_commas_too():
    rng = np.random.default_rng(0)
    labels = ["O", "O", "COMMA", "O", "PERIOD", "O", "QUESTION"] * 30
    own: dict[str, list[str]] = {lab: [] for lab in set(labels)}
    capital_after: dict[str, list[bool]] = {lab: [] for lab in set(labels)}  # after an own sentence end
    unmarked = 0
    for _ in range(200):
        words = synthetic_marks(synthetic_times(["word"] * len(labels), labels, rng), labels, rng)
        marks = [mark_of(w.text) for w in words]
        unmarked += all(m == "O" for m in marks)
        for lab, m in zip(labels, marks):
            own[lab].append(m)
        for lab, m, nxt in zip(labels, marks, words[1:]):
            if m in ("PERIOD", "QUESTION"):
                capital_after[lab].append(nxt.text[0].isupper())
        assert not any(
            w.text[0].isupper() for w, m in zip(words[1:], marks) if m not in ("PERIOD", "QUESTION")
        )
        assert [w.start for w in words] == sorted(w.start for w in words)
    assert 20 <= unmarked <= 60  # a fifth of the recognisers write none
    share = {lab: {m: marks.count(m) / len(marks) for m in set(marks)} for lab, marks in own.items()}
    assert share["PERIOD"]["PERIOD"] > 0.4 and share["QUESTION"]["QUESTION"] > 0.3
    assert share["O"]["O"] > 0.9
    # a streamed Whisper's commonest error: a period where the reference has a comma
    assert share["COMMA"]["PERIOD"] > 0.25 and share["COMMA"]["PERIOD"] > share["COMMA"]["COMMA"]
    # after its period at a sentence end a later pass starts a sentence; after one mid-sentence,
    # about half the time
    assert np.mean(capital_after["PERIOD"]) > 0.8 and np.mean(capital_after["O"]) < 0.7


def test_offsets_per_lookahead_are_tuned_for_f1():
    from streampunct.prosody import PauseFusion
    from streampunct.training.pause_train import tune_offsets_per_slot

    gold = torch.tensor([1 if i % 3 == 0 else 0 for i in range(300)])
    logits = torch.zeros(300, 4)
    logits[:, 0] = 0.5
    logits[gold == 1, 1] = 0.3  # the right mark, but below O: the argmax never marks
    slots = torch.tensor([0] * 150 + [4] * 150)
    fusion = PauseFusion(4, 8)
    features = torch.zeros(300, N_FEATURES)
    assert (fusion(logits, features, slots).argmax(-1) == 0).all()
    tune_offsets_per_slot(fusion, logits, features, slots, gold)
    assert (fusion(logits, features, slots).argmax(-1) == gold).all()
    assert fusion.offsets[1:4].abs().sum() == 0  # no rows of those lookaheads: left alone


@pytest.mark.parametrize("marks", [True, False])
def test_train_pauses_reads_the_continuation_only_with_the_recognisers_marks(tmp_path, marks):
    from streampunct.training.pause_train import PauseTrainConfig, train_pauses

    torch.manual_seed(0)
    shape = dict(n_layer=1, n_head=2, n_embd=16, n_inner=32, block=4, context=6, dropout=0.0)
    PunctModel(ModelConfig(**shape)).save(tmp_path / "text")
    (tmp_path / "text" / "vocab.txt").write_bytes((DEFAULT_CHECKPOINT / "vocab.txt").read_bytes())
    labels = ["O", "O", "COMMA", "O", "O", "PERIOD", "O", "QUESTION"] * 10
    (tmp_path / "train.tsv").write_text("".join(f"{w}\t{lab}\n" for w, lab in zip(TEXT * 4, labels)))
    cfg = PauseTrainConfig(
        str(tmp_path / "text"), (str(tmp_path / "train.tsv"),), str(tmp_path / "out"),
        segments=5, segment_words=30, epochs=1, marks=marks, continued=True,
    )  # fmt: skip
    with pytest.raises(InputError, match="both need at least one"):
        train_pauses(replace(cfg, segments=4))  # a fifth of 4 segments is none for dev
    with pytest.raises(InputError, match="use one process"):
        train_pauses(replace(cfg, workers=2, device="cuda"))  # worker processes compute on the CPU
    train_pauses(cfg)
    trained = Punctuator.load(tmp_path / "out", device="cpu")
    shutil.copytree(tmp_path / "out", tmp_path / "again")  # trained again in its own folder
    train_pauses(replace(cfg, model=str(tmp_path / "again"), out=str(tmp_path / "again")))
    assert (tmp_path / "again" / "pauses.json").is_file()
    assert trained.model.cfg.pause_marks == marks and trained.model.cfg.pause_continued == marks
    words = timed(TEXT, [0.1] * len(TEXT), [".", ""] * 10)
    assert len(trained.predict(words, 2)) == len(TEXT)  # the fusion's width matches its features


def test_train_pauses_rows_from_worker_processes_are_the_rows_of_one(tmp_path):
    """train-pauses --workers: the text model's logits computed in spawned processes; the rows the
    fusion trains on are those of one process (the logits up to rounding)."""
    from streampunct.training.pause_train import PauseTrainConfig, _rows

    torch.manual_seed(0)
    shape = dict(n_layer=1, n_head=2, n_embd=16, n_inner=32, block=4, context=6, dropout=0.0)
    PunctModel(ModelConfig(**shape)).save(tmp_path / "text")
    (tmp_path / "text" / "vocab.txt").write_bytes((DEFAULT_CHECKPOINT / "vocab.txt").read_bytes())
    model = PunctModel.load(tmp_path / "text")
    pieces = WordPieces(tmp_path / "text" / "vocab.txt", model.cfg.max_pieces)
    labels = ["O", "O", "COMMA", "O", "O", "PERIOD", "O", "QUESTION"] * 5
    text = TEXT * 2
    segments = [(text[:30], labels[:30]), (text[5:25], labels[5:25]), (text[:12], labels[:12])]
    cfg = PauseTrainConfig(str(tmp_path / "text"), (), "", engine="window")
    alone = _rows(model, pieces, segments, cfg, np.random.default_rng(3))
    together = _rows(model, pieces, segments, replace(cfg, workers=2), np.random.default_rng(3))
    logits, *rest = zip(alone, together)
    assert torch.allclose(*logits, atol=1e-5)  # other thread counts round differently
    for a, b in rest:
        assert torch.equal(a, b)
