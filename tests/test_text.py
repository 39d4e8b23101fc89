"""Unit tests of streampunct.text: normalisation, rendering and the IWSLT reader."""

import pytest

import streampunct
from streampunct.errors import (
    CheckpointError,
    DataFormatError,
    EmptyInputError,
    InputError,
    StreamPunctError,
    UnknownLabelError,
)
from streampunct.text import (
    mark_of,
    normalize,
    normalize_labeled,
    normalize_text,
    read_iwslt,
    render,
    without_mark,
)

# --------------------------------------------------------------------------- normalize


@pytest.mark.parametrize(
    "word,tokens",
    [
        # clitics split off Penn-Treebank style, as in the IWSLT data
        (" Don't,", ["do", "n't"]),
        ("It's", ["it", "'s"]),
        ("we're", ["we", "'re"]),
        ("I'm", ["i", "'m"]),
        ("we'll", ["we", "'ll"]),
        ("can't", ["ca", "n't"]),
        ("won't", ["wo", "n't"]),
        ("shan't", ["sha", "n't"]),
        ("isn't", ["is", "n't"]),
        ("Can't.", ["ca", "n't"]),
        ("WON'T", ["wo", "n't"]),
        # 've and 'd stay attached
        ("we've", ["we've"]),
        ("we'd", ["we'd"]),
        # abbreviations keep their dot
        ("U.S.", ["u.s."]),
        ("Mr.", ["mr."]),
        ("Dr.", ["dr."]),
        ("etc.", ["etc."]),
        ("U.S.,", ["u.s."]),
        # sentence punctuation glued on is dropped
        ("end.", ["end"]),
        ("Hello!", ["hello"]),
        ("why?", ["why"]),
        ('"quoted"', ["quoted"]),
        ("(Laughter)", ["laughter"]),
        ("it's.", ["it", "'s"]),
        # inner punctuation is part of the word
        ("10,000", ["10,000"]),
        ("9:00", ["9:00"]),
        ("self-awareness", ["self-awareness"]),
        ("3.5", ["3.5"]),
        # curly apostrophes are straightened
        ("it\u2019s", ["it", "'s"]),
        ("Don\u2019t", ["do", "n't"]),
        # nothing word-like left
        ("--", []),
        ("...", []),
        ("\u2026", []),
        ("", []),
        ("   ", []),
        # a clitic arriving on its own
        ("'s", ["'s"]),
        ("'S", ["'s"]),
        ("'re", ["'re"]),
        ("'ve", ["'ve"]),
        ("n't", ["n't"]),
    ],
)
def test_normalize(word, tokens):
    assert normalize(word) == tokens


def test_normalize_is_exported_at_package_level():
    assert streampunct.normalize is normalize
    assert streampunct.render is render
    assert streampunct.read_iwslt is read_iwslt


# --------------------------------------------------------------------------- normalize_text


def test_normalize_text_tokens_and_sources():
    tokens, source = normalize_text(["Hello,", "--", "I'm", "can't", "U.S."])
    assert tokens == ["hello", "i", "'m", "ca", "n't", "u.s."]
    # word 1 ("--") vanishes; words 2 and 3 give two tokens each
    assert source == [0, 2, 2, 3, 3, 4]


def test_normalize_text_empty_and_generator():
    assert normalize_text([]) == ([], [])
    assert normalize_text(w for w in ["A", "b."]) == (["a", "b"], [0, 1])


# --------------------------------------------------------------------------- normalize_labeled


def test_normalize_labeled_split_word_label_on_last_token():
    tokens, labels = normalize_labeled(["I", "don't", "know", "it's"], ["O", "COMMA", "O", "PERIOD"])
    assert tokens == ["i", "do", "n't", "know", "it", "'s"]
    assert labels == ["O", "O", "COMMA", "O", "O", "PERIOD"]


def test_normalize_labeled_vanishing_word_label_moves_to_previous_o():
    tokens, labels = normalize_labeled(["well", "--", "I", "see"], ["O", "COMMA", "O", "PERIOD"])
    assert tokens == ["well", "i", "see"]
    assert labels == ["COMMA", "O", "PERIOD"]


def test_normalize_labeled_vanishing_word_label_onto_split_word():
    # the previous token is the O-free last part of a split word: it gets the mark
    tokens, labels = normalize_labeled(["can't", "..."], ["O", "QUESTION"])
    assert tokens == ["ca", "n't"]
    assert labels == ["O", "QUESTION"]


def test_normalize_labeled_vanishing_word_does_not_overwrite_a_mark():
    tokens, labels = normalize_labeled(["well", "--", "--"], ["COMMA", "PERIOD", "QUESTION"])
    assert tokens == ["well"]
    assert labels == ["COMMA"]


def test_normalize_labeled_vanishing_first_word_label_is_dropped():
    tokens, labels = normalize_labeled(["--", "hi"], ["COMMA", "PERIOD"])
    assert tokens == ["hi"]
    assert labels == ["PERIOD"]


