"""End to end: audio in, punctuated words out, against what Whisper users have today.

    python -m benchmarks.e2e record --data ../shared/data --cache ../e2e_cache [--extra-human DIR]
                                    [--speech ../shared/data/conversation_audio]
                                    [--only speech|speech_dev|speech_test]
    python -m benchmarks.e2e score --cache ../e2e_cache [--models default base DIR] [--lookaheads 0 2]
                                   [--pauses both|on|off] [--out e2e] [--workers 2]
                                   [--words streamed|offline:tiny.en|offline:base|reference]
                                   [--paired-system NAME] [--unit-tokens 60] [--draws 10000]
    python -m benchmarks.e2e quick          # 20 s of espeak-ng, no data needed (the test runs this)

Recordings (``record`` writes them under --cache, never into the repository):

- *synthetic conversation*: two recordings of about 5 minutes, espeak-ng reading held-out chat
  text (``--conv``, default ``../data_conv/chat_test.tsv``: ``streampunct prepare-conversation``'s
  test split, conversations in order). The TSV does not mark turns (every turn ends a sentence),
  so one or two sentences (seeded draw) make a turn, turns alternate between two voices, and
  0.3-0.8 s of silence separates them. conv1 reads at 150 wpm (en-us+m3, en-us+f3), conv2 at 175
  (en-us+m1, en-us+f2), from where conv1 stopped.
- *synthetic monologue*: espeak-ng (en-us+m7, 160 wpm) reading the first ~800 words of TED
  test2011 (up to a sentence end).
- *synthetic talk dev* (``--only synthetic_talk_dev``, made only when asked): espeak-ng reading
  three ~800-word pieces of dev2012 (TALK_DEV: voices, rates and offsets), for fitting the live
  decision where the text model is strong; a set of its own, never pooled, never a result.
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
tick: the pause clock; finish) as the server's ``--record`` keeps a live stream's (``settings``,
a default client's, and ``calls``: ``benchmarks/lib/recordings.py``), with the front end's
settings (``front_end``) and ``version`` (STREAM_VERSION); a recording streamed with other
settings or older code is streamed again (one streamed before ``settings`` were kept is read with
a default client's: the same calls). The buffer is trimmed at Whisper's own sentence ends, so the
calls do not depend on the punctuator, and since the passes decode once and greedily, a recording
streams to the same calls every run.
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
On the streamed words, each pauses=off configuration is also run with no time limit
(``limit=off``: the text model alone on the same words, every word waiting for its k), so that the
time limit's cost and each evidence source's part read apart, per recording (a table of the sets
apart: ``recording_table``). ``--models`` takes shipped names and checkpoint folders. ``--words``
says where the gap is: by default streampunct punctuates the live path's streamed words;
``offline:tiny.en`` (or ``base``) gives it the offline recogniser's words, times and marks in one batch instead (the same k, the
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
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, machine, write_json
from benchmarks.lib.e2e_audio import APART, SPEECH_SPLIT, check_tools, conversation, speech_names
from benchmarks.lib.e2e_recognise import (
    CHUNK_S,
    OFFLINE_ASR,
    make_recordings,
    offline_asr,
    recognise,
    stream_asr,
    whisper,
)
from benchmarks.lib.e2e_results import bootstrap, chart, recording_table, server_system, summarise, table
from benchmarks.lib.e2e_systems import (
    LIVE_DELAY_MS,
    WORDS,
    evaluate,
    evaluate_parallel,
    model_labels,
    systems_for,
    whisper_systems,
)
from benchmarks.lib.recordings import SETS, STREAM_ASR, load_recordings
from streampunct import Punctuator
from streampunct.flags import add_config_flags, config_from_flags
from streampunct.options import FrontEndOptions, RecognizerOptions
from streampunct.punctuator import checkpoint_dir
from streampunct.scoring import UNIT_TOKENS
from streampunct.speech import SAMPLE_RATE

REPO = Path(__file__).resolve().parent.parent
BOOTSTRAP_SEED = 0
QUICK_TURNS = (
    "Hi Anna, how was your weekend?",
    "It was great, thanks. We went hiking in the mountains on Saturday.",
    "That sounds lovely. Was the weather good?",
    "Yes, it was sunny and warm. On Sunday we stayed home and cooked dinner for my parents.",
    "Nice. I mostly worked, but I did finish a very good book.",
)


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
    paired = next((s for s in systems if s["name"] == paired_system), {})
    against = [
        s["name"]
        for s in systems
        if s["kind"] == "whisper_streamed"
        or (s["kind"] == "whisper_offline" and s["asr"] in OFFLINE_ASR)
        or s.get("heard") is False  # the same stream without what the recogniser heard
        # its model alone on the same words at its k, with no time limit
        or (
            s.get("limit") is False
            and (s["model"], s["lookahead"]) == (paired.get("model"), paired.get("lookahead"))
        )
    ]
    boot = (
        bootstrap(recordings, compared, paired_system, against, args.unit_tokens, args.draws, BOOTSTRAP_SEED)
        if paired_system in compared
        else {}
    )
    payload = {
        "machine": machine(),
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
    try:
        chart(results, sets, png)
        print(f"wrote {png}")
    except ImportError:  # the results are written: the plot is the extra's
        print("matplotlib is missing: no plot (pip install 'streampunct[bench]')", flush=True)
    print(table(results, sets))
    apart = [s for s in sets if s in APART]
    if apart:
        print(recording_table(results, recordings, apart))
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
        choices=["speech", *SPEECH_SPLIT, "synthetic_talk_dev"],
        default=None,
        help="make and recognise only these recordings (speech sets: needs --speech); the rest of the cache stays",
    )
    r.add_argument("--force", action="store_true", help="redo what the cache has (with --only, those alone)")
    # the streaming recogniser's settings, as the [recognizer] table of `streampunct serve --config`
    # sets them (default: the server's); its sentence ends are Whisper's (a recording is the
    # punctuator's input)
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
