"""Fine-tuning the POS tagger on ASR-style CoNLL-U: what it reads, what it learns, what it saves.

Uses the real tagger (installed once into the cache by the ``tagger_dir`` fixture) and a tiny treebank written
here: a few steps must fit its sentences, and the result must load as a tagger.
"""

import pytest
import torch
from safetensors.torch import load_file

from streampunct.cli import main
from streampunct.errors import DataFormatError
from streampunct.pos import Tagger
from streampunct.training.tagger_train import TaggerTrainConfig, read_asr_style, train_tagger

SENTENCES = [
    [
        ("Book", "VERB", "VB"),
        ("that", "DET", "DT"),
        ("flight", "NOUN", "NN"),
        ("!", "PUNCT", "."),
        ("Then", "ADV", "RB"),
        ("call", "VERB", "VB"),
        ("Mary", "PROPN", "NNP"),
        (".", "PUNCT", "."),
    ],
    [
        ("Can", "AUX", "MD"),
        ("you", "PRON", "PRP"),
        ("record", "VERB", "VB"),
        ("the", "DET", "DT"),
        ("record", "NOUN", "NN"),
        ("?", "PUNCT", "."),
        (":-)", "SYM", "NFP"),
    ],
]


def conllu(sentences) -> str:
    lines = ["# newdoc id = a"]
    for i, sent in enumerate(sentences):
        if i == 1:
            lines.append("# newdoc id = b")
        for j, (form, upos, xpos) in enumerate(sent, 1):
            lines.append("\t".join([str(j), form, form.lower(), upos, xpos, "_", "0", "_", "_", "_"]))
        lines.append("")
    return "\n".join(lines) + "\n"


@pytest.fixture
def ewt(tmp_path):
    for split in ("train", "dev"):
        (tmp_path / f"en_ewt-ud-{split}.conllu").write_text(conllu(SENTENCES))
    return tmp_path


def test_asr_style_is_lower_case_without_punctuation(ewt):
    docs = read_asr_style(ewt / "en_ewt-ud-train.conllu")
    assert docs == [
        (["book", "that", "flight", "then", "call", "mary"], ["VB", "DT", "NN", "RB", "VB", "NNP"]),
        (["can", "you", "record", "the", "record"], ["MD", "PRP", "VB", "DT", "NN"]),
    ]


def test_fine_tuning_fits_its_data_and_saves_a_tagger(ewt, tmp_path, tagger_dir):
    torch.set_num_threads(1)
    out = tmp_path / "tagger"
    cfg = TaggerTrainConfig(
        ewt=str(ewt), out=str(out), steps=30, batch=4, lr=5e-3, span=(3, 6), eval_every=30
    )
    train_tagger(cfg)
    trained = Tagger.load(out)
    for words, gold in read_asr_style(ewt / "en_ewt-ud-train.conllu"):
        assert trained.tag(words) == gold
    # The character language models are flair's, untouched; the word level was trained.
    before = load_file(str(tagger_dir / "tagger.safetensors"))
    after = load_file(str(out / "tagger.safetensors"))
    assert before.keys() == after.keys()
    assert torch.equal(before["fw.rnn.weight_hh_l0"], after["fw.rnn.weight_hh_l0"])
    assert not torch.equal(before["linear.weight"], after["linear.weight"])


def test_missing_treebank_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(DataFormatError, match="no such file"):
        read_asr_style(tmp_path / "en_ewt-ud-train.conllu")
    assert main(["train-tagger", "--ewt", str(tmp_path), "--out", str(tmp_path / "t")]) == 2
    assert "no such file" in capsys.readouterr().err
