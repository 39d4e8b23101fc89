"""Caption latency, live: audio streamed at real-time speed through a real server.

    python benchmarks/caption_latency.py --audio ../shared/data/audio [--asr-model tiny.en] [--speed 1]

A `streampunct serve` process is started; jfk_16k.wav and the LJSpeech clips are each streamed to
/v1/asr at real-time speed, one after the other. For every word: the time from its end in the
audio to the arrival of the final, punctuated caption line that contains it (audio seconds, which
are wall seconds at --speed 1). Median and p95 over all words, per clip and overall.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, percentile, update_readme, write_json  # noqa: E402

from clients.file import load_audio, stream_file  # noqa: E402


def word_latencies(result) -> list[float]:
    ends: dict[int, float] = {}
    out = []
    for clock, msg in result.timeline:
        if msg["type"] == "words":
            for w in msg["committed"]:
                ends[w["index"]] = w["end"]
        elif msg["type"] == "caption":
            out += [clock - ends[i] for i in range(msg["first"], msg["last"] + 1) if i in ends]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio", required=True)
    ap.add_argument("--asr-model", default="tiny.en")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--lookahead", type=int, default=2)
    ap.add_argument("--max-delay-ms", type=float, default=1500)
    ap.add_argument("--readme", action="store_true")
    args = ap.parse_args()

    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.app",
            "--port",
            "0",
            "--preload-asr",
            "--asr-model",
            args.asr_model,
            "--device",
            "cpu",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = server.stdout.readline().split()[-1]  # type: ignore[union-attr]
    audio_dir = Path(args.audio)
    clips = [audio_dir / "jfk_16k.wav", *sorted((audio_dir / "ljspeech").glob("*.wav"))]
    config = {"lookahead": args.lookahead, "max_delay_ms": args.max_delay_ms}
    per_clip, all_words = [], []
    try:
        for clip in clips:
            result = asyncio.run(stream_file(url, load_audio(str(clip)), args.speed, config))
            lat = word_latencies(result)
            all_words += lat
            per_clip.append(
                {"clip": clip.name, "words": len(lat), "median_s": statistics.median(lat), "max_s": max(lat)}
            )
            print(
                f"{clip.name}: {len(lat)} words, median {statistics.median(lat):.2f} s, max {max(lat):.2f} s",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    payload = {
        "machine": machine(),
        "asr_model": args.asr_model,
        "speed": args.speed,
        "lookahead": args.lookahead,
        "max_delay_ms": args.max_delay_ms,
        "words": len(all_words),
        "median_s": statistics.median(all_words),
        "p95_s": percentile(all_words, 95),
        "max_s": max(all_words),
        "clips": per_clip,
    }
    print(f"all: {len(all_words)} words, median {payload['median_s']:.2f} s, p95 {payload['p95_s']:.2f} s")
    print(f"wrote {write_json('caption_latency.json', payload)}")
    if args.readme:
        m = payload["machine"]
        update_readme(
            "latency",
            f"Caption latency (word end in the audio to its final punctuated caption), {payload['words']} words of "
            f"jfk + 16 LJSpeech clips streamed live: **median {payload['median_s']:.2f} s, p95 {payload['p95_s']:.2f} s**, "
            f"max {payload['max_s']:.2f} s; {args.asr_model}, int8, lookahead {args.lookahead}, time limit "
            f"{args.max_delay_ms:.0f} ms, on {m['cpu']} ({m['cores']} cores), {m['date']}. "
            "`python benchmarks/caption_latency.py --audio ../shared/data/audio`.",
        )


if __name__ == "__main__":
    main()
