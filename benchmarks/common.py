"""Shared by the benchmarks, and by the tests that run them or a server: not a benchmark itself.
The benchmarks import it, the package and third-party packages, never one another or the tests.
Importing it needs no dev extras: jsonschema is imported only where a reply is validated.

- the machine, timing, and writing results (JSON under benchmarks/results/, tables into the docs);
- audio: clips and their texts, WAVs, faster-whisper's word times on the clips;
- the recordings cache of ``benchmarks/e2e.py record``, and a recorded stream replayed;
- a real ``streampunct serve``: started, stopped, its memory, and espeak-ng speech for /v1/asr;
- talking to a server as the protocol says: each reply validated against its JSON Schema
  (docs/schema/), a short script played on /v1/punct, the final labels read off the replies.

The fuzz's generator, oracle and client are not here: ``benchmarks/fuzz.py`` holds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.asyncio.client import connect

from streampunct.text import normalize, render
from streampunct.types import SAMPLE_RATE, Word

if TYPE_CHECKING:
    from streampunct import Punctuator

ROOT = Path(__file__).parent.parent
RESULTS = Path(__file__).parent / "results"
README = ROOT / "README.md"
PAGES = tuple(
    README.parent / p for p in ("README.md", "docs/results.md", "docs/latency.md")
)  # the tables' pages


def machine() -> dict[str, object]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, object] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }
    return info


def percentile(xs: Iterable[float], q: float) -> float:
    """The q-th percentile (0-100) of xs, nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def time_each(call: Callable[[object], object], items: Iterable[object]) -> list[float]:
    """Seconds taken by ``call(item)`` for each item, one call at a time."""
    times = []
    for item in items:
        t0 = time.perf_counter()
        call(item)
        times.append(time.perf_counter() - t0)
    return times


def time_pushes(p: Punctuator, words: list[str], k: int, engine: str = "masked") -> list[float]:
    """Seconds per push of one stream fed a word at a time."""
    s = p.stream(lookahead=k, engine=engine)
    times = time_each(lambda w: s.push([w]), words)
    s.finish()
    return times


def device_suffix(device: object) -> str:
    """ "" on the CPU, "_cuda" on a GPU: results on each live side by side."""
    kind = str(device).split(":")[0]
    return "" if kind == "cpu" else f"_{kind}"


