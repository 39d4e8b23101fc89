"""The cascade engine: the first stage decides the tokens it is sure of, the window engine the rest,
and a stream still equals predict()."""

import copy
import shutil

import numpy as np
import pytest
import torch

from streampunct import InputError, Punctuator
from streampunct.cascade import CascadeStream, FirstStage, FirstStageConfig
from streampunct.engines import WindowPass, make_engine
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.scheduler import Job, run_batch
from streampunct.stream import Push
from streampunct.text import normalize_text
from tests.test_stream import after_revision, check_events, run_stream, varied_words


def with_first_stage(p: Punctuator, words: list[str], k: int, share: float = 0.5) -> Punctuator:
    """``p`` with a random first stage whose threshold clears about ``share`` of the tokens of
    ``words`` (so both of the cascade's paths decide)."""
    torch.manual_seed(1)
    stage = FirstStage.of(p.model, FirstStageConfig(left=3, ahead=2, proj=16, hidden=32)).eval()
    with torch.no_grad():
        stage.mlp[-1].bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    tokens, _ = normalize_text(words)
    ids = p.pieces.encode(tokens)
    reads = min(2, k)
    probs = stage.probabilities(ids, range(len(ids)), [min(t + reads + 1, len(ids)) for t in range(len(ids))])
    stage.cfg = FirstStageConfig(
        left=3, ahead=2, proj=16, hidden=32, threshold=float(np.quantile(probs[:, 0], 1 - share))
    )
    other = copy.copy(p)
    other.first_stage = stage
    return other


@pytest.mark.parametrize("k", [1, 2, 4])
def test_a_cascade_stream_equals_predict(tiny, k):
    words = varied_words(900, seed=30 + k)
    p = with_first_stage(tiny, words, k)
    expected = p.predict(words, lookahead=k, engine="cascade")
    assert expected != tiny.predict(words, lookahead=k, engine="window")  # the first stage decided some
    assert run_stream(p.stream(lookahead=k, engine="cascade"), words, seed=k) == expected


def test_the_first_stage_saves_the_window_passes_of_the_tokens_it_clears(tiny, monkeypatch):
    words = varied_words(400, seed=3)
    p = with_first_stage(tiny, words, 2, share=0.6)
    made = []
    init = WindowPass.__init__
    monkeypatch.setattr(WindowPass, "__init__", lambda self, *a: (made.append(1), init(self, *a))[1])
    run_stream(p.stream(lookahead=2, engine="cascade"), words)
    n_tokens = len(normalize_text(words)[0])
    assert 0.25 * n_tokens < len(made) < 0.55 * n_tokens


def test_cascade_streams_batched_equal_each_alone(tiny):
    texts = [varied_words(200, seed=40 + i) for i in range(5)]
    p = with_first_stage(tiny, [w for t in texts for w in t], 2)
    streams = [p.stream(lookahead=2, engine="cascade") for _ in texts]
    finals: list[dict[int, str]] = [{} for _ in texts]
    for at in range(0, 200, 3):
        results = run_batch([Job(s, Push(t[at : at + 3])) for s, t in zip(streams, texts)])
        for events, got in zip(results, finals):
            assert not isinstance(events, Exception)
            check_events(events, got)
    for s, got in zip(streams, finals):
        check_events(s.finish(), got)
    for text, got in zip(texts, finals):
        assert [got[i] for i in range(len(text))] == p.predict(text, lookahead=2, engine="cascade")


def test_a_revised_tail_is_judged_again(tiny):
    before = varied_words(120, seed=5)
    p = with_first_stage(tiny, before + varied_words(30, seed=6), 2)
    s = p.stream(lookahead=2, engine="cascade")
    finals: dict[int, str] = {}
    check_events(s.push(before), finals)
    n_final = len(finals)
    after = before[:n_final] + varied_words(30, seed=6)
    check_events(s.revise(n_final, after[n_final:]), finals)
    check_events(s.finish(), finals)
    assert [finals[i] for i in range(len(after))] == after_revision(p, before, n_final, after, "cascade")


