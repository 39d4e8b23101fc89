"""Caption lines: where they break, how they are cased, and the subtitle files written from them."""

from streampunct.captions import Captioner, to_srt, to_vtt
from streampunct.text import render
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
