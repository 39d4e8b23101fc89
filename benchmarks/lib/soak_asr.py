"""The soak's /v1/asr traffic (``python -m benchmarks.soak``): one session of continuous speech, its
committed words and final events checked; the speech with long pauses and a looped sentence."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.lib.soak_checks import FinalCheck, SessionReport
from benchmarks.lib.speech import ESPEAK
from streampunct import protocol as P

# --- /v1/asr: continuous speech --------------------------------------------------------------------


async def asr_session(
    url: str, audio: Any, cfg: dict[str, Any], report: SessionReport, speed: float = 0
) -> SessionReport:
    """One /v1/asr session: the audio as fast as the server reads it (``speed`` 0; 1: real time);
    committed words and their final events checked."""
    from streampunct.clients.file import stream_file

    t0 = time.perf_counter()
    report.audio_s = len(audio) / 16000
    try:
        result = await stream_file(url, audio, speed, P.Config(**cfg))
    except Exception as e:  # SessionLost and the like: the session failed, its message says how
        report.failure = f"{type(e).__name__}: {e}"
        report.wall_s = time.perf_counter() - t0
        return report
    report.wall_s = time.perf_counter() - t0
    late = sorted(x for x in result.latencies if x == x)  # NaN when not paced
    if late:
        report.latency_s = {
            q: round(late[min(len(late) - 1, int(f * len(late)))], 2) for q, f in LATENCY_QUANTILES
        }
    finals = FinalCheck()
    committed: list[int] = []
    for _, msg in result.timeline:
        kind = msg["type"]
        if kind == "words":
            committed += [w["index"] for w in msg["committed"]]
        elif kind == "events":
            for e in msg["events"]:
                if e["final"]:
                    finals.add(e)
        elif kind == "caption":
            report.captions += 1
        elif kind == "lag":
            report.lags += 1
            report.skipped_s += msg["skipped_s"]
        elif kind == "error":
            if msg["code"] == "internal":
                report.failure = f"internal: {msg['message']}"
            else:
                report.errors.append(f"{msg['code']}: {msg['message']}")
        elif kind == "ready":
            report.engine = msg.get("engine")
    if not result.end:
        report.failure = report.failure or "no end message"
        return report
    report.server_words = result.end.words
    report.words = len(committed)
    if committed != list(range(len(committed))):
        report.problems.append("committed word indices are not 0, 1, 2, ...")
    if report.server_words != report.words:
        report.problems.append(
            f"the server counted {report.server_words} words, {report.words} were committed"
        )
    report.words_one_final = finals.result(report.words)
    report.problems += finals.problems
    return report


LATENCY_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("max", 1.0))
TRAP_SENTENCE = "I do not know what you mean."
ROOM_NOISE = 1e-3  # a pause is quiet, not digital silence: noise at about -60 dBFS


def hours_audio(
    audio: Any, pause_every_s: float, pause_s: tuple[float, float] | None, trap: int, seed: int
) -> tuple[Any, dict[str, Any]]:
    """The soak's speech with long pauses and a looped sentence: after every ``pause_every_s`` of
    speech (cut where espeak-ng's pieces meet, in their silence) a pause of ``pause_s`` seconds
    (uniform; room noise); in the middle pause, ``trap`` copies of one sentence back to back (a
    recogniser's loop trap). Returns the audio and where its parts are (seconds)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rate = 16000
    quiet = np.flatnonzero(
        np.convolve(audio == 0, np.ones(rate // 5), "valid") == rate // 5
    )  # 0.2 s of zeros
    cuts, target = [], pause_every_s * rate
    while pause_s is not None and len(quiet) and target < len(audio):
        at = quiet[np.searchsorted(quiet, target).clip(max=len(quiet) - 1)] + rate // 10
        if at <= (cuts[-1] if cuts else 0):
            break
        cuts.append(int(at))
        target = at + pause_every_s * rate
    parts, layout, start = [], {"pauses": [], "trap": None}, 0
    for i, cut in enumerate([*cuts, len(audio)]):
        parts.append(audio[start:cut])
        start = cut
        if cut == len(audio):
            break
        at = sum(map(len, parts)) / rate
        seconds = float(rng.uniform(*pause_s)) if pause_s else 0.0
        noise = (ROOM_NOISE * rng.standard_normal(int(seconds * rate))).astype(np.float32)
        if trap and i == len(cuts) // 2:
            loop = np.concatenate([trap_sentence(), np.zeros(rate // 4, np.float32)] * trap)
            half = len(noise) // 2
            parts += [noise[:half], loop, noise[half:]]
            layout["trap"] = {
                "start": round(at + half / rate, 2),
                "seconds": round(len(loop) / rate, 2),
                "copies": trap,
            }
        else:
            parts.append(noise)
        layout["pauses"].append({"start": round(at, 2), "seconds": round(seconds, 2)})
    return np.concatenate(parts), layout


def trap_sentence() -> Any:
    """TRAP_SENTENCE, read by espeak-ng, 16 kHz float32."""
    import subprocess
    import tempfile

    from streampunct.clients.file import load_audio

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "trap.wav"
        subprocess.run(["espeak-ng", *ESPEAK, "-w", str(wav), TRAP_SENTENCE], check=True)
        return load_audio(str(wav))
