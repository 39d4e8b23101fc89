"""End to end: audio in, punctuated words out, against what Whisper users have today.

    python benchmarks/e2e.py record --data ../shared/data --cache ../e2e_cache [--extra-human DIR]
                                    [--speech ../shared/data/conversation_audio]
                                    [--only speech|speech_dev|speech_test]
    python benchmarks/e2e.py score --cache ../e2e_cache [--models default base DIR] [--lookaheads 0 2]
                                   [--pauses both|on|off] [--out e2e] [--workers 2]
                                   [--words streamed|offline:tiny.en|offline:base|reference]
                                   [--paired-system NAME] [--unit-tokens 60] [--draws 10000]
    python benchmarks/e2e.py quick          # 20 s of espeak-ng, no data needed (the test runs this)

Recordings (``record`` writes them under --cache, never into the repository):

- *synthetic conversation*: two recordings of about 5 minutes, espeak-ng reading held-out chat
  text (``--conv``, default ``../data_conv/chat_test.tsv``: ``streampunct prepare-conversation``'s
  test split, conversations in order). The TSV does not mark turns (every turn ends a sentence),
  so one or two sentences (seeded draw) make a turn, turns alternate between two voices, and
  0.3-0.8 s of silence separates them. conv1 reads at 150 wpm (en-us+m3, en-us+f3), conv2 at 175
  (en-us+m1, en-us+f2), from where conv1 stopped.
- *synthetic monologue*: espeak-ng (en-us+m7, 160 wpm) reading the first ~800 words of TED
  test2011 (up to a sentence end).
- *human*: jfk_16k.wav and the 16 LJSpeech clips (consecutive sentences of one text), joined into
  one stream with 1 s of silence between clips, their punctuated .txt joined as the reference.
  LJSpeech's references spell numbers out, so Whisper's digits count as word errors (WER only).
- *human extra* (``--extra-human DIR``): NAME.wav/NAME.txt pairs (or .mp3, .flac), joined the
  same way, by name; ``--extra-max-s S`` leaves out clips longer than S seconds (listed in the
  JSON). Run ``record`` again with the flag to add the set to an existing cache.
- *speech dev* and *speech test* (``--speech DIR``): human conversational speech, eight
  continuous recordings of unscripted two-party doctor-patient consultations (Smith et al. 2022,
  Scientific Data, figshare 10.6084/m9.figshare.c.5545842, CC BY 4.0), ``ID.mp3`` with its
  punctuated transcript ``ID.plain.txt`` (one turn a line, uh and um kept). Each recording is one
  stream of its own, as recorded: nothing joined, no silence inserted; the audio is read from DIR
  by path (never copied into the cache). The reference is the turns joined with a space; a turn
  ends a sentence only where the transcript marks one (``turn_end=False``, as every reference).
  The split is fixed, by case (SPEECH_SPLIT). ``--only speech`` (or ``speech_dev``,
  ``speech_test``) makes and recognises those recordings alone, leaving the others in the cache
  as they are.

espeak-ng reads the rendered, punctuated text: its prosody (pauses at marks, a rise at a question)
carries the reference punctuation, as a speaker's does, for every system alike.

For each recording, ``record`` runs (a) streampunct's live path up to the punctuator: the caption
pipeline the server runs (``streampunct.pipeline.CaptionPipeline``: the streaming recogniser,
tiny.en, with the server's settings, ``streampunct.options``; the pause clock; the provisional
words as lookahead) fed CHUNK_S chunks on ``streampunct.pipeline.simulate``'s clock (the audio fed
so far: real-time speed with instant compute; deterministic, nothing sleeps), a pass whenever the
recogniser is ready, as the server's session runs one. Every call the pipeline makes on the
punctuation stream is kept (push: the committed words, the push clock and the provisional words;
tick: the pause clock; finish), with the settings (``front_end``) and ``version``
(STREAM_VERSION); a recording streamed with other settings or older code is streamed again. The
buffer is trimmed at Whisper's own sentence ends, so the calls do not depend on the punctuator,
and since the passes decode once and greedily, a recording streams to the same calls every run.
(b) faster-whisper offline with its own punctuation (beam 5, word timestamps, and its default
temperature fallback, so these words can move between runs) with tiny.en and base. All of it is
JSON in --cache, one file per recording; a step already there is not run again (``--force``
reruns).

``score`` runs each recording's calls through a fresh ``PunctStream`` per configuration (model x
lookahead x pauses), with the clients' time limit (StreamOptions.max_delay_ms), as the server
would (``--provisional-lookahead off`` drops the tentative words), and takes each word's final
label; a word's label goes on its last token (``normalize``), its other tokens get O (the stream's events are per word). ``--pauses`` (both, on, off) is passed
to ``Punctuator.stream`` only when its signature has that parameter, and pauses=on runs only for a
checkpoint with pause fusion (without it, on equals off); the JSON's "pauses" says what ran. A
checkpoint whose fusion reads the recogniser's own marks runs pauses=on twice: on the streamed
words as the recogniser wrote them (marks=on), and with their marks taken off (marks=off).
``--models`` takes shipped names and checkpoint folders. ``--words`` says where the gap is: by
default streampunct punctuates the live path's streamed words; ``offline:tiny.en`` (or ``base``)
gives it the offline recogniser's words, times and marks in one batch instead (the same k, the
final labels of ``predict``), and ``reference`` the reference's own words, with no times or marks
(the text model alone, WER 0). Whisper's own marks: ``labeled_words`` of
its words (``!`` is a PERIOD), for offline tiny.en and base, and for the streamed tiny.en words
themselves (what a live Whisper stream shows today). References: ``labeled_words(text,
turn_end=False)`` + ``normalize_labeled``.

Scoring: reference tokens are aligned to hypothesis tokens by edit distance (tokens compared
lowercase after ``normalize``); each reference mark moves onto the hypothesis token aligned to its
token, a mark on a deleted token onto the hypothesis token before it (none before: lost, counted).
Two marks meeting on one token: the later wins, but a COMMA never replaces a PERIOD or QUESTION.
Then ``streampunct.metrics.score``: per-class P/R/F1, micro-F1 over the marks, macro-F1, SER; and
WER (over normalised tokens: clitics are tokens of their own) from the same alignment. Results per
recording set, and pooled ("pooled") over the recordings of every set but the speech sets (the
synthetic ones and the read clips, the pool as it was before the speech sets came):
``benchmarks/results/e2e.json`` and ``e2e.png``. The speech sets are sets of their own and never
pool, neither with the others nor with each other (dev is for choosing, test for reporting).

Paired bootstrap, per speech set: ``--paired-system`` (default: streampunct's default model at
k=2 on the streamed words with pauses and the recogniser's marks, as the server runs it) against
Whisper base's and tiny.en's own offline punctuation, and against the streamed Whisper's own marks
on the very same words (what a whisper_streaming user reads today: the one comparison where the
words do not differ), and against itself without what the recogniser heard (``heard=off``: the
words' cues left out, for a checkpoint with ``hearing.json``). Each recording's reference tokens are cut
into consecutive units of ``--unit-tokens`` (60); through the alignment :func:`compare` returns,
each system's word errors, reference tokens and per-class true positives, false positives and
misses (``streampunct.metrics.count``) go to the unit of the reference token they are aligned to
(an inserted token's to the unit of the reference token before it; a deleted token's mark, moved
onto the hypothesis token before it, to that token's unit). Resampling the recordings, then the
units inside each (two levels: recordings differ by more than units do), the same for both
systems (``--draws`` 10000, seed 0), gives the difference in micro-F1 and WER with its
95% interval and the share of resamples in which streampunct is worse
(``streampunct.scoring.paired``). Marks lost before the first hypothesis token count in neither,
as in the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    CLIP_GAP_S,
    RESULTS,
    SETS,
    STREAM_ASR,
    clip_pairs,
    load_recordings,
    machine,
    read_wav,
    silence,
    streamed_words,
    write_json,
)

from streampunct import Punctuator  # noqa: E402
from streampunct.flags import add_config_flags, config_from_flags  # noqa: E402
from streampunct.options import FrontEndOptions, RecognizerOptions, StreamOptions  # noqa: E402
from streampunct.pipeline import CaptionPipeline, call_to_json, calls_from_json, simulate  # noqa: E402
from streampunct.processes import in_processes  # noqa: E402
from streampunct.punctuator import SHIPPED_MODELS, checkpoint_dir  # noqa: E402
from streampunct.scoring import (  # noqa: E402
    UNIT_TOKENS,
    compare,
    metrics,
    paired,
    pool,
    reference,
    unit_tallies,
    whisper_tokens,
    word_tokens,
)
from streampunct.speech import SAMPLE_RATE, StreamingRecognizer, load_whisper  # noqa: E402
from streampunct.stream import Push  # noqa: E402
from streampunct.text import normalize_labeled, read_iwslt, render  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CHUNK_S = 0.25  # audio fed to the recogniser per step (as streampunct/clients/file.py sends it)
TURN_GAP_S = (0.3, 0.8)  # silence between conversation turns
TARGET_S = 300.0  # length of each synthetic recording
MONOLOGUE_WORDS = 800
# The live path's code, where it changes what a stream hears without a setting: 2 since the
# recogniser's passes decode once, with no temperature fallback (2026-11-26; before it, 1, the same
# audio streamed twice could give other words); 3 since the recording is the caption pipeline's
# calls (streampunct.pipeline: the pause clock's ticks, the server's push clock; 2026-11-28).
# ``record`` streams again a recording streamed before.
STREAM_VERSION = 4  # 4: words carry what the recogniser heard at their ends (cues)
OFFLINE_ASR = ("tiny.en", "base")
# The streamed words' time limit: the clients' default (the other words have none: predict's labels).
LIVE_DELAY_MS = StreamOptions.max_delay_ms
WORDS = ("streamed", *(f"offline:{a}" for a in OFFLINE_ASR), "reference")  # score --words
# The human conversational speech sets (``record --speech DIR``), fixed once, by case: each case is
# one consultation with its own speakers and story, so no conversation is split across dev and
# test; each set has two cardiac (CAR) and two gastrointestinal (GAS) cases, the lower numbers in
# dev, so that both sets hold both kinds of consultation (dev 38.5 min, test 41.8 min). Dev is for
# choosing settings; report test. They never pool with the other sets (``summarise``).
SPEECH_SPLIT = {
    "speech_dev": ("CAR0001", "CAR0002", "GAS0001", "GAS0002"),
    "speech_test": ("CAR0003", "CAR0005", "GAS0003", "GAS0004"),
}
BOOTSTRAP_SEED = 0
# (name, voices, words a minute, seed); conv2 starts where conv1 stopped
CONVERSATIONS = (("conv1", ("en-us+m3", "en-us+f3"), 150, 1), ("conv2", ("en-us+m1", "en-us+f2"), 175, 2))
MONOLOGUE = ("monologue", "en-us+m7", 160)
QUICK_TURNS = (
    "Hi Anna, how was your weekend?",
    "It was great, thanks. We went hiking in the mountains on Saturday.",
    "That sounds lovely. Was the weather good?",
    "Yes, it was sunny and warm. On Sunday we stayed home and cooked dinner for my parents.",
    "Nice. I mostly worked, but I did finish a very good book.",
)


def stream_has_pauses() -> bool:
    return "pauses" in inspect.signature(Punctuator.stream).parameters


def replay(
    p: Punctuator,
    asr: dict,
    lookahead: int,
    pauses: bool | None,
    marks: bool = True,
    provisional_lookahead: bool = True,
    max_delay_ms: float | None = None,
    heard: bool = True,
) -> tuple[list[str], list[str]]:
    """A recording's calls (see :func:`stream_asr`) through a fresh stream; each word's final
    label. Without ``marks``, the recogniser's own marks are taken off its words first (a
    recogniser that writes none); without ``provisional_lookahead``, no tentative words; without
    ``heard``, no cues (what the recogniser heard at the words' ends)."""
    kwargs: dict[str, object] = {"lookahead": lookahead, "max_delay_ms": max_delay_ms}
    if pauses is not None:
        kwargs["pauses"] = pauses
    stream = p.stream(**kwargs)
    final: dict[int, str] = {}
    calls = calls_from_json(asr["calls"], marks, provisional_lookahead, heard)
    for call in calls:
        final.update((e.index, e.label) for e in stream.run(call) if e.final)
    words = [w.text for call in calls if isinstance(call, Push) for w in call.words]
    assert len(final) == len(words), "every word gets one final label"
    return word_tokens(words, [final[i] for i in range(len(words))])


def words_to_punctuate(recording: dict, words: str) -> dict | None:
    """The words streampunct punctuates, as a recorded stream (see :func:`replay`): the live path's
    (``streamed``), a recogniser's offline words with their times and marks in one batch
    (``offline:tiny.en``), or the reference's own words, lower case, with no times or marks
    (``reference``: the text model alone). None where the recording has no such words."""
    if words == "streamed":
        return recording["streaming"][STREAM_ASR]
    if words == "reference":
        ws = [{"text": t, "start": None, "end": None} for t in reference(recording["text"])[0]]
    else:
        offline = recording["offline"].get(words.removeprefix("offline:"))
        if offline is None:
            return None
        ws = offline["words"]
    return {"calls": [{"push": ws, "now": None, "tentative": []}, {"finish": True}]}


# --- audio -------------------------------------------------------------------------------------


def check_tools() -> None:
    if shutil.which("espeak-ng") is None:
        raise SystemExit("needs espeak-ng (apt-get install espeak-ng)")


def espeak(text: str, voice: str, wpm: int, tmp: Path) -> np.ndarray:
    """espeak-ng reading ``text``: 16 kHz mono float32."""
    from faster_whisper import decode_audio

    src, wav = tmp / "say.txt", tmp / "say.wav"
    src.write_text(text, encoding="utf-8")
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(wav), "-f", str(src)], check=True)
    return decode_audio(str(wav), sampling_rate=SAMPLE_RATE)


