"""Caption lines: where they break, how they are cased, and the subtitle files written from them."""

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import streampunct
from streampunct import protocol as P
from streampunct.captions import Captioner, Cue, subtitle_cues, to_srt, to_vtt
from streampunct.clients.mic import Screen
from streampunct.options import CueOptions
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


TIMED = [Word(w, start=i * 0.4, end=i * 0.4 + 0.3) for i, (w, _) in enumerate(TALK)]


def captions_of(captioner: Captioner) -> list:
    captioner.add_words(0, TIMED)
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
    cues = subtitle_cues(captions_of(Captioner()), dict(enumerate(TIMED)))
    srt, vtt = to_srt(cues), to_vtt(cues)
    assert srt.startswith("1\n00:00:00,000 --> ") and srt.count(" --> ") == len(cues)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ") and vtt.count(" --> ") == len(cues)
    assert "\n".join(cues[0].lines) in srt and "\n".join(cues[-1].lines) in vtt


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


def test_a_word_the_recogniser_wrote_in_capitals_stays_so():
    """Found by the server's sentence test: mid-sentence "THE COAST AND" came out "tHE cOAST aND"
    (the first letter lowered). An acronym or a word in capitals is kept as written."""
    said = [("we", "O"), ("went", "O"), ("to", "O"), ("THE", "O"), ("COAST", "O"), ("and", "O"), ("NASA", "PERIOD")]  # fmt: skip
    assert conversation_lines(said) == "We went to THE COAST and NASA."


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


# --- subtitle files by broadcast rules ---------------------------------------------------------

VOCAB = (
    "so we went to the sea and it was extraordinarily complicated because people who had never "
    "seen a boat okay yeah I i'm don't think of at on"
).split()
NAMES = (("Des", "Moines"), ("Old", "Dominion", "University"), ("Anna",), ("New", "York"))


def served(talk, times) -> tuple[list, dict[int, Word]]:
    """The caption lines the server's captioner gives for ``talk`` ((word, label) pairs) with
    ``times`` ((start, end) a word), and the words by stream index."""
    words = {i: Word(w, *t) for i, ((w, _), t) in enumerate(zip(talk, times))}
    captioner = Captioner()
    captioner.add_words(0, list(words.values()))
    lines = captioner.add([PunctEvent(i, w, label, True) for i, (w, label) in enumerate(talk)])
    return lines + captioner.flush(), words


def name_cut(a: str, b: str, starts: bool = False) -> bool:
    """A break between ``a`` and ``b`` inside a name: capitalised words (not I), no mark between;
    ``starts``: ``a`` begins a sentence (its capital is the sentence's, not a name's)."""

    def capital(w: str) -> bool:
        return w[:1].isupper() and w != "I" and not w.startswith("I'")

    return not starts and capital(a) and a[-1].isalnum() and capital(b)


def check_rules(cues, captions, rules: CueOptions | None = None) -> None:
    """Every rule of ``rules`` (the clients': CueOptions()) holds, and the cues show the caption
    lines' words."""
    rules = rules or CueOptions()
    assert " ".join(c.text for c in cues) == " ".join(c.text for c in captions if c.text)
    shown = " ".join(c.text for c in cues).split()
    initial = {  # the words that begin a sentence
        i for i, before in enumerate([None, *shown[:-1]]) if before is None or before.endswith((".", "?"))
    }
    at = 0  # the index in ``shown`` of each cue's first word
    for k, c in enumerate(cues):
        assert 1 <= len(c.lines) <= rules.max_lines and all(
            len(x) <= rules.max_line_chars for x in c.lines
        ), c
        words = c.text.split()
        starts = k == 0 or cues[k - 1].text.endswith((".", "?"))
        assert len(words) > 2 or (starts and words[-1].endswith((".", "?"))), (cues[k - 1 : k + 2], c)
        for line, nxt in zip(c.lines, c.lines[1:]):
            at += len(line.split())
            assert not name_cut(line.split()[-1], nxt.split()[0], at - 1 in initial), c
        at += len(c.lines[-1].split())
        assert c.end - c.start >= rules.min_cue_s - 1e-9, c  # so never 0 s
        nxt = cues[k + 1] if k + 1 < len(cues) else None
        if nxt is not None:
            assert c.end <= nxt.start + 1e-9, (c, nxt)
            assert not name_cut(words[-1], nxt.text.split()[0], at - 1 in initial), (c, nxt)
        # read at max_chars_per_s, or on screen until the next cue comes
        read = len(c.text) <= rules.max_chars_per_s * (c.end - c.start) + 1e-6
        assert read or (nxt is not None and c.end >= nxt.start - 1e-9), (c, nxt)


