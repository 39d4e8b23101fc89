"""The recognisers of ``python -m benchmarks.e2e record``: the live path up to the punctuator (the
caption pipeline on a simulated clock, every call it makes kept) and faster-whisper offline, over
the recordings it makes once (cached as JSON)."""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.lib.e2e_audio import (
    CONVERSATIONS,
    TALK_DEV,
    check_tools,
    clip_seconds,
    join_clips,
    make_conversations,
    make_monologue,
    make_talks,
    recording_audio,
    speech_names,
    speech_recordings,
    write_wav,
)
from benchmarks.lib.recordings import STREAM_ASR, as_recording, clip_pairs
from streampunct.options import FrontEndOptions, RecognizerOptions
from streampunct.pipeline import CaptionPipeline, call_to_json, simulate
from streampunct.speech import SAMPLE_RATE, StreamingRecognizer, load_whisper

CHUNK_S = 0.25  # audio fed to the recogniser per step (as streampunct/clients/file.py sends it)
# The live path's code, where it changes what a stream hears without a setting: 2 since the
# recogniser's passes decode once, with no temperature fallback (2026-11-26; before it, 1, the same
# audio streamed twice could give other words); 3 since the recording is the caption pipeline's
# calls (streampunct.pipeline: the pause clock's ticks, the server's push clock; 2026-11-28).
# ``record`` streams again a recording streamed before.
STREAM_VERSION = 4  # 4: words carry what the recogniser heard at their ends (cues)
OFFLINE_ASR = ("tiny.en", "base")


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
    punctuation stream, with the clock, as a recording (``settings``, a default client's, and
    ``calls``: :func:`benchmarks.lib.recordings.as_recording`, the server's ``--record`` format). The
    recogniser's sentence ends are Whisper's, so that the recording does not depend on the punctuator."""
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
        **as_recording([call_to_json(call, clock) for clock, call in run.calls]),
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
    talks = args.only == "synthetic_talk_dev"
    if talks and (args.force or not all((cache / f"{t[0]}.json").is_file() for t in TALK_DEV)):
        check_tools()
        dev2012 = Path(args.data) / "iwslt" / "dev2012"
        with tempfile.TemporaryDirectory() as tmp:
            for name, text, audio, meta in make_talks(dev2012, Path(tmp)):
                _save_made(cache, name, "synthetic_talk_dev", text, audio, {**meta, "source": str(dev2012)})
    if talks:
        return
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
    for made_one in made:
        _save_made(cache, *made_one)


def _save_made(cache: Path, name: str, set_name: str, text: str, audio: np.ndarray, meta: dict) -> None:
    """A recording made here: its wav under ``cache/audio`` and its JSON, not yet recognised."""
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


def _recorded(front_end: dict | None, settings: dict) -> dict | None:
    """A recording's front-end settings without the options the front end no longer has (a
    removed option changed nothing that is still run, e.g. AlignAtt's ``commit``)."""
    return None if front_end is None else {k: v for k, v in front_end.items() if k in settings}


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
                and (
                    _recorded(done.get("front_end"), settings) != settings
                    or done.get("version", 1) != STREAM_VERSION
                )
            )
            if force or done is None or stale:
                model = model or whisper(asr)
                rec[kind][asr] = run(model, recording_audio(rec))
                _save(path, rec)
                done = rec[kind][asr]
                passes = f" ({done['passes']} passes)" if "passes" in done else ""
                print(f"{name}: {kind} {asr} in {done['seconds']} s{passes}", flush=True)