def write_wav(path: Path, audio: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())


def sentences(tokens: Sequence[str], labels: Sequence[str]) -> list[tuple[list[str], list[str]]]:
    out, start = [], 0
    for i, lab in enumerate(labels):
        if lab in ("PERIOD", "QUESTION"):
            out.append((list(tokens[start : i + 1]), list(labels[start : i + 1])))
            start = i + 1
    return out


def conversation(
    turns_text: Sequence[str], voices: Sequence[str], wpm: int, rng: np.random.Generator, tmp: Path
) -> np.ndarray:
    """Turns read in alternating voices, with a silence between turns."""
    pieces = []
    for n, text in enumerate(turns_text):
        if n:
            pieces.append(silence(rng.uniform(*TURN_GAP_S)))
        pieces.append(espeak(text, voices[n % len(voices)], wpm, tmp))
    return np.concatenate(pieces)


def make_conversations(conv_tsv: Path, tmp: Path) -> list[tuple[str, str, np.ndarray, dict]]:
    """conv1 and conv2: ~5 minutes each of chat text in turns of one or two sentences."""
    sents = sentences(*normalize_labeled(*read_iwslt(conv_tsv)))
    out = []
    at = 0
    for name, voices, wpm, seed in CONVERSATIONS:
        rng = np.random.default_rng(seed)
        pieces: list[np.ndarray] = []
        texts: list[str] = []
        seconds = 0.0
        first = at
        while seconds < TARGET_S:
            n = int(rng.integers(1, 3))
            group = sents[at : at + n]
            if not group:
                raise SystemExit(f"{conv_tsv}: not enough text for {name}")
            at += n
            text = render([t for s in group for t in s[0]], [lab for s in group for lab in s[1]])
            if texts:
                pieces.append(silence(rng.uniform(*TURN_GAP_S)))
            pieces.append(espeak(text, voices[len(texts) % 2], wpm, tmp))
            texts.append(text)
            seconds = sum(len(p) for p in pieces) / SAMPLE_RATE
        meta = {"voices": list(voices), "wpm": wpm, "turns": len(texts), "sentences": [first, at]}
        out.append((name, " ".join(texts), np.concatenate(pieces), meta))
    return out


