"""The report of ``python -m benchmarks.server_load``: its figures as markdown tables, written into
docs/protocol.md between its markers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT
from benchmarks.lib import doc_text
from benchmarks.lib.load_streams import KILL_WORDS

DOCS = ROOT / "docs" / "protocol.md"
MARKERS = ("<!-- server_load -->", "<!-- /server_load -->")
COMMAND = "python -m benchmarks.server_load"


# --- report --------------------------------------------------------------------------------------


def _s(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def overload_table(o: dict[str, Any]) -> list[str]:
    c = o["config"]
    lat = o["latency_s"]
    refused = [r for r in o["new_streams"] if r["status"] == 503]
    ok = sum(s["one_final_each"] and s["end"] for s in o["streams"])
    intro = (
        f"**Overload** (issue 48): capacity measured first (one stream at lookahead 2 pushed as fast as taken): "
        f"**{o['capacity_words_per_s']:g} words/s**. Then {c['senders']} senders at {c['words_per_s_each']:g} "
        f"words/s each ({o['offered_words_per_s']:g} words/s, {c['factor']:g} x capacity) in messages of "
        f"{', '.join(map(str, c['sizes']))} words, for {c['seconds']:g} s, beside {c['hog']}; a `busy` is resent "
        "as a revise after 1 s of quiet; a new stream tried every 5 s. Sound: streams with every taken word final "
        f"once and `end`; hog: the 1000-word k=64 message; refused: new streams refused (503, Retry-After). {_run(o)}."
    )
    head = ["sound", "close codes", "words taken", "`busy`", "p50 s", "p99 s", "max s", "hog s", "refused"]
    body = [
        [
            f"{ok} of {len(o['streams'])}",
            ", ".join(o["close_codes"]),
            f"{o['words_taken']:,}",
            str(o["busy"]),
            *(_s(lat[q]) for q in ("p50", "p99", "max")),
            f"{o['hog_s']:g}",
            f"{len(refused)} of {len(o['new_streams'])}",
        ]
    ]
    return [*doc_text.wrap(intro), "", *doc_text.table(head, body), ""]


def markdown(payload: dict[str, Any]) -> str:
    """The figures as markdown tables (for docs/protocol.md), no line over 120 characters."""
    sections = payload.get("sections", {})
    out: list[str] = []
    p = sections.get("punct")
    if p:
        c = p["config"]
        out += doc_text.wrap(
            f"**/v1/punct**: N live streams of {c['words_per_s']:g} words a second (lookahead {c['lookahead']}, "
            f"time limit {c['max_delay_ms']} ms) for {c['seconds']:g} s each; latency from a word sent to its final "
            f"event; a run passes at p99 <= {c['bound_s']:g} s with no word lost. Largest passing N: "
            f"**{p['largest_passing_streams']}**. {_run(p)}."
        )
        head = ["streams", "words", "lost", "p50 s", "p95 s", "p99 s", "max s", "server RSS MB", "pass"]
        body = [
            [str(r["streams"]), f"{r['words']:,}", str(r["lost"])]
            + [_s(r["latency_s"][q]) for q in ("p50", "p95", "p99", "max")]
            + [_s(r["server_rss_mb"], 0), "yes" if r["passed"] else "no"]
            for r in sorted(p["runs"], key=lambda r: r["streams"])
        ]
        out += ["", *doc_text.table(head, body), ""]
    r = sections.get("punct_ray")
    if r:
        runs = ", ".join(
            f"{x['streams']}: {_s(x['latency_s']['p99'])} s{'' if x['passed'] else ' (no)'}"
            for x in sorted(r["runs"], key=lambda x: x["streams"])
        )
        out += doc_text.wrap(
            f"On `streampunct serve-ray` (`--ray`: session replicas and one encoder), p99 by streams: {runs}. "
            f"Largest passing N: **{r['largest_passing_streams']}**. {_run(r)}."
        )
        out += [""]
    a = sections.get("asr")
    if a and "skipped" in a:
        out += [f"**/v1/asr**: skipped ({a['skipped']}).", ""]
    elif a:
        c = a["config"]
        audio = a["runs"][0]["audio_s_each"] if a["runs"] else 0
        out += doc_text.wrap(
            f"**/v1/asr**: N streams of {audio:.0f} s of espeak-ng speech at real time in {c['chunk_s']:g} s chunks "
            f"({c['asr_model']}); latency from a word's end in the audio to its final event. Largest N without lag: "
            f"**{a['largest_streams_without_lag']}**. {_run(a)}."
        )
        head = [
            "streams",
            "lag messages",
            "skipped s",
            "words committed",
            "one final",
            "p50 s",
            "p95 s",
            "pass",
        ]
        body = [
            [str(r["streams"]), str(r["lag_messages"]), f"{r['skipped_s']:.1f}", str(r["words_committed"])]
            + [str(r["words_one_final"]), _s(r["latency_s"]["p50"]), _s(r["latency_s"]["p95"])]
            + ["yes" if r["passed"] else "no"]
            for r in a["runs"]
        ]
        out += ["", *doc_text.table(head, body), ""]
    f = sections.get("faults")
    if f:
        out += faults_list(f, a)
    o = sections.get("overload")
    if o:
        out += overload_table(o)
    out.append(f"From `results/server_load.json`, key `sections`: each with the flags given to `{COMMAND}`.")
    return "\n".join(out).rstrip() + "\n"


def faults_list(f: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    """Each fault and what the server did, a bullet each; FAILED where it did not pass (a run like the
    section ``before``'s is not described again)."""
    k, st = f["killed_clients"], f["stalled_reader"]
    ak = k["asr_kill"]
    asr = (
        f"; a /v1/asr stream cut after {ak['audio_sent_s']:g} s of audio: {ak['streams_after']} streams after"
        if "skipped" not in ak
        else ""
    )
    failed = lambda x: "" if x["passed"] else " FAILED."
    items = [
        f"{k['punct_kills']} /v1/punct connections cut (no close frame) after {KILL_WORDS} words: /health "
        f"{max(k['streams_after_each'], key=lambda x: x or 0)} streams after each (at most "
        f"{_s(k['max_seconds_to_zero'])} s), RSS {k['rss_growth_mb']:+.1f} MB from kill {k['rss_from_kill']} to the "
        f"last{asr}.{failed(k)}"
    ]
    signals = [f[n] for n in ("sigterm", "sigterm_keep_talking") if f.get(n) and "skipped" not in f[n]]
    every = all(s["streams_ended_shutting_down"] == s["streams"] for s in signals)
    clauses = []
    for s in signals:
        talking = s["clients_keep_talking"]
        after = f", then {s['words_sent_after_signal']} sent, {s['of_those_final']} final" if talking else ""
        ended = "" if every else f', {s["streams_ended_shutting_down"]} ended "server shutting down"'
        clauses.append(
            f"clients that {'keep talking' if talking else 'stop'}: {s['words_sent']} sent, "
            f"{s['words_final']} final, {s['words_lost']} lost{after}{ended}, exit {s['exit_status']} in "
            f"{s['signal_to_exit_s']:.2f} s" + (" (FAILED)" if not s["passed"] else "")
        )
    if signals:
        lead = f"SIGTERM, {signals[0]['streams']} streams at 3 words/s"
        lead += ' (each ended "server shutting down")' if every else ""
        items.append(f"{lead}: " + "; ".join(clauses) + ".")
    rss = [x["rss_mb"] for x in st["samples"] if x["rss_mb"] is not None]
    sc = st["stalled_client"]
    q = sc.get("replies_queued_bytes")
    queued = "" if q is None else f", {q / 1000:.0f} kB of replies waiting in the kernel"
    items.append(
        f"A reader stalled for {st['seconds']:g} s, sending at 90 % of the rate limit: "
        f"{sc['words_sent']:,} words sent, {sc['words_taken_by_server']} taken{queued}; RSS "
        f"{_s(min(rss, default=None), 0)} to {_s(max(rss, default=None), 0)} MB "
        f"({_s(st['rss_growth_second_half_mb'], 1)} MB over the second half); neighbour p99 "
        f"{_s(st['neighbour_alone']['latency_s']['p99'])} s alone, "
        f"{_s(st['neighbour_beside_stall']['latency_s']['p99'])} s beside it.{failed(st)}"
    )
    run = "the same run" if before and _run(before) == _run(f) else _run(f)
    passed = all(x["passed"] for x in (k, st, *signals))
    head = f"**Faults** ({run}{'; all passed' if passed else ''}):"
    return [*doc_text.wrap(head), *(x for item in items for x in doc_text.wrap(f"- {item}", "  ")), ""]


def _run(section: dict[str, Any]) -> str:
    """Where and how a section was measured: "AMD EPYC, 2 cores, 2026-11-23: `--docs`" (the flags of
    ``python -m benchmarks.server_load``, as the region's last line says)."""
    m = section.get("machine", {})
    command = doc_text.module_form(str(section.get("command", COMMAND)))
    gpu = f", {doc_text.short_name(m['gpu'])}" if m.get("gpu") else ""
    return f"{doc_text.where(m)}{gpu}: `{command.removeprefix(COMMAND).strip() or 'no flags'}`"


def write_docs(payload: dict[str, Any], page: Path = DOCS) -> bool:
    """The tables between the markers of ``page``; False if it has none."""
    text = page.read_text()
    start, end = (re.escape(m) for m in MARKERS)
    pattern = re.compile(rf"({start}\n?).*?({end})", re.S)
    if not pattern.search(text):
        return False
    page.write_text(
        pattern.sub(lambda m: m.group(1).rstrip("\n") + "\n" + markdown(payload) + m.group(2), text)
    )
    return True
