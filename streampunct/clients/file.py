"""Caption an audio file through the server, at real-time speed or faster.

    python -m streampunct.clients.file talk.wav [--speed 1] [--url ws://127.0.0.1:8765] [--out talk]

The file (WAV, FLAC, MP3: anything PyAV decodes) is resampled to 16 kHz mono and sent to /v1/asr
in chunks, paced like live audio (``--speed 4`` sends four times faster, ``--speed 0`` as fast as
possible; the server recognises it as fast as it can, and the client says when that is slower than
``--speed``). Each caption line is printed when it is final, with its latency: the seconds from the
end of its last word in the audio, as sent at ``--speed``, to the moment the caption arrived. At
the end ``OUT.srt`` and ``OUT.vtt`` are written (``--out``, default: the audio file's name), their
cues laid out by broadcast rules (at most ``--max-line-chars`` a line, ``--max-lines`` a cue). A
session lost on the way (the server failed or the connection dropped) still writes the captions
received, says what happened in one line and exits with status 1; Ctrl-C writes those shown, exit
status 130.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from streampunct import protocol as P
from streampunct.captions import Caption
from streampunct.clients.common import (
    ClientError,
    Interrupted,
    Recognition,
    SessionLost,
    Transcript,
    add_stream_args,
    add_subtitle_args,
    messages,
    open_stream,
    run_client,
    send_then_finish,
    server_says,
    stream_config,
)
from streampunct.flags import Parser

CHUNK_S = 0.25


def check_file(path: str) -> None:
    if Path(path).is_dir():
        raise ClientError(f"{path}: a folder, not an audio file")
    if not Path(path).is_file():
        raise ClientError(f"{path}: no such file")


def load_audio(path: str) -> np.ndarray:
    check_file(path)
    try:
        from faster_whisper import decode_audio
    except ImportError as e:
        raise ClientError("decoding audio needs faster-whisper: pip install 'streampunct[asr]'") from e
    try:
        audio: np.ndarray = decode_audio(path, sampling_rate=16000)
    except Exception as e:  # PyAV's errors are many; one sentence for all
        raise ClientError(f"{path}: cannot decode audio ({e})") from e
    return audio


@dataclass
class Result:
    captions: list[Caption] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # per caption, seconds after its speech was sent
    timeline: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (audio clock, message)
    end: P.Finished | None = None
    started: float = 0.0  # time.monotonic() when the first audio was sent (audio clock 0)


async def stream_file(
    url: str,
    audio: np.ndarray,
    speed: float,
    config: P.Config,
    on_caption: Any = None,
    token: str | None = None,
    transcript: Transcript | None = None,
) -> Result:
    """Send the audio paced at ``speed``; collect every message with the audio clock at its arrival.
    A session that ends before the server's ``end`` raises SessionLost (``on_caption`` has seen
    every caption that arrived, ``transcript`` every message)."""
    ws, _ = await open_stream(url, "/v1/asr", config, token)
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(CHUNK_S * 16000) * 2
    result = Result(started=time.monotonic())
    t0 = time.perf_counter()
    pace = speed if speed > 0 else float("inf")

    def audio_clock() -> float:  # audio seconds sent so far, by the wall clock
        return (time.perf_counter() - t0) * pace

    recognition = Recognition(speed=speed)

    async def receive() -> None:
        async for msg in messages(ws):
            result.timeline.append((audio_clock(), msg.to_dict()))
            recognition.see(msg)
            if transcript is not None:
                transcript.see(msg)
            match msg:
                case P.Captioned(c):
                    result.captions.append(c)
                    after = time.perf_counter() - t0 - (c.end or 0.0) / pace  # the wall clock's seconds
                    late = max(0.0, after) if pace != float("inf") else float("nan")
                    result.latencies.append(late)
                    if on_caption:
                        on_caption(c, late)
                case P.Error(code, message):
                    server_says(f"{code}: {message}")
                case P.Finished():
                    result.end = msg

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(pcm), step):
            yield pcm[i : i + step]
            if pace != float("inf"):
                ahead = (i + step) / 2 / 16000 / pace - (time.perf_counter() - t0)
                if ahead > 0:
                    await asyncio.sleep(ahead)

    async with ws:
        await send_then_finish(ws, chunks(), asyncio.create_task(receive()))
    return result


async def main(args: argparse.Namespace) -> int:
    audio = load_audio(args.audio)
    transcript = Transcript.of(args)
    prefix = None if args.no_subtitles else args.out or Path(args.audio).stem

    def show(c: Caption, latency: float) -> None:
        lag = "" if latency != latency else f", {latency:3.1f}s late"  # NaN when not paced
        print(f"[{c.start or 0:7.2f}s{lag}] {c.text}", flush=True)

    config = stream_config(args)
    try:
        result = await stream_file(args.url, audio, args.speed, config, show, args.token, transcript)
    except SessionLost as lost:
        raise transcript.keep(lost, prefix) from lost
    except asyncio.CancelledError:  # Ctrl-C
        raise transcript.keep(Interrupted("interrupted"), prefix) from None
    lat = result.latencies
    if lat and args.speed > 0:
        print(
            f"{len(lat)} captions; latency median {statistics.median(lat):.2f} s, max {max(lat):.2f} s",
            file=sys.stderr,
        )
    if prefix is not None:
        for p in transcript.write(prefix):
            print(f"wrote {p}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="streampunct file", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("audio", help="WAV, FLAC or MP3 file")
    ap.add_argument("--speed", type=float, default=1.0, help="1: real time (default); 0: as fast as possible")
    ap.add_argument("--out", help="prefix of the .srt and .vtt files (default: the audio file's name)")
    ap.add_argument("--no-subtitles", action="store_true", help="write no .srt/.vtt")
    add_stream_args(ap)
    add_subtitle_args(ap)
    return ap


def cli(argv: list[str] | None = None) -> int:
    return run_client(main, build_parser(), argv, check=lambda args: check_file(args.audio))


if __name__ == "__main__":
    sys.exit(cli())