@st.composite
def talks(draw):
    """Words with labels and times: names in them, recogniser's marks, pauses, zero-length words,
    and words whose times overlap (Whisper's)."""
    talk: list[tuple[str, str]] = []
    while len(talk) < draw(st.integers(1, 90)):
        name = not (talk and talk[-1][0][0].isupper()) and draw(st.integers(0, 5)) == 0
        piece = draw(st.sampled_from(NAMES)) if name else (draw(st.sampled_from(VOCAB)),)
        talk += [(w, "O") for w in piece]
        label = draw(st.sampled_from(["O"] * 6 + ["COMMA", "PERIOD", "QUESTION"]))
        word = talk[-1][0] + draw(st.sampled_from(["", "", "", ".", "...", ","]))  # the recogniser's
        talk[-1] = (word, label)
    times, t = [], 0.0
    for _ in talk:
        t += draw(st.sampled_from([0.0, 0.05, 0.2, 0.5, 1.5, 4.0, -0.1]))
        t = max(t, 0.0)
        length = draw(st.sampled_from([0.0, 0.1, 0.3, 0.6]))
        times.append((t, t + length))
        t += length
    return talk, times


@settings(max_examples=300, deadline=None)
@given(talks(), st.sampled_from(["all", "none", "some"]), st.sampled_from([(42, 2), (37, 2), (42, 3)]))
@example(  # a sentence's first capital is no name's: "Extraordinarily / Old Dominion University.", not "Old / Dominion"
    ([("extraordinarily", "O"), ("Old", "O"), ("Dominion", "O"), ("University", "O")], [(0.0, 0.0)] * 4),
    "all",
    (37, 2),
)
def test_subtitle_cues_keep_every_broadcast_rule(talk, words, lines):
    """Cues of at most 2 lines of 42 characters (or as set), never broken inside a name, none of
    one or two words that are not a sentence, each on screen 1 s or more, none over the next, each
    read at 20 characters a second or on screen until the next: on generated talk, with the
    words' times (all, some: the others from their lines, or none)."""
    captions, timed = served(*talk)
    given_words = {"all": timed, "none": None, "some": {i: w for i, w in timed.items() if i % 3}}[words]
    rules = CueOptions(*lines)
    check_rules(subtitle_cues(captions, given_words, rules), captions, rules)


def one_cue_a_line(captions):
    return [Cue((c.text,), c.start, c.end) for c in captions]


def test_reported_cues_cut_names_last_0_ms_overlap_and_use_one_line():
    """Issue 77's subtitle files (one cue a caption line): `Des / Moines` and `Old / Dominion` cut
    across cues, cues of 0 ms, 7 cues overlapping the next (Whisper's word times overlap), every
    cue one line. The same caption lines, cued by the rules."""
    said = (
        "so I did my undergraduate at Old Dominion University and then after that I went to work for them in Des "
        "Moines for a small company. okay. then we came back home and we stayed there for a long while, "
        "and we did all the things that people who had never seen the sea would do when they came here."
    )
    talk = [
        (w.rstrip(".,"), "PERIOD" if w.endswith(".") else "COMMA" if w.endswith(",") else "O")
        for w in said.split()
    ]
    times = [(0.4 * i, 0.4 * i + (0.0 if w == "okay." else 0.45)) for i, w in enumerate(said.split())]
    captions, words = served(talk, times)
    before = one_cue_a_line(captions)
    texts = [c.text for c in before]
    assert "Old" == texts[0].split()[-1] and any(t.endswith(" Des") for t in texts)  # the cuts
    assert any(c.end == c.start for c in before)  # 0 ms: "Okay."
    assert sum(a.end > b.start for a, b in zip(before, before[1:])) >= 7
    assert all(len(c.lines) == 1 for c in before)
    after = subtitle_cues(captions, words)
    check_rules(after, captions)
    lines = [line for c in after for line in c.lines]
    assert any("Old Dominion University" in x for x in lines) and any("Des Moines" in x for x in lines)
    assert any(len(c.lines) == 2 for c in after)


def test_the_clients_cue_their_files_with_the_words_messages_times(tmp_path):
    """`file` and `mic` write their subtitles from the caption lines received and the times the
    words messages gave each word (Transcript): a cue begins at its first word's start."""
    from streampunct.clients.common import Transcript

    said = "so what did you do?".split()
    captions, _ = served([(w.rstrip("?"), "O") for w in said], [])  # lines without times
    transcript = Transcript(CueOptions(max_lines=1))
    transcript.see(P.Recognised(0, tuple(Word(w, 1.0 + i, 1.5 + i) for i, w in enumerate(said)), ()))
    for c in captions:
        transcript.see(P.Captioned(c))
    srt, vtt = transcript.write(str(tmp_path / "talk"))
    assert srt.read_text() == "1\n00:00:01,000 --> 00:00:05,500\nSo what did you do.\n"
    assert vtt.read_text() == "WEBVTT\n\n00:00:01.000 --> 00:00:05.500\nSo what did you do.\n"