def test_a_stream_forgets_what_it_judged(tiny):
    words = varied_words(3000, seed=7)
    p = with_first_stage(tiny, words, 2)
    s = p.stream(lookahead=2, engine="cascade")
    for at in range(0, len(words), 4):
        s.push(words[at : at + 4])
    engine_stream = s._engine
    assert isinstance(engine_stream, CascadeStream)
    assert len(engine_stream.probs) < 40 and engine_stream.held < 6 * tiny.model.cfg.block


def test_auto_takes_the_cascade_where_a_checkpoint_has_a_first_stage(tiny, tmp_path):
    words = varied_words(100, seed=8)
    p = with_first_stage(tiny, words, 2)
    assert make_engine(p.model, "auto", 2, p.first_stage).name == "cascade"
    assert make_engine(p.model, "auto", None, p.first_stage).name == "masked"
    assert make_engine(p.model, "window", 2, p.first_stage).name == "window"
    with pytest.raises(InputError, match="no first stage"):
        tiny.predict(words, lookahead=2, engine="cascade")
    p.model.save(tmp_path)
    shutil.copy(DEFAULT_CHECKPOINT / "vocab.txt", tmp_path)
    p.first_stage.save(tmp_path, {"note": "test"})
    loaded = Punctuator.load(tmp_path, device="cpu")
    assert loaded.first_stage is not None and loaded.first_stage.cfg == p.first_stage.cfg
    assert loaded.predict(words, lookahead=2) == p.predict(words, lookahead=2, engine="cascade")


def test_a_broken_first_stage_file_is_a_clear_error(tiny, tmp_path):
    from streampunct import CheckpointError

    tiny.model.save(tmp_path)
    shutil.copy(DEFAULT_CHECKPOINT / "vocab.txt", tmp_path)
    (tmp_path / "first_stage.json").write_text('{"config": {"left": "x"}}')
    with pytest.raises(CheckpointError, match="first stage"):
        Punctuator.load(tmp_path, device="cpu")


def test_train_first_stage_as_a_user_runs_it(tiny, tmp_path, capsys):
    """`streampunct train-first-stage` on a checkpoint folder: it learns, chooses a threshold on
    the dev text, writes its two files beside the model, and the folder then streams with the
    cascade (auto), finals equal to predict()."""
    from streampunct.cli import main

    def tsv(path, n, seed):
        words, labels = [], []
        for w in varied_words(n, seed):
            bare = w.rstrip(",.?!;:-")
            end = w[len(bare) :]
            words.append(bare or w)
            labels.append(
                "QUESTION" if "?" in end else "PERIOD" if "." in end else "COMMA" if "," in end else "O"
            )
        path.write_text("".join(f"{w}\t{label}\n" for w, label in zip(words, labels)))
        return path

    ckpt = tmp_path / "ckpt"
    tiny.model.save(ckpt)
    shutil.copy(DEFAULT_CHECKPOINT / "vocab.txt", ckpt)
    train, dev = tsv(tmp_path / "train.tsv", 3000, 1), tsv(tmp_path / "dev.tsv", 400, 2)
    args = ["train-first-stage", "--model", str(ckpt), "--train", str(train), "--dev", str(dev)]
    assert main([*args, "--words", "3000", "--dev-words", "400", "--batch", "64", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "chosen threshold" in out and f"first stage written to {ckpt}" in out
    p = Punctuator.load(ckpt, device="cpu")
    assert p.first_stage is not None and p.engine_name("auto", 2) == "cascade"
    words = varied_words(150, seed=3)
    stream = p.stream(lookahead=2, max_delay_ms=None)
    assert run_stream(stream, words) == p.predict(words, lookahead=2)
    missing = [
        "train-first-stage",
        "--model",
        str(ckpt),
        "--train",
        str(tmp_path / "none.tsv"),
        "--dev",
        str(dev),
    ]
    assert main(missing) == 2  # one line, not a traceback
    assert (
        capsys.readouterr().err.strip() == "streampunct: error: give --train FILE (or set STREAMPUNCT_DATA)"
    )
