"""What the soak watches of its server (``python -m benchmarks.soak``): /metrics (the recogniser's
buffer, the passes its guards cut) and the resident memory, sampled in tasks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.common import rss_mb
from streampunct.options import RecognizerOptions


class MetricsWatch:
    """The server's /metrics every ``every`` seconds: the recogniser's longest buffer, its compute
    ratio and the passes its guards cut."""

    def __init__(self, url: str, every: float) -> None:
        self.url, self.every = url.replace("ws://", "http://") + "/metrics", every
        self.buffer_max_s = 0.0
        self.last: dict[str, float] = {}
        self.t0 = time.perf_counter()
        self.heap: list[tuple[float, float, float]] = []  # (seconds, MB in use, MB free in the C heap)

    def sample(self) -> None:
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.url, timeout=10) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            for x in family.samples:
                key = x.name + "".join(f"_{v}" for v in x.labels.values())
                self.last[key] = x.value
        self.buffer_max_s = max(
            self.buffer_max_s, self.last.get("streampunct_recognition_buffer_seconds", 0.0)
        )
        in_use, free = (self.last.get(f"streampunct_malloc_bytes_{k}") for k in ("in_use", "free"))
        if in_use is not None and free is not None:
            t = round(time.perf_counter() - self.t0, 2)
            self.heap.append((t, round(in_use / 2**20, 1), round(free / 2**20, 1)))

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(self.every)

    def figures(self) -> dict[str, Any]:
        return {
            "buffer_max_s": round(self.buffer_max_s, 2),
            "buffer_limit_s": BUFFER_LIMIT_S,
            "guarded": {
                g: int(self.last.get(f"streampunct_recognition_guarded_passes_total_{g}", 0))
                for g in ("loop", "runaway")
            },
            "skipped_s": round(self.last.get("streampunct_recognition_skipped_seconds_total", 0.0), 2),
            # the C heap: what live allocations hold, and what is free inside it (fragments)
            "heap_mb": {"samples": self.heap, "end": self.heap[-1][1:] if self.heap else None},
        }


# A recogniser's buffer holds at most max_buffer_s after a pass, and the audio due to the next
# (under max_lag_s, or it skips).
BUFFER_LIMIT_S = RecognizerOptions().max_buffer_s + (RecognizerOptions().max_lag_s or 0.0) + 1.0


class MemoryWatch:
    """The server's VmRSS every ``every`` seconds, with the wall clock, in a task."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MB)
        self.t0 = time.perf_counter()

    def sample(self) -> float | None:
        mb = rss_mb(self.pid)
        if mb is not None:
            self.samples.append((round(time.perf_counter() - self.t0, 2), round(mb, 1)))
        return mb

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.every)


def plot_memory(samples: list[tuple[float, float]], path: Any, title: str) -> bool:
    """The server's resident memory against time, as a PNG at ``path``; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot([t / 60 for t, _ in samples], [mb for _, mb in samples], lw=0.8)
    ax.set_xlabel("minutes")
    ax.set_ylabel("server RSS, MB")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
