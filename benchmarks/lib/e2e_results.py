"""The results of ``python -m benchmarks.e2e score``: metrics per recording, set and pool, the table,
the speech sets' paired bootstrap and the chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.lib.e2e_audio import APART, SPEECH_SPLIT
from benchmarks.lib.recordings import SETS
from streampunct.scoring import UNIT_TOKENS, metrics, paired, pool, unit_tallies


def summarise(recordings: Sequence[dict], compared: dict) -> dict:
    """Metrics per system: per recording, per set, and pooled over the recordings of every set but
    those apart (the speech sets, the talks for fitting; no "pooled" where there are none)."""
    sets = [s for s in SETS if any(r["set"] == s for r in recordings)]
    set_of = {r["name"]: r["set"] for r in recordings}
    results: dict[str, dict] = {}
    for system, per_rec in compared.items():
        entry: dict[str, dict] = {"recordings": {n: metrics(c) for n, c in per_rec.items()}, "sets": {}}
        for s in sets:
            parts = [per_rec[r["name"]] for r in recordings if r["set"] == s and r["name"] in per_rec]
            if parts:
                entry["sets"][s] = metrics(pool(parts))
        pooled = [c for n, c in per_rec.items() if set_of[n] not in APART]
        if pooled:
            entry["pooled"] = metrics(pool(pooled))
        results[system] = entry
    return results


def table(results: dict, sets: Sequence[str]) -> str:
    """micro-F1 per set, the pool's micro-F1, macro-F1, SER and WER, and each speech set's WER."""
    speech = [s for s in sets if s in SPEECH_SPLIT]
    head = ["system", *[f"{SETS[s]} F1" for s in sets], "pooled micro-F1", "macro-F1", "SER", "WER"]
    head += [f"{SETS[s]} WER" for s in speech]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system, e in results.items():
        cells = [system]
        cells += [f"{e['sets'][s]['micro_f1']:.1f}" if s in e["sets"] else "" for s in sets]
        p = e.get("pooled")
        cells += [f"{p[k]:.1f}" for k in ("micro_f1", "macro_f1", "ser", "wer")] if p else [""] * 4
        cells += [f"{e['sets'][s]['wer']:.1f}" if s in e["sets"] else "" for s in speech]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def recording_table(results: dict, recordings: Sequence[dict], sets: Sequence[str]) -> str:
    """micro-F1 per recording of ``sets`` (the decision taken apart where each recording differs)."""
    names = [r["name"] for r in recordings if r["set"] in sets]
    lines = ["| system | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for system, e in results.items():
        cells = [f"{e['recordings'][n]['micro_f1']:.1f}" if n in e["recordings"] else "" for n in names]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- paired bootstrap (the speech sets) -----------------------------------------------------------


def set_units(
    recordings: Sequence[dict], per_rec: dict[str, dict], set_name: str, unit_tokens: int = UNIT_TOKENS
) -> dict[tuple[str, int], np.ndarray]:
    """A system's unit tallies over one set's recordings, keyed (recording, unit)."""
    return {
        (r["name"], u): t
        for r in recordings
        if r["set"] == set_name and r["name"] in per_rec
        for u, t in unit_tallies(per_rec[r["name"]], unit_tokens).items()
    }


def server_system(systems: Sequence[dict]) -> str | None:
    """streampunct's default model at k=2 on the streamed words as the server runs it: pauses on
    where the stream takes them, the recogniser's marks kept. None if it was not scored."""
    for s in systems:
        if s["kind"] != "streampunct" or s["model"] != "default" or s["lookahead"] != 2:
            continue
        if (
            s["pauses"] in (True, None)
            and s.get("marks", True)
            and s.get("heard", True)
            and s.get("limit", True)
            and s.get("words") == "streamed"
        ):
            return s["name"]
    return None


def bootstrap(
    recordings: Sequence[dict],
    compared: dict,
    system: str,
    against: Sequence[str],
    unit_tokens: int = UNIT_TOKENS,
    draws: int = 10000,
    seed: int = 0,
) -> dict:
    """Per speech set, ``system`` against each of ``against`` (``streampunct.scoring.paired``:
    micro-F1 and WER, a - b, 95% intervals, the share of resamples in which ``system`` is worse), on
    the same units."""
    out: dict[str, dict] = {}
    for set_name in SPEECH_SPLIT:
        a = set_units(recordings, compared[system], set_name, unit_tokens)
        if not a:
            continue
        out[set_name] = {}
        for b_name in against:
            b = set_units(recordings, compared[b_name], set_name, unit_tokens)
            if set(b) != set(a):  # b lacks a recording: not the same audio
                continue
            out[set_name][b_name] = paired(a, b, draws, seed, nested=True)
    return out


def chart(results: dict, sets: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [*sets, *(["pooled"] if any("pooled" in e for e in results.values()) else [])]
    names = list(results)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.2 * len(groups) * (1 + 0.15 * len(names))), 5.5))
    x = np.arange(len(groups))
    for n, system in enumerate(names):
        e = results[system]
        ys = [(e.get(g, {}) if g == "pooled" else e["sets"].get(g, {})).get("micro_f1", 0) for g in groups]
        offset = (n - (len(names) - 1) / 2) * width
        bars = ax.bar(x + offset, ys, width, label=system, color=plt.get_cmap("tab20")(n % 20))
        ax.bar_label(bars, fmt="%.0f", fontsize=6, padding=1)
    ax.set_xticks(x, [SETS.get(g, g).replace(" ", "\n", 1) for g in groups])
    ax.set_ylabel("micro-F1 over , . ? (%)")
    ax.set_ylim(0, 100)
    ax.set_title(
        "Punctuating recognised speech: streampunct on streamed tiny.en vs Whisper's own marks", fontsize=10
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
