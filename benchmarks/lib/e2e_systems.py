"""The systems ``python -m benchmarks.e2e score`` compares: streampunct's configurations (model x
lookahead x pauses x marks) replayed over each recording's calls, and Whisper's own marks; each
scored against the reference (``evaluate``), in worker processes too (``evaluate_parallel``)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.lib.e2e_recognise import OFFLINE_ASR
from benchmarks.lib.recordings import STREAM_ASR, as_recording, load_recordings, recording_of, streamed_words
from streampunct import Punctuator, pipeline
from streampunct.options import StreamOptions
from streampunct.processes import in_processes
from streampunct.punctuator import SHIPPED_MODELS
from streampunct.scoring import compare, reference, whisper_tokens, word_tokens

# The streamed words' time limit: the clients' default, in their recordings' settings (the other words
# have none: predict's labels).
LIVE_DELAY_MS = StreamOptions.max_delay_ms
WORDS = ("streamed", *(f"offline:{a}" for a in OFFLINE_ASR), "reference")  # score --words


def stream_has_pauses() -> bool:
    return "pauses" in inspect.signature(Punctuator.stream).parameters


def replay(
    p: Punctuator,
    asr: dict,
    lookahead: int,
    pauses: bool | None,
    marks: bool = True,
    provisional_lookahead: bool = True,
    heard: bool = True,
    limit: bool = True,
) -> tuple[list[str], list[str]]:
    """A recording's calls (see :func:`stream_asr`) through a fresh stream of lookahead k, with
    the recording's time limit and engine (:func:`streampunct.pipeline.replay`; ``pauses`` None:
    the stream's default); its words and their final labels as tokens. Without ``marks``, the
    recogniser's own marks are taken off its words first (a recogniser that writes none); without
    ``provisional_lookahead``, no tentative words; without ``heard``, no cues (what the
    recogniser heard at the words' ends); without ``limit``, no time limit (every word waits for
    its k words)."""
    kwargs = {} if pauses is None else {"pauses": pauses}
    settings, calls = recording_of(asr)
    if not limit:
        settings = {**settings, "max_delay_ms": None}
    out = pipeline.replay(
        p, (settings, calls), lookahead, **kwargs, marks=marks, tentative=provisional_lookahead, cues=heard
    )
    assert all("label" in w for w in out), "every word gets one final label"
    return word_tokens([w["text"] for w in out], [w["label"] for w in out])


def words_to_punctuate(recording: dict, words: str) -> dict | None:
    """The words streampunct punctuates, as a recorded stream (see :func:`replay`): the live path's
    (``streamed``, with the clients' time limit), a recogniser's offline words with their times and
    marks in one batch (``offline:tiny.en``), or the reference's own words, lower case, with no
    times or marks (``reference``: the text model alone); these two with no time limit. None where
    the recording has no such words."""
    if words == "streamed":
        return recording["streaming"][STREAM_ASR]
    if words == "reference":
        ws = [{"text": t, "start": None, "end": None} for t in reference(recording["text"])[0]]
    else:
        offline = recording["offline"].get(words.removeprefix("offline:"))
        if offline is None:
            return None
        ws = offline["words"]
    return as_recording([{"push": ws, "now": None, "tentative": []}, {"finish": True}], max_delay_ms=None)


# --- score -------------------------------------------------------------------------------------


def model_labels(models: Sequence[str]) -> dict[str, str]:
    """A shipped model by its name, a checkpoint folder by its folder's name (its path where two
    folders share a name)."""
    short = {m: m if m in SHIPPED_MODELS else Path(m).name for m in models}
    clash = {v for v in short.values() if list(short.values()).count(v) > 1}
    return {m: m if v in clash else v for m, v in short.items()}


def has_pause_fusion(p: Punctuator) -> bool:
    return p.decider.pause_fusion is not None


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
                if not pz and words == "streamed":  # the text model alone: the time limit's cost
                    systems.append({**system, "name": name + " limit=off", "pauses": False, "limit": False})
                systems.append({**system, "pauses": pz if supported else None})
                if pz and reads_marks:  # the same without the recogniser's marks, then with them
                    off = {**systems[-1], "name": name + " marks=off", "marks": False}
                    on = {**systems[-1], "name": name + " marks=on", "marks": True}
                    systems[-1:] = {"both": [off, on], "on": [on], "off": [off]}[marks]
                # the same without what the recogniser heard (only streamed words carry it)
                if pz and words == "streamed" and p.decider.hearing is not None:
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
                    s.get("heard", True),
                    s.get("limit", True),
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