def make_monologue(ted: Path, tmp: Path) -> tuple[str, str, np.ndarray, dict]:
    tokens, labels = normalize_labeled(*read_iwslt(ted))
    n = MONOLOGUE_WORDS
    while labels[n - 1] not in ("PERIOD", "QUESTION"):
        n += 1
    text = render(tokens[:n], labels[:n])
    name, voice, wpm = MONOLOGUE
    return name, text, espeak(text, voice, wpm, tmp), {"voice": voice, "wpm": wpm, "tokens": n}


def join_clips(clips: Sequence[tuple[Path, Path]]) -> tuple[str, np.ndarray, dict]:
    """Clips (wav, txt) joined with CLIP_GAP_S of silence; their texts joined."""
    from faster_whisper import decode_audio

    pieces, texts = [], []
    for i, (wav, txt) in enumerate(clips):
        if i:
            pieces.append(silence(CLIP_GAP_S))
        pieces.append(decode_audio(str(wav), sampling_rate=SAMPLE_RATE))
        texts.append(" ".join(txt.read_text(encoding="utf-8").split()))
    return " ".join(texts), np.concatenate(pieces), {"clips": [c[0].name for c in clips], "gap_s": CLIP_GAP_S}


def clip_seconds(path: Path) -> float:
    return len(read_audio(path)) / SAMPLE_RATE


