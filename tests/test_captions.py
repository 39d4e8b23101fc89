"""Caption lines: where they break, how they are cased, and the subtitle files written from them."""

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import streampunct
from streampunct import protocol as P
from streampunct.captions import Captioner, to_srt, to_vtt
from streampunct.clients.mic import Screen
from streampunct.text import caption_text, render
from streampunct.types import PunctEvent, Word

TALK = [
    ("So", "COMMA"),
    ("when", "O"),
    ("we", "O"),
    ("went", "O"),
    ("to", "O"),
    ("Boston", "O"),
    ("last", "O"),
    ("year", "COMMA"),
    ("we", "O"),
    ("met", "O"),
    ("a", "O"),
    ("lot", "O"),
    ("of", "O"),
    ("people", "O"),
    ("who", "O"),
    ("had", "O"),
    ("never", "O"),
    ("seen", "O"),
    ("the", "O"),
    ("sea", "PERIOD"),
    ("Did", "O"),
    ("you", "QUESTION"),
]


def captions_of(captioner: Captioner) -> list:
    captioner.add_words(0, [Word(w, start=i * 0.4, end=i * 0.4 + 0.3) for i, (w, _) in enumerate(TALK)])
    events = [PunctEvent(i, w, label, True) for i, (w, label) in enumerate(TALK)]
    return captioner.add(events) + captioner.flush()


def test_lines_break_at_commas_and_length_not_only_at_sentence_ends():
    lines = captions_of(Captioner())
    texts = [c.text for c in lines]
    assert " ".join(texts) == (
        "So, when we went to Boston last year, we met a lot of people who had never seen the sea. Did you?"
    )
    assert len(lines) > 2  # two sentences, more lines
    assert all(len(t) <= 42 for t in texts), texts
    # a line is never left one word short of its sentence end
    assert not any(len(t.split()) == 1 and t.endswith((".", "?")) for t in texts[:-1]), texts
    # a line that continues a sentence keeps its first word lower case; names keep their capital
    continuing = [t for t in texts[1:] if not texts[texts.index(t) - 1].endswith((".", "?"))]
    assert continuing and all(t[0].islower() for t in continuing), texts
    assert "Boston" in " ".join(texts)
    # every word once, in order, with the times of its first and last word
    assert [c.first for c in lines] == [0] + [c.last + 1 for c in lines[:-1]]
    assert lines[-1].last == len(TALK) - 1
    assert all(c.start == c.first * 0.4 and c.end == c.last * 0.4 + 0.3 for c in lines)


def test_one_line_per_sentence_when_asked():
    texts = [c.text for c in captions_of(Captioner(line_chars=None))]
    assert texts == [
        "So, when we went to Boston last year, we met a lot of people who had never seen the sea.",
        "Did you?",
    ]


def test_flush_ends_an_unfinished_sentence():
    c = Captioner(line_chars=None)
    c.add(
        [PunctEvent(0, "thank", "O", True), PunctEvent(1, "you", "O", True), PunctEvent(2, "all", "O", False)]
    )
    assert [x.text for x in c.flush()] == ["Thank you."]
    assert c.flush() == []


def test_render_can_continue_a_sentence():
    assert render(["we", "met", "i", "think"], ["O", "COMMA", "O", "PERIOD"], sentence_start=False) == (
        "we met, I think."
    )
    assert render(["we", "met"], ["O", "PERIOD"]) == "We met."


def test_subtitle_files():
    lines = captions_of(Captioner())
    srt, vtt = to_srt(lines), to_vtt(lines)
    assert srt.startswith("1\n00:00:00,000 --> ") and srt.count(" --> ") == len(lines)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ") and vtt.count(" --> ") == len(lines)
    assert lines[0].text in srt and lines[-1].text in vtt


def conversation_lines(words_and_labels) -> str:
    captioner = Captioner(line_chars=None)
    captioner.add_words(0, [Word(w, i * 0.4, i * 0.4 + 0.3) for i, (w, _) in enumerate(words_and_labels)])
    events = [PunctEvent(i, w, label, True) for i, (w, label) in enumerate(words_and_labels)]
    return " ".join(c.text for c in captioner.add(events) + captioner.flush())


