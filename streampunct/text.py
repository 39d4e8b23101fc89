"""Words in, text out: labels, the IWSLT reader, normalisation and rendering.

The model sees words the way the IWSLT data writes them: lowercase, no punctuation glued on,
clitics split off (``do n't``, ``it 's``; ``'ve`` and ``'d`` stay attached). :func:`normalize`
turns any recogniser's word into such tokens and is used identically in training and inference.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from .errors import DataFormatError, InputError, UnknownLabelError

__all__ = [
    "LABELS",
    "MARKS",
    "mark_of",
    "labeled_words",
    "without_mark",
    "normalize",
    "normalize_text",
    "normalize_labeled",
    "render",
    "caption_text",
    "shown_word",
    "read_iwslt",
]

LABELS: tuple[str, ...] = ("O", "COMMA", "PERIOD", "QUESTION")
LABEL_ID = {label: i for i, label in enumerate(LABELS)}
MARKS = {"O": "", "COMMA": ",", "PERIOD": ".", "QUESTION": "?"}
# The marks a writer (or a recogniser) puts after a word, as the three classes.
OWN_MARKS = {
    ".": "PERIOD",
    "!": "PERIOD",
    "?": "QUESTION",
    "…": "PERIOD",
    ",": "COMMA",
    ";": "COMMA",
    ":": "COMMA",
}

# Clitics split off as their own token (Penn Treebank style, as in IWSLT).
_SPLIT_CLITICS = ("n't", "'s", "'re", "'m", "'ll")
# Abbreviations whose final dot belongs to the word.
_ABBREVIATIONS = frozenset(
    "mr. mrs. ms. dr. st. jr. sr. vs. prof. mt. etc. no. inc. ltd. co. gen. sen. rep. gov.".split()
)
_EDGE_PUNCT = '"“”‘’«»()[]{}<>,;:!?¡¿…-–—*_/\\|~`^'
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'"})
# Words that are never a name: a capital on one inside a sentence is the recogniser's (a pass
# that starts mid-sentence capitalises its first word), and is lowered (caption_text). A caption
# line or cue breaks well before one (streampunct.captions).
FUNCTION_WORDS = frozenset(
    "a an the and but or nor so yet for of to in on at by with from as if then than that this these those "
    "there here my your his her its our their me him us them we you he she they it is are was were be been "
    "am do does did have has had would could can shall should must not no what which who how when where why "
    "because".split()
)
# Said between words, never a name either.
_INTERJECTIONS = frozenset("okay ok yeah yes um uh oh alright".split())
_HAS_WORD_CHAR = re.compile(r"[\w&%$€£@#+]", re.UNICODE)


def _split_clitic(token: str) -> list[str]:
    for clitic in _SPLIT_CLITICS:
        if token.endswith(clitic) and len(token) > len(clitic):
            head = token[: -len(clitic)]
            if clitic == "n't" and head in ("ca", "wo", "sha"):
                return [head, clitic]
            return [head, clitic] if head[-1].isalpha() or head[-1].isdigit() else [token]
    return [token]


_CLOSING = "\"')]”’ "  # what may follow a mark: closing quotes and brackets


def mark_of(word: str) -> str:
    """The label of the mark a word was written with: its last mark before any closing quote or
    bracket (``!`` is a PERIOD, ``;`` and ``:`` are COMMAs), O without one.

    >>> mark_of("Yeah."), mark_of('"Really?"'), mark_of("so"), mark_of("well:")
    ('PERIOD', 'QUESTION', 'O', 'COMMA')
    """
    for ch in reversed(word.rstrip(_CLOSING)):
        if ch in OWN_MARKS:
            return OWN_MARKS[ch]
        if ch.isalnum():
            break
    return "O"


def without_mark(word: str) -> str:
    """The word as a recogniser that writes no marks would give it: the marks that
    :func:`mark_of` reads taken off (a word of marks alone stays).

    >>> without_mark("Yeah."), without_mark('"Really?"'), without_mark("...")
    ('Yeah', '"Really"', '...')
    """
    closing = word[len(word.rstrip(_CLOSING)) :]
    bare = word[: len(word) - len(closing)].rstrip("".join(OWN_MARKS))
    return bare + closing if bare.strip(_CLOSING) else word


def normalize(word: str) -> list[str]:
    """One recogniser word to the model's tokens (zero, one or two of them).

    >>> normalize(" Don't,")
    ['do', "n't"]
    >>> normalize("U.S.")
    ['u.s.']
    >>> normalize("--")
    []
    """
    return list(_normalized(word))


@functools.lru_cache(maxsize=1 << 16)  # words repeat: a stream's host time a word is in microseconds
def _normalized(word: str) -> tuple[str, ...]:
    token = word.strip().translate(_APOSTROPHES).lower()
    bare = token.strip(_EDGE_PUNCT).rstrip(".")
    if bare in _SPLIT_CLITICS or bare in ("'ve", "'d"):  # a clitic arriving on its own
        return (bare,)
    token = token.strip(_EDGE_PUNCT + "'\"")
    # A final dot is sentence punctuation unless it ends an abbreviation ("mr.", "u.s.").
    while token.endswith(".") and token not in _ABBREVIATIONS and "." not in token[:-1]:
        token = token[:-1].rstrip(_EDGE_PUNCT)
    token = token.strip(_EDGE_PUNCT)
    if not token or not _HAS_WORD_CHAR.search(token):
        return ()
    if token == "can't":
        return ("ca", "n't")
    if token == "won't":
        return ("wo", "n't")
    return tuple(_split_clitic(token))


def normalize_text(words: Iterable[str]) -> tuple[list[str], list[int]]:
    """Normalise many words; returns the tokens and, for each token, the index of its source word."""
    tokens: list[str] = []
    source: list[int] = []
    for i, word in enumerate(words):
        for token in normalize(word):
            tokens.append(token)
            source.append(i)
    return tokens, source


def normalize_labeled(words: Sequence[str], labels: Sequence[str]) -> tuple[list[str], list[str]]:
    """Normalise labelled words for training: a split word's label goes on its last token, and the
    label of a word that vanishes (``--``) moves to the token before it if that one has none."""
    if len(words) != len(labels):
        raise InputError(f"{len(words)} words but {len(labels)} labels")
    tokens: list[str] = []
    out: list[str] = []
    for word, label in zip(words, labels):
        parts = normalize(word)
        if parts:
            tokens.extend(parts)
            out.extend(["O"] * (len(parts) - 1) + [label])
        elif out and out[-1] == "O":
            out[-1] = label
    return tokens, out


def _attaches_left(token: str) -> bool:
    return token == "n't" or (token.startswith("'") and token[1:2].isalpha())


_INITIALISM = re.compile(r"^(?:[a-z]\.){2,}$")  # u.s., u.k., ph.d. is not one


def _cased(token: str, sentence_start: bool) -> str:
    if _INITIALISM.match(token):
        return token.upper()
    if token == "i" or token.startswith("i'"):
        token = "I" + token[1:]
    if sentence_start and token[:1].isalpha():
        token = token[0].upper() + token[1:]
    return token


def render(tokens: Sequence[str], labels: Sequence[str], sentence_start: bool = True) -> str:
    """Readable text: marks after words, sentence-initial capitals, ``i`` as ``I``, clitics re-joined.

    ``sentence_start=False``: the text continues a sentence (a caption line broken at a comma), so
    its first word keeps its case.
    """
    if len(tokens) != len(labels):
        raise InputError(f"{len(tokens)} tokens but {len(labels)} labels")
    words: list[list[str]] = []  # [surface, label] per rendered word
    for token, label in zip(tokens, labels):
        if words and _attaches_left(token):  # "ca n't" -> "can't", "it 's" -> "it's"
            head = words[-1]
            head[0] += _cased(token, False)
            if label != "O" or head[1] == "O":  # a mark between word and clitic moves after it
                head[1] = label
            continue
        starts = words[-1][1] in ("PERIOD", "QUESTION") if words else sentence_start
        words.append([_cased(token, starts), label])
    out = []
    for surface, label in words:
        mark = MARKS[label]
        if mark and not (mark == "." and surface.endswith(".")):  # "mr." takes no second dot
            surface += mark
        out.append(surface)
    return " ".join(out)


def shown_word(word: str) -> str:
    """A recogniser's word as a caption shows it, before its casing and streampunct's mark: edge
    punctuation, an ellipsis and the recogniser's own final marks off, so that the word carries at
    most one final mark, the punctuator's; an abbreviation's or initialism's dot stays ("Mr.",
    "U.S.", not "No.": the word no). A word of marks alone ("...", ".") shows as nothing.

    >>> shown_word("and..."), shown_word("Okay.,"), shown_word("U.S."), shown_word("No."), shown_word("...")
    ('and', 'Okay', 'U.S.', 'No', '')
    """
    surface = word.strip().translate(_APOSTROPHES).strip(_EDGE_PUNCT + '"')
    if not _HAS_WORD_CHAR.search(surface):
        return ""
    bare = surface.rstrip(".")
    dotted = "." in bare or (bare + ".").lower() in _ABBREVIATIONS - {"no."}
    return bare + "." if dotted and bare != surface else bare


def caption_text(
    raw: Sequence[str],
    labels: Sequence[str],
    previous: str | None = None,
    sentence_start: bool = True,
    names: dict[str, bool] | None = None,
) -> str:
    """Render a recogniser's own words (keeping their casing) with streampunct's marks.

    The recogniser's punctuation is dropped (:func:`shown_word`; a word of marks alone with it,
    its label going to the word before when that one has none). A capital it wrote only because
    it began a sentence of its own (after its own ``.?!``, or at the stream's start: ``previous``
    is the raw word before ``raw[0]``, None at the start) is lowered; so is one inside a sentence
    on a word that is never a name (``FUNCTION_WORDS``, "okay") or that it wrote in lower case
    before. ``sentence_start``: whether ``raw[0]`` begins one of streampunct's sentences.
    ``names``, kept by the caller across calls (a session), updated here: per word (lower case),
    whether the recogniser capitalised it every time it wrote it inside its sentences so far. Such
    a word is a name and keeps its capital, at a sentence start of the recogniser's too ("Okay.
    Anna said" -> "okay, Anna said").
    """
    names = {} if names is None else names
    if len(raw) != len(labels):
        raise InputError(f"{len(raw)} words but {len(labels)} labels")
    tokens: list[str] = []
    token_labels: list[str] = []
    before = previous
    for word, label in zip(raw, labels):
        surface = shown_word(word)
        own_start = before is None or (  # an abbreviation's dot ends no sentence ("Mr. Smith")
            before.strip().endswith((".", "?", "!")) and not shown_word(before).endswith(".")
        )
        before = word
        if not surface:
            if label != "O" and token_labels and token_labels[-1] == "O":
                token_labels[-1] = label
            continue
        pronoun = surface == "I" or surface.startswith("I'")
        key = surface.lower().split("'")[0]  # "Anna's" is Anna
        capitals = len(surface) > 1 and surface.isupper()  # an acronym, or words in capitals: as written
        if surface[:1].isupper() and not pronoun and not capitals:
            if key in FUNCTION_WORDS or key in _INTERJECTIONS:
                name = False
            elif own_start:
                name = names.get(key, False)
            else:
                name = names.setdefault(key, True)
            if not name:
                surface = surface[0].lower() + surface[1:]
        elif surface[:1].islower():
            names[key] = False
        tokens.append(surface)
        token_labels.append(label)
    return render(tokens, token_labels, sentence_start)


# Chat words that are not speech: dropped, their mark given to the word before (labeled_words).
CHAT_ONLY = frozenset({"lol", "lmao", "haha", "hahaha", "hehe", "xd", "omg", "lolol", "rofl"})


def labeled_words(text: str, turn_end: bool = True) -> tuple[list[str], list[str]]:
    """Punctuated text -> (words, labels): the mark after each word (``!`` counts as PERIOD, ``;``
    and ``:`` as COMMA). With ``turn_end``, text that ends without a mark ends a sentence."""
    words: list[str] = []
    labels: list[str] = []
    for raw in text.split():
        bare = raw.rstrip("\"')]”’")
        label = mark_of(bare)
        word = bare.rstrip(".!?…,;:")
        if not word or word.lower() in CHAT_ONLY or not any(c.isalnum() for c in word):
            if label != "O" and labels and labels[-1] == "O":  # "great !" or "great lol."
                labels[-1] = label
            continue
        words.append(word)
        labels.append(label)
    if turn_end and labels and labels[-1] in ("O", "COMMA"):
        labels[-1] = "PERIOD"
    return words, labels


def read_iwslt(path: str | Path) -> tuple[list[str], list[str]]:
    """Read ``word<TAB>LABEL`` lines; returns (words, labels). Errors name the file and line."""
    p = Path(path)
    if not p.is_file():
        raise DataFormatError("no such file", str(p))
    words: list[str] = []
    labels: list[str] = []
    with p.open(encoding="utf-8-sig", errors="strict") as f:
        try:
            for n, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                parts = line.split("\t")
                if len(parts) != 2:  # an empty word is kept: it normalises to nothing
                    raise DataFormatError(f"expected 'word<TAB>LABEL', got {line[:60]!r}", str(p), n)
                word, label = parts[0].strip(), parts[1].strip()
                if label not in LABEL_ID:
                    raise UnknownLabelError(
                        f"unknown label {label!r} (expected one of {', '.join(LABELS)})", str(p), n
                    )
                words.append(word)
                labels.append(label)
        except UnicodeDecodeError as e:
            raise DataFormatError(f"not UTF-8 text ({e.reason})", str(p)) from e
    if not words:
        raise DataFormatError("no words in file", str(p))
    return words, labels