def read_audio(path: Path) -> np.ndarray:
    """16 kHz mono float32 from a wav this module wrote, or any file faster-whisper decodes."""
    if path.suffix == ".wav":
        return read_wav(path)
    from faster_whisper import decode_audio

    return decode_audio(str(path), sampling_rate=SAMPLE_RATE)


def recording_audio(rec: dict) -> np.ndarray:
    """A recording's audio: its wav in the cache, or (speech sets) its file read by path."""
    return read_audio(Path(rec["wav"] if "wav" in rec else rec["audio"]))


def speech_names(only: str | None) -> list[str]:
    """The speech recordings ``record --only`` names (all of both sets for ``speech``)."""
    return [n for s, names in SPEECH_SPLIT.items() if only in ("speech", s) for n in names]


def speech_recordings(folder: Path, names: Sequence[str]) -> list[dict]:
    """The speech sets' recordings (SPEECH_SPLIT) from ID.mp3 and ID.plain.txt in ``folder``: the
    audio by path, the turns joined as the reference."""
    set_of = {n: s for s, names in SPEECH_SPLIT.items() for n in names}
    out = []
    for name in names:
        audio, txt = folder / f"{name}.mp3", folder / f"{name}.plain.txt"
        if not (audio.is_file() and txt.is_file()):
            raise SystemExit(f"{folder}: {name}.mp3 and {name}.plain.txt are needed for {set_of[name]}")
        turns = [" ".join(line.split()) for line in txt.read_text(encoding="utf-8").splitlines()]
        turns = [t for t in turns if t]
        out.append(
            {
                "name": name,
                "set": set_of[name],
                "text": " ".join(turns),
                "audio": str(audio.resolve()),
                "seconds": round(clip_seconds(audio), 2),
                "meta": {"source": str(folder.resolve()), "turns": len(turns), "transcript": txt.name},
                "streaming": {},
                "offline": {},
            }
        )
    return out


# --- recognition -------------------------------------------------------------------------------


def whisper(name: str):
    return load_whisper(name, device="cpu")


def front_end(options: RecognizerOptions, pipeline: FrontEndOptions) -> dict:
    """The settings a recording was streamed with, as its JSON keeps them."""
    return {**dataclasses.asdict(options), **dataclasses.asdict(pipeline)}


def stream_asr(
    model,
    audio: np.ndarray,
    options: RecognizerOptions | None = None,
    front: FrontEndOptions | None = None,
) -> dict:
    """The live path up to the punctuator: a :class:`~streampunct.pipeline.CaptionPipeline` with
    the streaming recogniser (``options``: the server's by default) over ``audio`` in CHUNK_S
    steps on :func:`~streampunct.pipeline.simulate`'s clock; every call it makes on the
    punctuation stream, with the clock (:func:`~streampunct.pipeline.call_to_json`). The recogniser's sentence ends are
    Whisper's, so that the recording does not depend on the punctuator."""
    options, front = options or RecognizerOptions(), front or FrontEndOptions()
    if options.sentence_ends != "whisper":
        raise ValueError(
            "a recording is the punctuator's input: the recogniser's sentence ends must be Whisper's"
        )
    t0 = time.perf_counter()
    pipeline = CaptionPipeline(StreamingRecognizer(model, options), front)
    run = simulate(pipeline, audio, CHUNK_S)
    passes = [h.hypothesis.pass_ for h in run.heard if h.hypothesis.pass_ is not None]
    return {
        "model": STREAM_ASR,
        "version": STREAM_VERSION,
        "chunk_s": CHUNK_S,
        "front_end": front_end(options, front),
        "calls": [call_to_json(call, clock) for clock, call in run.calls],
        "passes": len(passes),
        "compute_ratio": round(sum(p.seconds for p in passes) / (len(audio) / SAMPLE_RATE), 3),
        "guarded": dict(pipeline.recognizer.guarded),
        "skips": sum(h.skipped is not None for h in run.heard),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def offline_asr(model, audio: np.ndarray) -> dict:
    t0 = time.perf_counter()
    segments, _ = model.transcribe(audio, language="en", beam_size=5, word_timestamps=True)
    words = [
        {"text": w.word.strip(), "start": round(w.start, 3), "end": round(w.end, 3)}
        for seg in segments
        for w in seg.words or []
        if w.word.strip()
    ]
    return {"beam_size": 5, "words": words, "seconds": round(time.perf_counter() - t0, 1)}


# --- record ------------------------------------------------------------------------------------


def _save(path: Path, rec: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec) + "\n")
    tmp.replace(path)


