"""POS tagger accuracy on ASR-style English-EWT test, offline and streaming, and its cost per word.

    python -m benchmarks.tagger --ewt ../shared/data/ud_ewt [--tagger DIR --name NAME] [--readme]
    python -m benchmarks.tagger --docs-only      # docs/results.md's table from the saved results

Without --tagger it measures the shipped tagger (flair's, results/tagger.json); with --tagger DIR
a candidate such as one from `streampunct train-tagger` (results/tagger_NAME.json). The table in
docs/results.md shows every candidate measured (KEPT: those whose files git keeps).

ASR style is what a recogniser delivers (:func:`streampunct.training.tagger_train.read_asr_style`): every word
lower case, punctuation removed, and no sentence boundaries: each document is tagged as one
continuous stream of words. Tags are Penn Treebank tags, scored against EWT's XPOS column.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, machine, percentile, time_each, update_readme, write_json
from benchmarks.lib import doc_text
from benchmarks.lib.model_sources import resolve
from streampunct.pos import Tagger, installed_tagger
from streampunct.training.tagger_train import read_asr_style

# Candidates whose result files left the tree: the table shows them as git kept them.
KEPT = ("tagger_EWT-tuned.json@8b63caf",)


def accuracy(pred: list[list[str]], gold: list[list[str]]) -> float:
    pairs = [(p, g) for ps, gs in zip(pred, gold) for p, g in zip(ps, gs)]
    return 100 * sum(p == g for p, g in pairs) / len(pairs)


def push_times(tagger: Tagger, words: list[str], k: int) -> list[float]:
    stream = tagger.stream(k)
    times = time_each(stream.push, words)
    stream.finish()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ewt", help="folder with en_ewt-ud-test.conllu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pushes", type=int, default=2000, help="timed pushes for the cost per word")
    ap.add_argument("--tagger", help="a tagger folder to measure (default: the shipped tagger)")
    ap.add_argument("--name", default="ewt", help="its name in results/tagger_NAME.json and the table")
    ap.add_argument("--readme", action="store_true")
    ap.add_argument("--docs-only", action="store_true", help="rewrite the table from the saved results")
    args = ap.parse_args()
    if args.docs_only:
        update_readme("tagger", table(sources()))
        return
    if not args.ewt:
        ap.error("--ewt is required (unless --docs-only)")

    torch.set_num_threads(args.threads)
    tagger = Tagger.load(args.tagger)
    docs = read_asr_style(Path(args.ewt) / "en_ewt-ud-test.conllu")
    words = [d[0] for d in docs]
    gold = [d[1] for d in docs]
    n = sum(len(w) for w in words)

    t0 = time.perf_counter()
    offline = [tagger.tag(w) for w in words]
    offline_s = time.perf_counter() - t0
    rows = {"offline": {"accuracy": accuracy(offline, gold), "words_per_second": n / offline_s}}
    for k in (0, 2):
        t0 = time.perf_counter()
        streamed = [tagger.tag(w, lookahead=k) for w in words]
        rows[f"k={k}"] = {
            "accuracy": accuracy(streamed, gold),
            "agreement_with_offline": accuracy(streamed, offline),
            "words_per_second": n / (time.perf_counter() - t0),
        }
        print(f"k={k}: {rows[f'k={k}']}", flush=True)
    print(f"offline: {rows['offline']}", flush=True)

    sample = [w for doc in words for w in doc][: args.pushes]
    push_times(tagger, sample[:100], 2)  # warm-up
    times = push_times(tagger, sample, 2)
    cost = {
        "pushes": len(times),
        "p50_ms": 1000 * percentile(times, 50),
        "p99_ms": 1000 * percentile(times, 99),
        "mean_ms": 1000 * statistics.fmean(times),
    }
    print(f"stream k=2 cost per word: {cost}", flush=True)
    payload = {
        "machine": machine(),
        "tagger": "flair pos-english-fast" if args.tagger is None else args.name,
        "source": json.loads((installed_tagger(args.tagger) / "tagger.json").read_text())["source"],
        "threads": args.threads,
        "data": "UD English-EWT test, ASR style (lower case, no punctuation, documents as streams)",
        "documents": len(docs),
        "words": n,
        "tags": "Penn Treebank (XPOS)",
        "results": rows,
        "stream_cost_k2": cost,
    }
    name = "tagger.json" if args.tagger is None else f"tagger_{args.name}.json"
    print(f"wrote {write_json(name, payload)}")
    if args.readme:
        update_readme("tagger", table(sources()))


def sources() -> list[str]:
    """The result files the table shows: every tagger*.json here, then KEPT where not replaced."""
    here = [p.name for p in sorted(RESULTS.glob("tagger*.json"))]
    return here + [k for k in KEPT if k.split("@")[0] not in here]


def table(names: list[str]) -> str:
    """A row for each result file (``FILE@COMMIT``: as git kept it), what they measured, and where."""
    payloads = []
    for name in names:
        path = resolve(name, RESULTS)
        if path is None:
            raise SystemExit(f"{name}: no such result file here")
        payloads.append(json.loads(path.read_text()))
    head = ["tagger", "offline", "k=0 (agreement)", "k=2 (agreement)", "k=2 cost p50 / p99 ms"]
    body = []
    for p in payloads:
        r, c = p["results"], p["stream_cost_k2"]
        k0, k2 = r["k=0"], r["k=2"]
        body.append(
            [
                p.get("tagger", "flair pos-english-fast"),
                f"{r['offline']['accuracy']:.2f}",
                f"{k0['accuracy']:.2f} ({k0['agreement_with_offline']:.2f})",
                f"{k2['accuracy']:.2f} ({k2['agreement_with_offline']:.2f})",
                f"{c['p50_ms']:.1f} / {c['p99_ms']:.1f}",
            ]
        )
    p, m = payloads[0], payloads[0]["machine"]
    text = (
        f"Penn tag accuracy (%) on {p['words']:,} words in {p['documents']} documents of UD English-EWT test, ASR "
        "style; agreement: with the same tagger's offline tags; cost per pushed word with "
        f"{p['threads']} torch thread ({doc_text.short_name(m['cpu'])}, {m['date']})."
    )
    command = str(p.get("command", "python -m benchmarks.tagger --ewt ../shared/data/ud_ewt"))
    return "\n".join(
        [*doc_text.table(head, body), "", *doc_text.wrap(text), doc_text.provenance(names, command)]
    )


if __name__ == "__main__":
    main()
