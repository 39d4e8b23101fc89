"""The tables of ``python -m benchmarks.caption_latency`` (docs/latency.md): latency, WER and F1 per
front end and input, and the latency's breakdown by stage."""

from __future__ import annotations

from typing import Any

from benchmarks.lib import doc_text

# A word's stages after its audio end, in order, by the client's clock. Runs before 2026-11-29 had
# "sent" between "committed" and "final" too: the server's send, from its debug log.
STAGES = ("seen", "committed", "final")
FRONTENDS_LINK = "[caption_frontends.py](../benchmarks/lib/caption_frontends.py)"


def table(payload: dict[str, Any], runs: dict[str, str] | None = None) -> str:
    """Latency, caption line, WER and F1 by front end and input; the setting; where it comes from
    (``runs``: each result file, with the date of its run)."""
    head = [
        "front end",
        "input",
        "words",
        "latency median s",
        "p95 s",
        "caption line median s",
        "WER %",
        "micro-F1",
    ]
    m = payload["machine"]
    body = []
    for name, fe in payload["frontends"].items():
        for set_name, s in fe["sets"].items():
            cap = s["caption_s"]["median"] if s["caption_s"] else float("nan")
            lat = s["latency_s"]
            body.append(
                [name, set_name, str(s["words"]), f"{lat['median']:.2f}", f"{lat['p95']:.2f}", f"{cap:.2f}"]
                + [f"{s['wer']:.1f}", f"{s['micro_f1']:.1f}"]
            )
    names = ", ".join(f"`{k}`" for k in dict.fromkeys(k.split(" (")[0] for k in payload["frontends"]))
    runs = runs or {"caption_latency.json": m["date"]}
    dates = sorted(set(runs.values()))
    text = (
        f"Punctuation model {payload.get('model', 'default')}, {payload['asr_model']} int8, lookahead "
        f"{payload['lookahead']}, time limit {payload['max_delay_ms']:.0f} ms; "
        f"{m['cores']} cores, "
        + (
            f"{doc_text.short_name(m['cpu'])}, {dates[0]}"
            if len(dates) == 1
            else ", ".join(f"{f} {d}" for f, d in runs.items())
        )
        + f". Front ends {names}: {FRONTENDS_LINK} (as run: the result files)."
    )
    model = f" --model {payload['model']}" if payload.get("model", "default") != "default" else ""
    command = str(
        payload.get("command", f"python -m benchmarks.caption_latency --audio ../shared/data/audio{model}")
    )
    lines = [*doc_text.table(head, body), "", *doc_text.wrap(text)]
    return "\n".join([*lines, doc_text.provenance(list(runs), command)])


def breakdown(payload: dict[str, Any]) -> str:
    """Median (p95) seconds of each stage, and the recogniser's passes; a run without "sent" (see
    STAGES): "-" there, and "→ received" from the commit."""
    head = ["front end", "input", "end → seen", "→ committed", "→ final sent", "→ received", "pass s"]
    body = []
    for name, fe in payload["frontends"].items():
        for set_name, s in fe["sets"].items():
            b = s["breakdown_s"]
            steps = ("end->seen", "seen->committed", "committed->sent")
            cells = [
                f"{round(st['median'], 2) + 0.0:.2f} ({st['p95']:.2f})" if st else "-"  # no "-0.00"
                for st in [*map(b.get, steps), b.get("sent->final", b.get("committed->final"))]
            ]
            body.append(
                [name, set_name, *cells, f"{s['pass_s']['median']:.2f}"]
                + [f"{s['real_time_factor']['median']:.2f}", str(s["passes"])]
            )
    return "\n".join(doc_text.table([*head, "real-time factor", "passes"], body))