def make_recordings(args, cache: Path) -> None:
    """Write each recording's wav and its JSON (name, set, text) once; with ``--only``, only the
    speech sets' JSON (their audio stays where it is)."""
    if args.speech:
        wanted = speech_names(args.only or "speech")
        todo_speech = [n for n in wanted if args.force or not (cache / f"{n}.json").is_file()]
        for rec in speech_recordings(Path(args.speech), todo_speech):
            _save(cache / f"{rec['name']}.json", rec)
            print(f"{rec['name']}: {rec['seconds']:.0f} s, {len(rec['text'].split())} words", flush=True)
    elif args.only:
        raise SystemExit(f"--only {args.only} needs --speech DIR (the conversation_audio folder)")
    if args.only:
        return
    data = Path(args.data)
    todo = []
    if args.force or not all((cache / f"{c[0]}.json").is_file() for c in CONVERSATIONS):
        todo.append("conversation")
    if args.force or not (cache / "monologue.json").is_file():
        todo.append("monologue")
    made: list[tuple[str, str, str, np.ndarray, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if "conversation" in todo:
            check_tools()
            for name, text, audio, meta in make_conversations(Path(args.conv), Path(tmp)):
                made.append((name, "synthetic_conversation", text, audio, {**meta, "source": str(args.conv)}))
        if "monologue" in todo:
            check_tools()
            ted = data / "iwslt" / "test2011"
            name, text, audio, meta = make_monologue(ted, Path(tmp))
            made.append((name, "synthetic_monologue", text, audio, {**meta, "source": str(ted)}))
    if args.force or not (cache / "human.json").is_file():
        audio_dir = data / "audio"
        clips = [(audio_dir / "jfk_16k.wav", audio_dir / "jfk_16k.txt")] + clip_pairs(audio_dir / "ljspeech")
        text, audio, meta = join_clips(clips)
        made.append(("human", "human", text, audio, meta))
    if args.extra_human and (args.force or not (cache / "human_extra.json").is_file()):
        clips, too_long = clip_pairs(Path(args.extra_human)), []
        if args.extra_max_s is not None:
            too_long = [c for c in clips if clip_seconds(c[0]) > args.extra_max_s]
            clips = [c for c in clips if c not in too_long]
        if clips:
            text, audio, meta = join_clips(clips)
            meta = {**meta, "source": str(args.extra_human), "left_out": [c[0].name for c in too_long]}
            made.append(("human_extra", "human_extra", text, audio, meta))
        else:
            print(f"{args.extra_human}: no NAME.wav/NAME.txt pairs; no extra human set", flush=True)
    for name, set_name, text, audio, meta in made:
        wav = cache / "audio" / f"{name}.wav"
        write_wav(wav, audio)
        rec = {
            "name": name,
            "set": set_name,
            "text": text,
            "wav": str(wav),
            "seconds": round(len(audio) / SAMPLE_RATE, 2),
            "meta": meta,
            "streaming": {},
            "offline": {},
        }
        _save(cache / f"{name}.json", rec)
        print(f"{name}: {rec['seconds']:.0f} s, {len(text.split())} words -> {wav}", flush=True)


def recognise(
    cache: Path,
    force: bool,
    offline_models: Sequence[str] = OFFLINE_ASR,
    options: RecognizerOptions | None = None,
    names: Sequence[str] | None = None,
) -> None:
    """Each recogniser over every recording (or those ``names``) it has not recognised yet (the
    streaming one, with ``options`` (default: the server's), also over those streamed with other
    settings or by another STREAM_VERSION): the streaming one, then each offline one (one model
    loaded at a time)."""
    if names is None:
        names = [p.stem for p in sorted(cache.glob("*.json"))]
    options = options or RecognizerOptions()
    settings = front_end(options, FrontEndOptions())
    streaming = functools.partial(stream_asr, options=options)
    jobs = [("streaming", STREAM_ASR, streaming)] + [("offline", asr, offline_asr) for asr in offline_models]
    for kind, asr, run in jobs:
        model = None
        for name in names:
            path = cache / f"{name}.json"
            rec = json.loads(path.read_text())
            done = rec[kind].get(asr)
            stale = (
                kind == "streaming"
                and done is not None
                and (done.get("front_end") != settings or done.get("version", 1) != STREAM_VERSION)
            )
            if force or done is None or stale:
                model = model or whisper(asr)
                rec[kind][asr] = run(model, recording_audio(rec))
                _save(path, rec)
                done = rec[kind][asr]
                passes = f" ({done['passes']} passes)" if "passes" in done else ""
                print(f"{name}: {kind} {asr} in {done['seconds']} s{passes}", flush=True)


def record(args) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    make_recordings(args, cache)
    names = speech_names(args.only) if args.only else None
    options = config_from_flags(args, RecognizerOptions, prefix="asr-")
    recognise(cache, args.force, options=options, names=names)
    total = time.perf_counter() - t0
    print(f"recorded in {total / 60:.1f} min -> {cache}", flush=True)


# --- score -------------------------------------------------------------------------------------


def model_labels(models: Sequence[str]) -> dict[str, str]:
    """A shipped model by its name, a checkpoint folder by its folder's name (its path where two
    folders share a name)."""
    short = {m: m if m in SHIPPED_MODELS else Path(m).name for m in models}
    clash = {v for v in short.values() if list(short.values()).count(v) > 1}
    return {m: m if v in clash else v for m, v in short.items()}


def has_pause_fusion(p: Punctuator) -> bool:
    return getattr(p.model, "pause_fusion", None) is not None


def systems_for(
    models: dict[str, Punctuator],
    lookaheads: Sequence[int],
    pauses: str,
    words: str = "streamed",
    marks: str = "both",
) -> tuple[list[dict], dict]:
    """The streampunct configurations: model x lookahead x pauses, on ``words`` (see
    :func:`words_to_punctuate`). pauses=on runs only where the stream takes the flag and the
    checkpoint has pause fusion (else it equals pauses=off); with pauses, ``marks`` says whether
    the recogniser's marks are read (on), left off, or both runs are made."""
    supported = stream_has_pauses()
    wanted = {"both": [False, True], "on": [True], "off": [False]}[pauses]
    labels = model_labels(list(models))
    info: dict[str, object] = {
        "requested": pauses,
        "stream_accepts_pauses": supported,
        "pause_fusion": {labels[m]: has_pause_fusion(p) for m, p in models.items()},
        "run": {},
    }
    systems = []
    for m, p in models.items():
        run = [x for x in wanted if not x or (supported and has_pause_fusion(p))] or [False]
        info["run"][labels[m]] = ["on" if x else "off" for x in run]
        reads_marks = p.model.cfg.pause_marks
        for k in lookaheads:
            for pz in run:
                name = f"streampunct {labels[m]} k={k}"
                if supported:
                    name += f" pauses={'on' if pz else 'off'}"
                system = {"name": name, "kind": "streampunct", "model": m, "lookahead": k, "words": words}
                systems.append({**system, "pauses": pz if supported else None})
                if pz and reads_marks:  # the same without the recogniser's marks, then with them
                    off = {**systems[-1], "name": name + " marks=off", "marks": False}
                    on = {**systems[-1], "name": name + " marks=on", "marks": True}
                    systems[-1:] = {"both": [off, on], "on": [on], "off": [off]}[marks]
                # the same without what the recogniser heard (only streamed words carry it)
                if pz and words == "streamed" and getattr(p.model, "hearing", None) is not None:
                    systems.insert(
                        -1, {**systems[-1], "name": systems[-1]["name"] + " heard=off", "heard": False}
                    )
    if words != "streamed":
        on = f"{words.removeprefix('offline:')} offline" if words.startswith("offline:") else words
        systems = [{**s, "name": f"{s['name']}, on {on} words"} for s in systems]
    return systems, info


def whisper_systems(recordings: Sequence[dict]) -> list[dict]:
    out = [
        {"name": f"whisper {STREAM_ASR} streamed, own marks", "kind": "whisper_streamed", "asr": STREAM_ASR}
    ]
    offline = sorted(
        {a for r in recordings for a in r["offline"]},
        key=lambda a: (OFFLINE_ASR.index(a) if a in OFFLINE_ASR else len(OFFLINE_ASR), a),
    )
    out += [{"name": f"whisper {a} offline, own marks", "kind": "whisper_offline", "asr": a} for a in offline]
    return out


def evaluate(
    recordings: Sequence[dict],
    systems: Sequence[dict],
    punctuators: dict[str, Punctuator],
    provisional_lookahead: bool = True,
) -> dict:
    """{system name: {recording name: comparison}} (see :func:`compare`)."""
    refs = {r["name"]: reference(r["text"]) for r in recordings}
    out: dict[str, dict[str, dict]] = {}
    for s in systems:
        out[s["name"]] = {}
        t0 = time.perf_counter()
        for r in recordings:
            if s["kind"] == "streampunct":
                words = s.get("words", "streamed")
                punctuated = words_to_punctuate(r, words)
                if punctuated is None:
                    continue
                hyp = replay(
                    punctuators[s["model"]],
                    punctuated,
                    s["lookahead"],
                    s["pauses"],
                    s.get("marks", True),
                    provisional_lookahead,
                    LIVE_DELAY_MS if words == "streamed" else None,
                    s.get("heard", True),
                )
            elif s["kind"] == "whisper_streamed":
                hyp = whisper_tokens(streamed_words(r["streaming"][STREAM_ASR]))
            elif s["asr"] in r["offline"]:
                hyp = whisper_tokens(r["offline"][s["asr"]]["words"])
            else:
                continue
            out[s["name"]][r["name"]] = compare(*refs[r["name"]], *hyp)
        print(f"scored {s['name']} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return out


def summarise(recordings: Sequence[dict], compared: dict) -> dict:
    """Metrics per system: per recording, per set, and pooled over the recordings of every set but
    the speech sets (no "pooled" where there are none: the speech sets never pool)."""
    sets = [s for s in SETS if any(r["set"] == s for r in recordings)]
    set_of = {r["name"]: r["set"] for r in recordings}
    results: dict[str, dict] = {}
    for system, per_rec in compared.items():
        entry: dict[str, dict] = {"recordings": {n: metrics(c) for n, c in per_rec.items()}, "sets": {}}
        for s in sets:
            parts = [per_rec[r["name"]] for r in recordings if r["set"] == s and r["name"] in per_rec]
            if parts:
                entry["sets"][s] = metrics(pool(parts))
        pooled = [c for n, c in per_rec.items() if set_of[n] not in SPEECH_SPLIT]
        if pooled:
            entry["pooled"] = metrics(pool(pooled))
        results[system] = entry
    return results


def table(results: dict, sets: Sequence[str]) -> str:
    """micro-F1 per set, the pool's micro-F1, macro-F1, SER and WER, and each speech set's WER."""
    speech = [s for s in sets if s in SPEECH_SPLIT]
    head = ["system", *[f"{SETS[s]} F1" for s in sets], "pooled micro-F1", "macro-F1", "SER", "WER"]
    head += [f"{SETS[s]} WER" for s in speech]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system, e in results.items():
        cells = [system]
        cells += [f"{e['sets'][s]['micro_f1']:.1f}" if s in e["sets"] else "" for s in sets]
        p = e.get("pooled")
        cells += [f"{p[k]:.1f}" for k in ("micro_f1", "macro_f1", "ser", "wer")] if p else [""] * 4
        cells += [f"{e['sets'][s]['wer']:.1f}" if s in e["sets"] else "" for s in speech]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- paired bootstrap (the speech sets) -----------------------------------------------------------


def set_units(
    recordings: Sequence[dict], per_rec: dict[str, dict], set_name: str, unit_tokens: int = UNIT_TOKENS
) -> dict[tuple[str, int], np.ndarray]:
    """A system's unit tallies over one set's recordings, keyed (recording, unit)."""
    return {
        (r["name"], u): t
        for r in recordings
        if r["set"] == set_name and r["name"] in per_rec
        for u, t in unit_tallies(per_rec[r["name"]], unit_tokens).items()
    }


def server_system(systems: Sequence[dict]) -> str | None:
    """streampunct's default model at k=2 on the streamed words as the server runs it: pauses on
    where the stream takes them, the recogniser's marks kept. None if it was not scored."""
    for s in systems:
        if s["kind"] != "streampunct" or s["model"] != "default" or s["lookahead"] != 2:
            continue
        if (
            s["pauses"] in (True, None)
            and s.get("marks", True)
            and s.get("heard", True)
            and s.get("words") == "streamed"
        ):
            return s["name"]
    return None


def bootstrap(
    recordings: Sequence[dict],
    compared: dict,
    system: str,
    against: Sequence[str],
    unit_tokens: int = UNIT_TOKENS,
    draws: int = 10000,
    seed: int = 0,
) -> dict:
    """Per speech set, ``system`` against each of ``against`` (``streampunct.scoring.paired``:
    micro-F1 and WER, a - b, 95% intervals, the share of resamples in which ``system`` is worse), on
    the same units."""
    out: dict[str, dict] = {}
    for set_name in SPEECH_SPLIT:
        a = set_units(recordings, compared[system], set_name, unit_tokens)
        if not a:
            continue
        out[set_name] = {}
        for b_name in against:
            b = set_units(recordings, compared[b_name], set_name, unit_tokens)
            if set(b) != set(a):  # b lacks a recording: not the same audio
                continue
            out[set_name][b_name] = paired(a, b, draws, seed, nested=True)
    return out


def chart(results: dict, sets: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [*sets, *(["pooled"] if any("pooled" in e for e in results.values()) else [])]
    names = list(results)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.2 * len(groups) * (1 + 0.15 * len(names))), 5.5))
    x = np.arange(len(groups))
    for n, system in enumerate(names):
        e = results[system]
        ys = [(e.get(g, {}) if g == "pooled" else e["sets"].get(g, {})).get("micro_f1", 0) for g in groups]
        offset = (n - (len(names) - 1) / 2) * width
        bars = ax.bar(x + offset, ys, width, label=system, color=plt.get_cmap("tab20")(n % 20))
        ax.bar_label(bars, fmt="%.0f", fontsize=6, padding=1)
    ax.set_xticks(x, [SETS.get(g, g).replace(" ", "\n", 1) for g in groups])
    ax.set_ylabel("micro-F1 over , . ? (%)")
    ax.set_ylim(0, 100)
    ax.set_title(
        "Punctuating recognised speech: streampunct on streamed tiny.en vs Whisper's own marks", fontsize=10
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


_WORKER: dict = {}  # a scoring worker's recordings and punctuators (score --workers)


def _start_worker(cache: str, models: Sequence[str], device: str) -> None:
    _WORKER["recordings"] = load_recordings(Path(cache))
    _WORKER["punctuators"] = {m: Punctuator.load(m, device=device) for m in models}


def _evaluate_in_worker(system: dict, provisional_lookahead: bool) -> dict:
    return evaluate(_WORKER["recordings"], [system], _WORKER["punctuators"], provisional_lookahead)


def evaluate_parallel(args, systems: Sequence[dict], provisional_lookahead: bool, workers: int) -> dict:
    """:func:`evaluate`, one system at a time in each of ``workers`` processes (each with its share
    of the cores); the same results, in the systems' order."""
    one = functools.partial(_evaluate_in_worker, provisional_lookahead=provisional_lookahead)
    parts = in_processes(one, systems, workers, _start_worker, args.cache, args.models, args.device)
    return {name: per_rec for part in parts for name, per_rec in part.items()}


def score_cmd(args) -> None:
    cache = Path(args.cache)
    recordings = load_recordings(cache)
    punctuators = {m: Punctuator.load(m, device=args.device) for m in args.models}
    systems, pauses = systems_for(punctuators, args.lookaheads, args.pauses, args.words, args.marks)
    systems += whisper_systems(recordings)
    provisional = args.provisional_lookahead == "on"
    if args.workers > 1:
        compared = evaluate_parallel(args, systems, provisional, args.workers)
    else:
        compared = evaluate(recordings, systems, punctuators, provisional)
    results = summarise(recordings, compared)
    sets = [s for s in SETS if any(r["set"] == s for r in recordings)]
    paired_system = args.paired_system or server_system(systems)
    if args.paired_system and args.paired_system not in compared:
        raise SystemExit(f"--paired-system {args.paired_system!r}: no such system was scored")
    against = [
        s["name"]
        for s in systems
        if s["kind"] == "whisper_streamed"
        or (s["kind"] == "whisper_offline" and s["asr"] in OFFLINE_ASR)
        or s.get("heard") is False  # the same stream without what the recogniser heard
    ]
    boot = (
        bootstrap(recordings, compared, paired_system, against, args.unit_tokens, args.draws, BOOTSTRAP_SEED)
        if paired_system in compared
        else {}
    )
    payload = {
        "machine": machine(),
        "command": " ".join(sys.argv),
        "workers": args.workers,
        "cache": str(cache),
        "pauses": pauses,
        "words": args.words,
        "stream": {
            "asr": STREAM_ASR,
            "chunk_s": CHUNK_S,
            "max_delay_ms": LIVE_DELAY_MS if args.words == "streamed" else None,
            "front_end": [r["streaming"][STREAM_ASR].get("front_end") for r in recordings],
            "provisional_lookahead": provisional,
        },
        "recordings": {
            r["name"]: {
                "set": r["set"],
                "seconds": r["seconds"],
                "meta": r["meta"],
                "streaming_seconds": r["streaming"][STREAM_ASR]["seconds"],
                "offline_seconds": {a: o["seconds"] for a, o in r["offline"].items()},
            }
            for r in recordings
        },
        "models": {label: str(checkpoint_dir(m)) for m, label in model_labels(args.models).items()},
        "systems": systems,
        "results": results,
        "paired": {
            "system": paired_system,
            "unit_tokens": args.unit_tokens,
            "draws": args.draws,
            "seed": BOOTSTRAP_SEED,
            "sets": boot,
        },
    }
    print(f"wrote {write_json(f'{args.out}.json', payload)}")
    png = RESULTS / f"{args.out}.png"
    chart(results, sets, png)
    print(f"wrote {png}")
    print(table(results, sets))
    for set_name, pairs in boot.items():
        for against_name, r in pairs.items():
            f, w = r["micro_f1"], r["wer"]
            print(
                f"{set_name} ({r['units']} units, {r['marks']} marks) {paired_system} against "
                f"{against_name}: micro-F1 {f['a']:.1f} vs {f['b']:.1f}, {f['diff']:+.1f} "
                f"[{f['ci95'][0]:+.1f}, {f['ci95'][1]:+.1f}], worse in {100 * f['p_worse']:.1f}%; "
                f"WER {w['a']:.1f} vs {w['b']:.1f}, {w['diff']:+.1f} [{w['ci95'][0]:+.1f}, {w['ci95'][1]:+.1f}]"
            )


# --- quick ---------------------------------------------------------------------------------------


def quick(workdir: Path | None = None) -> tuple[dict, str]:
    """~20 s of espeak-ng conversation (QUICK_TURNS): tiny.en streamed into streampunct default
    at k=2, Whisper's own marks streamed and offline tiny.en. Returns the results and the table."""
    check_tools()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        audio = conversation(QUICK_TURNS, ("en-us+m3", "en-us+f3"), 160, np.random.default_rng(0), work)
        model = whisper(STREAM_ASR)
        rec = {
            "name": "quick",
            "set": "synthetic_conversation",
            "text": " ".join(QUICK_TURNS),
            "seconds": round(len(audio) / SAMPLE_RATE, 2),
            "streaming": {STREAM_ASR: stream_asr(model, audio)},
            "offline": {STREAM_ASR: offline_asr(model, audio)},
        }
    systems = [
        {
            "name": "streampunct default k=2",
            "kind": "streampunct",
            "model": "default",
            "lookahead": 2,
            "pauses": None,
        }
    ]
    systems += whisper_systems([rec])
    results = summarise(
        [rec], evaluate([rec], systems, {"default": Punctuator.load("default", device="cpu")})
    )
    return results, table(results, ["synthetic_conversation"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="make the recordings and run the recognisers (cached)")
    r.add_argument("--data", required=True, help="the shared data folder (audio/, iwslt/test2011)")
    r.add_argument("--cache", required=True, help="folder for the wavs and JSON (outside the repository)")
    r.add_argument(
        "--conv", default=str(REPO.parent / "data_conv" / "chat_test.tsv"), help="held-out chat TSV"
    )
    r.add_argument("--extra-human", default=None, help="folder of NAME.wav/NAME.txt pairs (or .mp3, .flac)")
    r.add_argument("--extra-max-s", type=float, default=None, help="leave out extra clips longer than this")
    r.add_argument(
        "--speech", default=None, help="the conversation_audio folder (ID.mp3, ID.plain.txt): the speech sets"
    )
    r.add_argument(
        "--only",
        choices=["speech", *SPEECH_SPLIT],
        default=None,
        help="make and recognise only these speech recordings (needs --speech); the rest of the cache stays",
    )
    r.add_argument("--force", action="store_true", help="redo what the cache has (with --only, those alone)")
    # the streaming recogniser's settings, as `streampunct serve` takes them (default: the server's);
    # its sentence ends are Whisper's (a recording is the punctuator's input)
    add_config_flags(
        r.add_argument_group("recogniser"),
        RecognizerOptions,
        prefix="asr-",
        switches=True,
        sentence_ends=None,
    )
    s = sub.add_parser("score", help="score the cached recordings")
    s.add_argument("--cache", required=True)
    s.add_argument("--models", nargs="+", default=["default"], help="shipped names or checkpoint folders")
    s.add_argument("--lookaheads", nargs="+", type=int, default=[0, 2])
    s.add_argument("--pauses", choices=["both", "on", "off"], default="both")
    s.add_argument(
        "--marks",
        choices=["both", "on", "off"],
        default="both",
        help="with pauses: read the recogniser's marks",
    )
    s.add_argument("--device", default="cpu")
    s.add_argument(
        "--words",
        choices=WORDS,
        default="streamed",
        help="what streampunct punctuates: the live path's streamed words (default), a recogniser's "
        "offline words (times and marks), or the reference's words (the text model alone)",
    )
    s.add_argument(
        "--provisional-lookahead",
        choices=["on", "off"],
        default="on" if FrontEndOptions.provisional_lookahead else "off",
        help="push each pass's provisional words as lookahead (default %(default)s, the server's)",
    )
    s.add_argument("--out", default="e2e", help="results name: benchmarks/results/OUT.json and OUT.png")
    s.add_argument(
        "--workers", type=int, default=1, help="score that many configurations at once, in processes"
    )
    s.add_argument(
        "--paired-system",
        default=None,
        help="the system the speech sets' paired bootstrap sets against Whisper's own offline marks "
        "(default: streampunct default k=2 as the server runs it)",
    )
    s.add_argument("--unit-tokens", type=int, default=UNIT_TOKENS, help="reference tokens in a unit")
    s.add_argument("--draws", type=int, default=10000, help="bootstrap resamples")
    sub.add_parser("quick", help="20 s of espeak-ng; no data needed")
    args = ap.parse_args()
    if args.cmd == "record":
        record(args)
    elif args.cmd == "score":
        score_cmd(args)
    else:
        results, text = quick()
        print(text)


if __name__ == "__main__":
    main()
