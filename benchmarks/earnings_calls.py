"""Build human-speech test recordings (.wav and reference .txt) from real earnings calls.

The data is a git mirror of github.com/GeminiLn/EarningsCall_Dataset (Qin & Yang, ACL 2019): a
folder per call holds Audio/SPEAKER_PARAGRAPH_SENTENCE.mp3 clips and Text.txt, whose line i should
be the sentence of clip i in (paragraph, sentence) order (SKIP lists where it is not). For each call
this keeps the main speaker's clips, joins them with 0.3 s of silence up to --max-s seconds, and
writes earningscall_<Call>.wav (16 kHz mono 16-bit) and .txt (a sentence a line, ending in .?!).
The third call of docs/latency.md: ``--calls "Twitter, Inc._20170209" --max-s 900`` (875 s).

The repository has no licence: the recordings are for measurement only and must never be committed.
"""

import argparse
import io
import re
import subprocess
import wave
from collections import Counter
from pathlib import Path

import numpy as np
from faster_whisper import decode_audio

RATE = 16000
GAP = np.zeros(int(0.3 * RATE), np.float32)
CALLS = ["Amazon.com Inc._20170202", "3M Company_20170425"]
# Clips and Text.txt lines (1-based) whose audio and text disagree, found by transcribing every
# clip: the operator's words, clips cut mid-sentence or holding two lines, a duplicated clip.
AMAZON_SKIP = ("1_19 2_1 2_2 2_3 2_4 2_5 2_6 4_1 5_1 5_7 6_1", {19, 20, 21, 22, 23, 31, 39, 40, 46})
SKIP = {"Amazon.com Inc._20170202": AMAZON_SKIP}


def git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout


def sentences(repo: str, call: str) -> list[tuple[list[str], str]]:
    """The main speaker's (clip paths, sentence) pairs in order; a line that starts with no
    capital or digit continues the one before (Text.txt splits at "U.S." and "Amazon.com")."""
    paths = git(repo, "ls-tree", "-r", "--name-only", "HEAD", "--", f"{call}/Audio/").decode()
    clips = [(p, *p[:-4].rsplit("/", 1)[1].rsplit("_", 2)) for p in paths.splitlines()]
    clips.sort(key=lambda c: (int(c[2]), int(c[3])))
    lines = git(repo, "show", f"HEAD:{call}/Text.txt").decode().splitlines()
    skip_clips, skip_lines = SKIP.get(call, ("", set()))
    clips = [c for c in clips if f"{c[2]}_{c[3]}" not in skip_clips.split()]
    lines = [s.strip() for i, s in enumerate(lines, 1) if i not in skip_lines]
    if len(clips) != len(lines):
        raise SystemExit(f"{call}: {len(clips)} clips but {len(lines)} lines; check SKIP")
    main = Counter(c[1] for c in clips).most_common(1)[0][0]
    out: list[tuple[list[str], str]] = []
    for path, line in [(c[0], s) for c, s in zip(clips, lines) if c[1] == main]:
        if out and not re.match(r"[A-Z0-9]", line):
            sep = "." if re.match(r"[^\w\s]|com\b", line) else ". "
            out[-1] = (out[-1][0] + [path], out[-1][1] + sep + line)
        else:
            out.append(([path], line))
    return [(p, s if s[-1] in ".?!" else s + ".") for p, s in out]


def build(repo: str, call: str, out: Path, max_s: float) -> None:
    clips: list[np.ndarray] = []
    text: list[str] = []
    for paths, sentence in sentences(repo, call):
        new = [decode_audio(io.BytesIO(git(repo, "show", f"HEAD:{p}")), RATE) for p in paths]
        if sum(len(c) + len(GAP) for c in clips + new) - len(GAP) > max_s * RATE:
            break  # the recording would pass max_s
        clips += new
        text.append(sentence)
    stem = out / ("earningscall_" + re.sub(r"[^A-Za-z0-9_]", "", call))
    audio = np.concatenate([x for clip in clips for x in (GAP, clip)][1:])  # 0.3 s between clips
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    with wave.open(str(stem.with_suffix(".wav")), "wb") as w:
        w.setparams((1, 2, RATE, len(pcm), "NONE", "not compressed"))
        w.writeframes(pcm.tobytes())
    stem.with_suffix(".txt").write_text("\n".join(text) + "\n")
    print(f"{stem}.wav: {len(pcm) / RATE:.1f} s, {len(text)} sentences")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True, help="bare git mirror of EarningsCall_Dataset")
    ap.add_argument("--out", required=True, type=Path, help="folder for the .wav and .txt")
    ap.add_argument("--calls", nargs="+", default=CALLS, help="call folders to build")
    ap.add_argument("--max-s", type=float, default=600.0, help="longest recording, seconds")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for call in args.calls:
        build(args.repo, call, args.out, args.max_s)


if __name__ == "__main__":
    main()