def test_conversation_is_cased_by_streampunct_sentences_not_the_recognisers():
    # Whisper's own words and casing: "Yeah. Okay, so I think Anna's right. Really? I'm not sure."
    said = [
        ("Yeah.", "PERIOD"),  # a backchannel, a sentence of its own
        ("Okay,", "COMMA"),
        ("so", "O"),
        ("I", "O"),
        ("think", "O"),
        ("Anna's", "O"),  # a name Whisper capitalised mid-sentence
        ("right.", "PERIOD"),
        ("really", "QUESTION"),  # Whisper wrote no capital: streampunct's sentence start gives one
        ("i'm", "O"),  # a lower-case pronoun from the recogniser
        ("not", "O"),
        ("sure.", "COMMA"),  # Whisper ended a sentence where streampunct goes on
        ("Anna", "O"),  # the name again, at Whisper's own sentence start: it keeps its capital
        ("said", "O"),
        ("so.", "COMMA"),
        ("Then", "O"),  # a capital only because Whisper began a sentence: lowered
        ("we", "O"),
        ("left", "PERIOD"),
    ]
    text = conversation_lines(said)
    assert text == "Yeah. Okay, so I think Anna's right. Really? I'm not sure, Anna said so, then we left."


def test_no_line_is_one_word_left_over_from_its_sentence():
    """Issue 66: 6 of 58 caption lines a newcomer saw were one word, the end of the sentence the
    line before had begun (a full line, then a last word too long to join it). Such a word now
    takes the line's last word with it; every word still comes once, in order. (A line that
    closes at a comma may still be followed by a one-word end: the comma is the break.)"""
    import random

    rng = random.Random(0)
    vocab = ["a", "we", "the", "went", "today", "extraordinarily", "complicated", "arrangements", "it", "so"]
    for _ in range(300):
        talk = [
            (rng.choice(vocab), rng.choice(["O"] * 8 + ["COMMA", "PERIOD", "QUESTION"])) for _ in range(60)
        ]
        captioner = Captioner()
        lines = captioner.add([PunctEvent(i, w, label, True) for i, (w, label) in enumerate(talk)])
        lines += captioner.flush()
        assert [c.first for c in lines] == [0] + [c.last + 1 for c in lines[:-1]]
        for before, line in zip(lines, lines[1:]):
            alone = line.first == line.last and talk[line.first][1] in ("PERIOD", "QUESTION")
            assert not (alone and talk[before.last][1] == "O" and before.last > before.first), (
                before.text,
                line.text,
            )


def test_a_capital_the_recogniser_put_on_a_function_word_mid_sentence_is_lowered():
    """Issue 66: Whisper's capitals leaked mid-sentence ("But My master"): a pass that starts
    within a sentence capitalises its first word, and a capital inside a sentence was kept as a
    name's. A function word is never a name; names keep their capital."""
    from streampunct.text import caption_text

    raw = ["but", "My", "master", "told", "Anna", "The", "news"]
    text = caption_text(raw, ["O", "O", "O", "O", "O", "O", "PERIOD"], previous="well", sentence_start=False)
    assert text == "but my master told Anna the news."


