"""The text model fine-tuned on speech dev's recognised words, one run per recording left out (issue 73).

    python -m benchmarks.folds --cache E2E --conv CONV --out FOLDS [--model default|base] [--steps 250]
                               [--folds CAR0001 CAR0002 GAS0001 GAS0002 all] [--heard ASR_TRAIN]
                               [--threads 1] [--device cpu]
    python -m benchmarks.text_alone --cache E2E --left-out FOLDS/MODEL --out ...   # scores them

E2E is ``python -m benchmarks.e2e record --only speech_dev``'s cache, CONV ``streampunct
prepare-conversation``'s folder. Each fold fine-tunes the shipped MODEL (``--init``) on a mix without
one speech dev recording, the fold named after the recording it leaves out; ``all`` keeps every one
(the run that would ship). ``FOLDS/MODEL/NAME`` is the run folder (``best/``, ``last.pt``: rerun the
same command to go on where it stopped) and, once done, a checkpoint link for ``text_alone
--left-out``. The recipe (runE of docs/decisions.md, 2026-12-02; on base: runG):

- **labels**: the fold's recordings as each recogniser heard them, with the reference's own words
  (``asr_corpus.from_recordings``: the reference's marks carried onto each), ``SPEECH_REPEAT`` times;
  then ``SPEECHLIKE_WORDS`` of speech-like TED (CONV/ted_speechlike.tsv), and with ``--heard``
  a recogniser's words of other speech (``streampunct.training.asr_corpus``'s asr_train.tsv);
- **taught** (``--taught``, the model's shipped self teaching at ``DISTILL``): ``TED_WORDS`` of TED
  and ``CHAT_WORDS`` of chit-chat train, whose own marks cost the consultations (runC, runD);
- 16 windows of 128 words a step, ``LR`` after ``WARMUP`` steps, decaying to zero at ``--steps``;
  30 % of the batches train the window engine. Dev: chit-chat dev's first ``DEV_WORDS``, ``EVALS``
  times a run; ``best/`` is the best of them (k=2 and offline averaged), never chosen on speech.

Speed on 2 AMD EPYC cores, one thread a fold: the default 4 s a step, base 27 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benchmarks.lib.e2e_audio import SPEECH_SPLIT
from streampunct.cli import _data_flag
from streampunct.punctuator import checkpoint_dir
from streampunct.training.asr_corpus import from_recordings

SPEECH_REPEAT = 8
SPEECHLIKE_WORDS = 100_000
TED_WORDS = 150_000
CHAT_WORDS = 150_000
DISTILL = 1.0
LR = 5e-5
WARMUP = 20
DEV_WORDS = 3000
EVALS = 5  # a run's dev evaluations, each saving last.pt (a run cut short goes on from there)
ALL = "all"


def head(src: Path, words: int) -> str:
    """The first ``words`` lines (tokens) of a word<TAB>LABEL file."""
    lines = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            lines.append(line)
            if len(lines) == words:
                break
    return "".join(lines)


def taught_text(conv: Path, ted: Path, out: Path) -> Path:
    path = out / "taught.tsv"
    if not path.exists():
        path.write_text(head(ted, TED_WORDS) + head(conv / "chat_train.tsv", CHAT_WORDS), encoding="utf-8")
    return path


def fold_text(cache: Path, conv: Path, fold: str, out: Path, other: Path | None = None) -> Path:
    """The labelled text of a fold: every speech dev recording but the one it leaves out (and
    ``other``, a recogniser's words of other speech with its marks carried on, where given)."""
    path = out / f"train_{fold}.tsv"
    if not path.exists():
        names = [n for n in SPEECH_SPLIT["speech_dev"] if n != fold]
        heard = out / f"heard_{fold}"
        from_recordings(cache, names, heard)
        speech = (heard / "asr_train.tsv").read_text(encoding="utf-8")
        path.write_text(
            speech * SPEECH_REPEAT
            + head(conv / "ted_speechlike.tsv", SPEECHLIKE_WORDS)
            + (other.read_text(encoding="utf-8") if other else ""),
            encoding="utf-8",
        )
    return path


def train_fold(args: argparse.Namespace, fold: str, taught: Path, out: Path) -> Path:
    """Train (or go on training) one fold; its checkpoint, linked as OUT/FOLD."""
    run = out / "runs" / fold
    link = out / fold
    if link.exists():
        return link
    shipped = checkpoint_dir(args.model)
    argv = [
        sys.executable, "-m", "streampunct", "train",
        "--init", str(shipped), "--teacher", str(shipped), "--taught", str(taught), "--distill", str(DISTILL),
        "--train", str(fold_text(Path(args.cache), Path(args.conv), fold, out, args.heard)),
        "--dev", str(Path(args.conv) / "chat_dev.tsv"), "--dev-words", str(DEV_WORDS),
        "--out", str(run), "--lr", str(LR), "--warmup", str(WARMUP), "--max-steps", str(args.steps),
        "--eval-every", str(max(1, args.steps // EVALS)), "--patience", str(EVALS), "--batch", "16", "--window-share", "0.3",
        "--threads", str(args.threads), "--device", args.device, "--seed", str(args.seed),
    ]  # fmt: skip
    subprocess.run(argv, check=True)
    link.symlink_to(Path("runs") / fold / "best")
    return link


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cache", required=True, help="benchmarks.e2e record's cache (speech dev)")
    ap.add_argument("--conv", required=True, help="streampunct prepare-conversation's folder")
    ap.add_argument("--ted", **_data_flag("ted", "ted_train.tsv"))
    ap.add_argument("--out", required=True, help="FOLDS: the runs go to FOLDS/MODEL/")
    ap.add_argument("--model", default="default", help="the shipped model that starts and teaches")
    ap.add_argument("--folds", nargs="+", default=[*SPEECH_SPLIT["speech_dev"], ALL])
    ap.add_argument("--heard", type=Path, help="asr_corpus's asr_train.tsv, into every fold's labels")
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    unknown = set(args.folds) - {*SPEECH_SPLIT["speech_dev"], ALL}
    if unknown:
        ap.error(f"not a speech dev recording: {', '.join(sorted(unknown))}")
    if args.ted is None:
        ap.error("--ted is required (or set $STREAMPUNCT_DATA)")
    out = Path(args.out) / args.model
    out.mkdir(parents=True, exist_ok=True)
    taught = taught_text(Path(args.conv), Path(args.ted), out)
    for fold in args.folds:
        print(f"{fold}: {train_fold(args, fold, taught, out)}", flush=True)


if __name__ == "__main__":
    main()