# --------------------------------------------------------------------------- render


def test_render_marks_and_sentence_capitals():
    tokens = ["hello", "world", "how", "are", "you", "fine", "thanks"]
    labels = ["COMMA", "PERIOD", "O", "O", "QUESTION", "COMMA", "PERIOD"]
    assert render(tokens, labels) == "Hello, world. How are you? Fine, thanks."


def test_render_no_capital_after_comma():
    assert render(["yes", "sir"], ["COMMA", "O"]) == "Yes, sir"


def test_render_i_is_capitalised():
    assert render(["you", "and", "i", "know"], ["O", "O", "O", "PERIOD"]) == "You and I know."


def test_render_i_with_clitic():
    assert render(["i", "think", "i", "'m", "here"], ["O"] * 4 + ["PERIOD"]) == "I think I'm here."


def test_render_clitics_rejoined():
    tokens = ["it", "'s", "true", "we", "ca", "n't", "go"]
    labels = ["O", "O", "COMMA", "O", "O", "O", "PERIOD"]
    assert render(tokens, labels) == "It's true, we can't go."


def test_render_mark_on_clitic_goes_after_the_joined_word():
    assert render(["do", "n't", "stop"], ["O", "COMMA", "PERIOD"]) == "Don't, stop."


def test_render_capital_after_period_on_joined_word():
    assert render(["no", "it", "'s", "not"], ["PERIOD", "O", "O", "QUESTION"]) == "No. It's not?"


def test_render_abbreviation_with_period_takes_single_dot():
    assert render(["ask", "mr."], ["O", "PERIOD"]) == "Ask mr."
    assert render(["the", "u.s.", "and"], ["O", "PERIOD", "O"]) == "The U.S. And"


def test_render_abbreviation_keeps_other_marks():
    assert render(["mr.", "why"], ["QUESTION", "O"]) == "Mr.? Why"
    assert render(["mr.", "smith"], ["COMMA", "O"]) == "Mr., smith"


def test_render_empty():
    assert render([], []) == ""


@pytest.mark.parametrize("tokens,labels", [(["a", "b"], ["O"]), (["a"], ["O", "PERIOD"]), ([], ["O"])])
def test_render_length_mismatch_raises(tokens, labels):
    with pytest.raises(ValueError):
        render(tokens, labels)


def test_render_mark_on_clitic_head_moves_after_clitic():
    assert render(["it", "'s", "fine"], ["COMMA", "O", "PERIOD"]) == "It's, fine."


def test_normalize_then_render_round_trip():
    words = ["So,", "I", "don't", "know.", "Can't", "we", "go?"]
    tokens, _ = normalize_text(words)
    labels = ["COMMA", "O", "O", "O", "PERIOD", "O", "O", "O", "QUESTION"]
    assert render(tokens, labels) == "So, I don't know. Can't we go?"


# --------------------------------------------------------------------------- read_iwslt


def _write(tmp_path, data, name="data.txt"):
    p = tmp_path / name
    if isinstance(data, str):
        data = data.encode("utf-8")
    p.write_bytes(data)
    return p


def test_read_iwslt_basic(tmp_path):
    p = _write(tmp_path, "hello\tCOMMA\nworld\tPERIOD\nhow\tO\nare\tO\nyou\tQUESTION\n")
    assert read_iwslt(p) == (
        ["hello", "world", "how", "are", "you"],
        ["COMMA", "PERIOD", "O", "O", "QUESTION"],
    )


def test_read_iwslt_accepts_str_path(tmp_path):
    p = _write(tmp_path, "a\tO\n")
    assert read_iwslt(str(p)) == (["a"], ["O"])


def test_read_iwslt_no_final_newline(tmp_path):
    p = _write(tmp_path, "a\tO\nb\tPERIOD")
    assert read_iwslt(p) == (["a", "b"], ["O", "PERIOD"])


def test_read_iwslt_blank_lines_skipped(tmp_path):
    p = _write(tmp_path, "\na\tO\n\n   \nb\tCOMMA\n\n")
    assert read_iwslt(p) == (["a", "b"], ["O", "COMMA"])


def test_read_iwslt_crlf(tmp_path):
    p = _write(tmp_path, b"a\tO\r\nb\tPERIOD\r\n\r\nc\tQUESTION\r\n")
    assert read_iwslt(p) == (["a", "b", "c"], ["O", "PERIOD", "QUESTION"])


def test_read_iwslt_missing_file(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataFormatError) as info:
        read_iwslt(missing)
    assert str(missing) in str(info.value)
    assert info.value.path == str(missing)


def test_read_iwslt_directory_is_not_a_file(tmp_path):
    with pytest.raises(DataFormatError):
        read_iwslt(tmp_path)