def test_a_word_carries_one_mark_the_punctuators():
    """Issue 77: runs of marks and marks on marks ("so . . . . no, believe it or not,", "and...,
    you know"; on the live line "Okay.,"): a mark or an ellipsis the recogniser wrote, on its own or
    on a word, survived beside streampunct's. A word shows at most one final mark, streampunct's
    (an abbreviation keeps its dot); a word of marks alone shows as nothing, its mark on the word
    before."""
    raw = ["so", ".", ".", ".", ".", "no", "believe", "it", "or", "not"]
    labels = ["O"] * 5 + ["COMMA", "O", "O", "O", "COMMA"]
    assert caption_text(raw, labels, "well", False) == "so no, believe it or not,"
    assert (
        caption_text(["and...", "you", "know"], ["COMMA", "O", "PERIOD"], "well", False) == "and, you know."
    )
    assert caption_text(["Okay.,", "so", "..."], ["COMMA", "O", "PERIOD"]) == "Okay, so."
    raw, labels = ["Mr.", "Smith", "left", "the", "U.S.", "No."], ["O", "O", "O", "O", "PERIOD", "COMMA"]
    assert caption_text(raw, labels) == "Mr. Smith left the U.S. No,"
    screen = Screen(io.StringIO())  # the mic's live line
    heard = [Word(w) for w in ("Okay.", "and...", ".", "so")]
    screen.words(P.Recognised(0, tuple(heard), ()))
    labels = ["COMMA", "COMMA", "O", "PERIOD"]
    screen.events(
        P.Events(tuple(PunctEvent(i, w.text, label, True) for i, (w, label) in enumerate(zip(heard, labels))))
    )
    assert re.sub("\x1b\\[[0-9;]*m", "", screen.line()).strip() == "Okay, and, so."


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_caption_page_shows_one_mark_a_word_the_punctuators():
    """Issue 77: the caption page's live line showed "Okay.," (the recogniser's mark, then
    streampunct's): its showLive, run in node on a page stub."""
    page = (Path(streampunct.__file__).parent / "server" / "page" / "index.html").read_text()
    show_live = re.search(r"^function showLive.*?^}", page, re.DOTALL | re.MULTILINE)
    assert show_live
    script = (
        "const shown = []; const document = { createElement: () => ({}) };\n"
        "const $ = () => ({ replaceChildren: (...s) => shown.push(...s.map((x) => x.textContent)) });\n"
        'let sentenceEnd = true, committed = new Map([[0, { text: "Okay.", mark: "," }], '
        '[1, { text: "and...", mark: "," }], [2, { text: "so", mark: "." }]]);\n'
        f"{show_live.group(0)}\nshowLive([]); console.log(shown.join(''));\n"
    )
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "Okay, and, so."


def test_no_capital_in_mid_sentence_but_a_name_the_recogniser_always_capitalised():
    """Issue 77: "you Can you tell her listeners", "a Podcast", "No, No.", "engineering,
    Biomedical": the recogniser's capitals (a pass that begins mid-sentence, its own sentence
    ends) kept inside streampunct's sentences. A capital there stays only on a word the
    recogniser capitalised every time it wrote it inside its sentences in the session so far
    (a name), and on I; never on a word that is never a name (a function word, "okay")."""
    said = [
        ("I", "O"), ("study", "O"), ("biomedical", "O"), ("engineering", "O"), ("for", "O"), ("a", "O"),
        ("podcast.", "PERIOD"), ("Anna", "O"), ("asked", "O"), ("you", "O"), ("Can", "O"), ("you", "O"),
        ("tell", "O"), ("her", "O"), ("listeners", "QUESTION"), ("No,", "COMMA"), ("No.", "PERIOD"),
        ("It's", "O"), ("a", "O"), ("Podcast", "O"), ("about", "O"), ("engineering,", "COMMA"),
        ("Biomedical", "O"), ("engineering.", "O"), ("Okay", "O"), ("Anna", "O"), ("and", "O"), ("I", "O"),
        ("agree", "PERIOD"),
    ]  # fmt: skip
    assert conversation_lines(said) == (
        "I study biomedical engineering for a podcast. Anna asked you can you tell her listeners? No, no. "
        "It's a podcast about engineering, biomedical engineering okay Anna and I agree."
    )


def test_a_cut_is_not_a_sentence_end():
    """Issue 77: only the end of the stream ends a sentence that no mark ended (Finish: the
    captioner's flush). A line closed at its length, a pause (the pause clock's Tick) and a
    recognition pass's cut end none: their words keep the punctuator's marks."""
    from types import SimpleNamespace

    from streampunct.options import RecognizerOptions
    from streampunct.pipeline import CaptionPipeline
    from streampunct.stream import Finish, Push, Tick

    pipeline = CaptionPipeline(SimpleNamespace(options=RecognizerOptions()))
    words = [
        Word(w, i * 0.4, i * 0.4 + 0.3)
        for i, w in enumerate("we went to the sea and we swam all day".split() * 3)
    ]
    pipeline.captioner.add_words(0, words)  # as the pipeline's pushes give them
    events = [PunctEvent(i, w.text, "O", True) for i, w in enumerate(words)]
    lines = pipeline.punctuated(events[:20], Push(tuple(words), 8.0)) + pipeline.punctuated(
        events[20:], Tick(20.0)
    )
    assert len(lines) >= 3 and not any(c.text.endswith((".", "?", ",")) for c in lines)
    assert [c.text[-1] for c in pipeline.punctuated([], Finish())] == ["."]