def write_json(name: str, payload: dict[str, object], setting: str | None = None) -> Path:
    """The benchmark's one current result file. A run of another ``setting`` than the default (an
    engine, int8) goes into the file's ``settings`` under that name; a default run keeps them."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    old = json.loads(path.read_text()) if path.is_file() else {}
    if setting is None:
        data = {**payload, "settings": old["settings"]} if "settings" in old else payload
    else:
        data = {**old, "settings": {**old.get("settings", {}), setting: payload}}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def update_readme(section: str, markdown: str) -> None:
    """Replace the text between <!-- section:start --> and <!-- section:end --> in the README or in
    docs/results.md, wherever the markers are."""
    pattern = re.compile(rf"(<!-- {section}:start -->\n).*?(<!-- {section}:end -->)", re.S)
    for page in PAGES:
        text = page.read_text()
        if pattern.search(text):
            page.write_text(pattern.sub(lambda m: m.group(1) + markdown.rstrip() + "\n" + m.group(2), text))
            return
    raise SystemExit(f"no <!-- {section}:start/end --> markers in {', '.join(p.name for p in PAGES)}")


# --- audio -------------------------------------------------------------------------------------

CLIP_GAP_S = 1.0  # silence between joined clips


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * SAMPLE_RATE)), dtype=np.float32)


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == SAMPLE_RATE and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


AUDIO_SUFFIXES = (".wav", ".mp3", ".flac")


def clip_pairs(folder: Path) -> list[tuple[Path, Path]]:
    """NAME.wav (or .mp3, .flac) with NAME.txt, by name."""
    return [
        (a, a.with_suffix(".txt"))
        for a in sorted(folder.iterdir())
        if a.suffix in AUDIO_SUFFIXES and a.with_suffix(".txt").is_file()
    ]


def transcribe(audio_dir: Path, model_dir: str) -> list[Word]:
    """faster-whisper's words (``model_dir``, int8, greedy) with their times on jfk_16k.wav and the
    LJSpeech clips of ``audio_dir``, the clips one stream, CLIP_GAP_S apart."""
    from faster_whisper import WhisperModel

    asr = WhisperModel(model_dir, device="cpu", compute_type="int8")
    clips = [audio_dir / "jfk_16k.wav", *sorted((audio_dir / "ljspeech").glob("*.wav"))]
    words: list[Word] = []
    offset = 0.0
    for clip in clips:
        segments, info = asr.transcribe(str(clip), language="en", word_timestamps=True, beam_size=1)
        for seg in segments:
            for w in seg.words or []:
                words.append(Word(w.word.strip(), offset + w.start, offset + w.end))
        offset += info.duration + CLIP_GAP_S
    return words


# --- the recordings of benchmarks/e2e.py record --------------------------------------------------

STREAM_ASR = "tiny.en"
SETS = {
    "synthetic_conversation": "synthetic conversation",
    "synthetic_monologue": "synthetic monologue",
    "human": "human",
    "human_extra": "human (extra)",
    "speech_dev": "speech dev",
    "speech_test": "speech test",
}


def streamed_words(asr: dict) -> list[dict]:
    return [w for c in asr["calls"] if "push" in c for w in c["push"]]


def load_recordings(cache: Path) -> list[dict]:
    recs = [json.loads(p.read_text()) for p in sorted(cache.glob("*.json"))]
    recs = [r for r in recs if STREAM_ASR in r.get("streaming", {})]
    if not recs:
        raise SystemExit(f"{cache}: no recorded recordings; run `record` first")
    order = list(SETS)
    return sorted(recs, key=lambda r: (order.index(r["set"]), r["name"]))


# --- a recorded stream replayed ------------------------------------------------------------------


def replay(p: Punctuator, stream: dict[str, Any], k: int, max_delay_ms: float) -> list[dict[str, Any]]:
    """The recorded pushes into a fresh stream of lookahead k: each word with its final label and
    the clock (audio seconds) at which it became final. The recogniser's provisional words go with
    each push as tentative lookahead where the live run had them (``--provisional-lookahead on``)."""
    words = [Word(w["text"], w["start"], w["end"]) for w in stream["words"]]
    s = p.stream(lookahead=k, max_delay_ms=max_delay_ms)
    out = [{"text": w.text, "end": w.end} for w in words]

    def take(events, clock: float) -> None:
        for e in events:
            if e.final:
                out[e.index].update(label=e.label, final=clock)

    for push in stream["pushes"]:
        guess = [Word(w["text"], w["start"], w["end"]) for w in push.get("tentative", [])]
        pushed = words[push["first"] : push["first"] + push["words"]]
        take(s.push(pushed, now=push["now"], tentative=guess), push["clock"])
    take(s.finish(), stream["end_clock"])
    return out


# --- the server ---------------------------------------------------------------------------------


@dataclass
class Server:
    """A ``streampunct serve`` process (:func:`start_server`); its log (stderr) in a file."""

    proc: subprocess.Popen[str]
    url: str
    log: Path
    ray: bool = False  # `streampunct serve-ray`: ``proc`` is Ray's driver, the replicas are other processes

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int | None:
        """SIGTERM, as an operator would; the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def failures_logged(self) -> list[str]:
        """The server's own ``session_failed`` log lines."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if '"session_failed"' in line]


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    *args: str, log: Path | None = None, env: dict[str, str] | None = None, ray: int | None = None
) -> Server:
    """A `streampunct serve` on a free port of 127.0.0.1; its log (stderr) goes to ``log``. ``ray``:
    `streampunct serve-ray` instead, with that many session replicas and one encoder on a local Ray
    (its ``pid`` is the driver's, not the replicas')."""
    if log is None:
        log = Path(tempfile.mkstemp(prefix="streampunct-soak-", suffix=".log")[1])
    # the soak runs speech faster than real time, at full speed by design: admission by load
    # (503 busy) would refuse its sessions; server_load.py's overload section measures that
    command = ["streampunct.server.app", "--port", "0", "--max-load", "off"]
    if ray is not None:
        command = ["streampunct.cli", "serve-ray", "--port", str(free_port()), "--session-replicas", str(ray)]
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", *command, "--host", "127.0.0.1", *args],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
    assert proc.stdout is not None
    line = "-"
    while line and "serving on" not in line:  # Ray may print before it
        line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the server did not start: {line!r}\n{log.read_text()[-2000:]}")
    return Server(proc, line.split()[-1], log, ray is not None)


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process (VmRSS), MB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# --- speech for /v1/asr --------------------------------------------------------------------------

CACHE = Path.home() / ".cache" / "streampunct" / "soak"  # make_speech's WAVs (the soak's, server_load's)
ESPEAK = ("-v", "en-us", "-s", "165", "-g", "4")  # voice, words a minute, gap between words (10 ms)
PIECE_WORDS = 100  # words of text per espeak-ng call: about 35 s of speech
PIECE_GAP_S = 0.4


def speakable(words: Sequence[str], labels: Sequence[str]) -> tuple[list[str], list[str]]:
    """The words espeak-ng can read: no "--", no mojibake."""
    keep = [(w, lab) for w, lab in zip(words, labels) if w.isascii() and normalize(w)]
    return [w for w, _ in keep], [lab for _, lab in keep]


def make_speech(
    words: Sequence[str],
    labels: Sequence[str],
    minutes: float,
    cache: Path = CACHE,
    piece_words: int = PIECE_WORDS,
) -> tuple[Path, int]:
    """A WAV of espeak-ng reading the text (rendered with its marks and casing) for at least
    ``minutes``, made in pieces and joined; cached. Returns the file and the number of words read."""
    if shutil.which("espeak-ng") is None:
        raise RuntimeError("the audio part needs espeak-ng (apt-get install espeak-ng), or --asr-minutes 0")
    words, labels = speakable(words, labels)
    budget = int(minutes * 60 * 4) + piece_words  # words: never more than 4 a second
    version = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout.strip()
    key = hashlib.sha1(
        json.dumps([version, ESPEAK, piece_words, minutes, words[:budget], labels[:budget]]).encode()
    ).hexdigest()[:16]
    path = cache / f"speech-{minutes:g}min-{key}.wav"
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        return path, json.loads(meta.read_text())["words"]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        piece = Path(tmp) / "piece.wav"
        partial = Path(tmp) / "speech.wav"
        out: wave.Wave_write | None = None
        seconds, used = 0.0, 0
        try:
            while seconds < minutes * 60:
                if used >= len(words):
                    raise RuntimeError(f"not enough text for {minutes} minutes of speech")
                chunk = slice(used, used + piece_words)
                text = render(
                    words[chunk], labels[chunk], sentence_start=used == 0 or labels[used - 1] != "O"
                )
                subprocess.run(["espeak-ng", *ESPEAK, "-w", str(piece), text], check=True)
                with wave.open(str(piece), "rb") as w:
                    if out is None:
                        out = wave.open(str(partial), "wb")
                        out.setparams(w.getparams())
                    frames = w.readframes(w.getnframes())
                    gap = b"\0" * (int(PIECE_GAP_S * w.getframerate()) * w.getsampwidth())
                    out.writeframes(frames + gap)
                    seconds += w.getnframes() / w.getframerate() + PIECE_GAP_S
                used += len(words[chunk])
        finally:
            if out is not None:
                out.close()
        shutil.move(partial, path)
    meta.write_text(json.dumps({"words": used, "seconds": seconds}) + "\n")
    return path, used


# --- talking to a server ---------------------------------------------------------------------------

SCHEMAS = ROOT / "docs" / "schema"
WORDS = "so what did you do last summer we went to the coast and it rained every day did n't it".split()


def validate(msg: dict) -> None:
    """Every message the server sends fits its JSON Schema in docs/schema/server/."""
    import jsonschema  # a dev extra: here, so that importing this module needs none

    schema = json.loads((SCHEMAS / "server" / f"{msg['type']}.json").read_text())
    jsonschema.validate(msg, schema)


def spawn_server(*args: str) -> tuple[subprocess.Popen, str]:
    """A ``streampunct serve`` on a free port, on the CPU with one thread; its log (stderr) a pipe.
    The process and its URL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streampunct.server.app", "--port", "0", "--device", "cpu", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split()[-1]


async def talk(url: str, messages: list, lookahead: int = 2) -> list[dict]:
    """Send config then messages (dicts as JSON, bytes as binary); collect replies until end."""
    replies = []
    async with connect(url + "/v1/punct") as ws:
        await ws.send(
            json.dumps({"type": "config", "version": 1, "lookahead": lookahead, "max_delay_ms": None})
        )
        replies.append(json.loads(await ws.recv()))
        for m in messages:
            await ws.send(m if isinstance(m, bytes | str) else json.dumps(m))
        await ws.send(json.dumps({"type": "end"}))
        async for raw in ws:
            replies.append(json.loads(raw))
    for r in replies:
        validate(r)
    return replies


def finals(replies: list[dict]) -> list[str]:
    """Each word's final label, in word order (a word made final twice fails)."""
    out = {}
    for r in replies:
        for e in r.get("events", []):
            if e["final"]:
                assert e["index"] not in out
                out[e["index"]] = e["label"]
    return [out[i] for i in range(len(out))]