def test_read_iwslt_line_without_tab(tmp_path):
    p = _write(tmp_path, "a\tO\nb\tCOMMA\nbroken line\nc\tO\n")
    with pytest.raises(DataFormatError) as info:
        read_iwslt(p)
    err = info.value
    assert not isinstance(err, UnknownLabelError)
    assert str(p) in str(err)
    assert ":3:" in str(err)
    assert err.line == 3
    assert err.path == str(p)


def test_read_iwslt_line_number_counts_blank_lines(tmp_path):
    p = _write(tmp_path, "a\tO\n\n\nnotab\n")
    with pytest.raises(DataFormatError) as info:
        read_iwslt(p)
    assert info.value.line == 4
    assert ":4:" in str(info.value)


def test_read_iwslt_too_many_tabs(tmp_path):
    p = _write(tmp_path, "a\tO\nb\tO\tCOMMA\n")
    with pytest.raises(DataFormatError) as info:
        read_iwslt(p)
    assert info.value.line == 2


def test_read_iwslt_unknown_label(tmp_path):
    p = _write(tmp_path, "a\tO\nb\tO\nc\tEXCLAMATION\n")
    with pytest.raises(UnknownLabelError) as info:
        read_iwslt(p)
    err = info.value
    assert isinstance(err, DataFormatError)
    assert "EXCLAMATION" in str(err)
    assert str(p) in str(err)
    assert ":3:" in str(err)
    assert err.line == 3


def test_read_iwslt_labels_are_case_sensitive(tmp_path):
    p = _write(tmp_path, "a\tcomma\n")
    with pytest.raises(UnknownLabelError) as info:
        read_iwslt(p)
    assert "comma" in str(info.value)
    assert info.value.line == 1


def test_read_iwslt_empty_file(tmp_path):
    p = _write(tmp_path, b"")
    with pytest.raises(DataFormatError) as info:
        read_iwslt(p)
    assert str(p) in str(info.value)


def test_read_iwslt_only_blank_lines(tmp_path):
    p = _write(tmp_path, "\n\n  \n")
    with pytest.raises(DataFormatError):
        read_iwslt(p)


def test_read_iwslt_not_utf8(tmp_path):
    p = _write(tmp_path, b"a\tO\ncaf\xe9\tPERIOD\n")
    with pytest.raises(DataFormatError) as info:
        read_iwslt(p)
    assert not isinstance(info.value, UnicodeDecodeError)
    assert str(p) in str(info.value)


def test_read_iwslt_utf8_words(tmp_path):
    p = _write(tmp_path, "café\tO\nnaïve\tPERIOD\n")
    assert read_iwslt(p) == (["café", "naïve"], ["O", "PERIOD"])


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "cls", [InputError, EmptyInputError, DataFormatError, UnknownLabelError, CheckpointError]
)
def test_errors_are_streampunct_errors(cls):
    assert issubclass(cls, StreamPunctError)
    assert issubclass(cls, Exception)


def test_package_exports_error_classes():
    assert streampunct.StreamPunctError is StreamPunctError
    assert streampunct.DataFormatError is DataFormatError
    assert streampunct.UnknownLabelError is UnknownLabelError
    assert issubclass(UnknownLabelError, DataFormatError)


def test_read_iwslt_errors_caught_as_streampunct_error(tmp_path):
    with pytest.raises(StreamPunctError):
        read_iwslt(tmp_path / "missing.txt")
    with pytest.raises(StreamPunctError):
        read_iwslt(_write(tmp_path, "x\tBAD\n"))
    with pytest.raises(StreamPunctError):
        read_iwslt(_write(tmp_path, b"\xff\xfe\tO\n", name="bin.txt"))


def test_data_format_error_message_format():
    assert str(DataFormatError("bad", "f.txt", 7)) == "f.txt:7: bad"
    assert str(DataFormatError("bad", "f.txt")) == "f.txt: bad"
    assert str(DataFormatError("bad")) == "bad"
    e = DataFormatError("bad", "f.txt", 7)
    assert (e.path, e.line) == ("f.txt", 7)


def test_read_iwslt_strips_byte_order_mark(tmp_path):
    f = tmp_path / "bom.tsv"
    f.write_bytes("\ufeffhello\tCOMMA\nworld\tPERIOD\n".encode("utf-8"))
    assert read_iwslt(f) == (["hello", "world"], ["COMMA", "PERIOD"])


def test_normalize_labeled_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        normalize_labeled(["a", "b", "c"], ["O"])


def test_a_recognisers_own_mark_is_read_and_can_be_taken_off():
    for word, label, bare in [
        ("Yeah.", "PERIOD", "Yeah"),
        ('"Really?"', "QUESTION", '"Really"'),
        ("so", "O", "so"),
        ("well:", "COMMA", "well"),
        ("wow!", "PERIOD", "wow"),
        ("U.S.", "PERIOD", "U.S"),
        ("...", "PERIOD", "..."),
    ]:
        assert mark_of(word) == label, word
        assert without_mark(word) == bare, word
