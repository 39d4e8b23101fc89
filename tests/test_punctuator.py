"""Load-save-predict contract on the shipped checkpoint, empty input and every error path."""

import json
import shutil

import pytest
import torch

from streampunct import LABELS, CheckpointError, InputError, Punctuator
from streampunct.engines import token_logits
from streampunct.punctuator import DEFAULT_CHECKPOINT, checkpoint_dir


def test_shipped_checkpoint_loads_with_no_argument(shipped):
    assert shipped.device.type == "cpu"
    assert shipped.model.cfg.n_layer == 6
    assert not shipped.model.training
    dtypes = {p.dtype for p in shipped.model.parameters()}
    assert dtypes == {torch.float32}  # stored fp16, computed in fp32 on the CPU


def test_shipped_models_by_name(tmp_path):
    assert checkpoint_dir(None) == checkpoint_dir("default") == DEFAULT_CHECKPOINT
    assert checkpoint_dir("base") == DEFAULT_CHECKPOINT.parent / "base"
    assert checkpoint_dir(tmp_path) == tmp_path and checkpoint_dir(str(tmp_path)) == tmp_path


def test_base_model_is_mpnet_stored_as_int8(base):
    from safetensors import safe_open

    assert (base.model.cfg.n_layer, base.model.cfg.n_embd, base.model.cfg.rel_buckets) == (12, 768, 32)
    assert {p.dtype for p in base.model.parameters()} == {torch.float32}
    with safe_open(str(checkpoint_dir("base") / "model.safetensors"), "pt") as f:
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes["tok_emb.weight.q8"] == "I8" and dtypes["tok_emb.weight.scale"] == "F16"
    assert sum(d == "I8" for d in dtypes.values()) == 1 + 12 * 4 + 1  # words, 4 per layer, positions


@pytest.mark.parametrize("model", ["shipped", "base"])
def test_shipped_models_punctuate_real_sentences(model, request):
    p = request.getfixturevalue(model)
    for k in (None, 2):
        text = p.punctuate("how are you today i am fine thank you", lookahead=k)
        assert text.startswith("How are you today? I am fine"), (k, text)


def test_predict_one_label_per_word(shipped):
    words = "so what do we do now we go home and we sleep".split()
    for k in (None, 0, 2, 4):
        labels = shipped.predict(words, lookahead=k)
        assert len(labels) == len(words)
        assert set(labels) <= set(LABELS)


def test_recogniser_words_are_normalised(shipped):
    raw = [" So", "what", "do", "we", "do", "now?", "--", "We", "don't", "know."]
    labels = shipped.predict(raw, lookahead=2)
    assert len(labels) == len(raw)
    assert labels[6] == "O"  # "--" normalises to nothing
    assert labels == shipped.predict([w.strip(" ?.").lower() for w in raw], lookahead=2)


def test_save_load_round_trip(shipped, tmp_path):
    shipped.model.save(tmp_path)
    shutil.copy(DEFAULT_CHECKPOINT / "vocab.txt", tmp_path / "vocab.txt")
    with pytest.raises(CheckpointError, match="no pauses.safetensors"):
        Punctuator.load(tmp_path, device="cpu")  # the text model alone, its config with pause fusion
    shipped.decider.save_pauses(tmp_path)  # the decision's evidence, beside it
    again = Punctuator.load(tmp_path, device="cpu")
    tokens = "we went to the market and then we came back home what a day".split()
    for k in (None, 1):
        torch.testing.assert_close(
            token_logits(again.model, again.pieces, tokens, k),
            token_logits(shipped.model, shipped.pieces, tokens, k),
        )


def test_empty_input(shipped):
    assert shipped.predict([]) == []
    assert shipped.predict(["--", "..."]) == ["O", "O"]
    assert shipped.punctuate("") == ""
    assert shipped.punctuate("  \n\t ") == ""


@pytest.mark.parametrize("bad", [-1, 65, 1.5, True, "2"])
def test_bad_lookahead(shipped, bad):
    with pytest.raises(InputError, match="lookahead"):
        shipped.predict(["hello"], lookahead=bad)


def test_string_given_to_predict(shipped):
    with pytest.raises(InputError, match="punctuate"):
        shipped.predict("hello world")


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError):
        Punctuator.load(tmp_path / "nowhere")


def test_broken_checkpoint(tmp_path):
    for name in ("model.safetensors", "vocab.txt"):
        shutil.copy(DEFAULT_CHECKPOINT / name, tmp_path / name)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        Punctuator.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"n_layer": 2}))
    with pytest.raises(CheckpointError, match="does not fit"):
        Punctuator.load(tmp_path)


def test_a_finished_text_ends_its_last_sentence():
    """Issue 77: `punctuate("so how was it")` gave no question mark. A finished text ends a
    sentence at its last word (. or ?, as the model's logits lean); predict()'s labels, a stream's,
    leave it open."""
    p = Punctuator.load()
    assert p.punctuate("so how was it") == "So how was it?"
    assert p.punctuate("i went home", lookahead=2) == "I went home."
    labels, text = p.label_text("so how was it", 2)
    assert labels == p.predict("so how was it".split(), lookahead=2) and text.endswith("?")
