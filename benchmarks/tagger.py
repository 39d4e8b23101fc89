"""POS tagger accuracy on ASR-style English-EWT test, offline and streaming, and its cost per word.

    python benchmarks/tagger.py --ewt ../shared/data/ud_ewt [--readme]

ASR style is what a recogniser delivers: every word lower case, punctuation tokens (UPOS PUNCT, and
SYM tokens with no letter or digit) removed, and no sentence boundaries: each document is tagged
as one continuous stream of words. Tags are Penn Treebank tags, scored against EWT's XPOS column.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, percentile, time_each, update_readme, write_json  # noqa: E402

from streampunct.pos import Tagger  # noqa: E402


def read_asr_style(path: Path) -> list[tuple[list[str], list[str]]]:
    """(words, Penn tags) per document of a CoNLL-U file, in ASR style."""
    docs: list[tuple[list[str], list[str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc"):
            docs.append(([], []))
        cols = line.split("\t")
        if line.startswith("#") or len(cols) != 10 or not cols[0].isdigit():
            continue  # comments, blank lines, multiword ranges (3-4), empty nodes (8.1)
        form, upos, xpos = cols[1], cols[3], cols[4]
        if upos == "PUNCT" or (upos == "SYM" and not any(c.isalnum() for c in form)):
            continue
        if not docs:
            docs.append(([], []))
        docs[-1][0].append("_".join(form.lower().split()))
        docs[-1][1].append(xpos)
    return [d for d in docs if d[0]]


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
    ap.add_argument("--ewt", required=True, help="folder with en_ewt-ud-test.conllu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pushes", type=int, default=2000, help="timed pushes for the cost per word")
    ap.add_argument("--readme", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    tagger = Tagger.load()
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
        "threads": args.threads,
        "data": "UD English-EWT test, ASR style (lower case, no punctuation, documents as streams)",
        "documents": len(docs),
        "words": n,
        "tags": "Penn Treebank (XPOS)",
        "results": rows,
        "stream_cost_k2": cost,
    }
    print(f"wrote {write_json('tagger.json', payload)}")
    if args.readme:
        update_readme("tagger", table(payload))


def table(payload: dict) -> str:
    r, c, m = payload["results"], payload["stream_cost_k2"], payload["machine"]
    lines = [
        "| mode | Penn tag accuracy | agreement with offline |",
        "|---|---|---|",
        f"| offline (whole document) | {r['offline']['accuracy']:.2f} | |",
    ]
    for k in (0, 2):
        row = r[f"k={k}"]
        lines.append(f"| stream, k={k} | {row['accuracy']:.2f} | {row['agreement_with_offline']:.2f} |")
    lines += [
        "",
        f"{payload['words']:,} words in {payload['documents']} documents of UD English-EWT test, ASR style. "
        f"Streaming cost at k=2: {c['p50_ms']:.1f} ms a word p50, {c['p99_ms']:.1f} ms p99 "
        f"({payload['threads']} torch thread, {m['cpu']}, {m['date']}). "
        "`python benchmarks/tagger.py --ewt ../shared/data/ud_ewt`.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
