"""Shared by the benchmarks: a description of the machine, and writing results."""

from __future__ import annotations

import json
import os
import platform
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
README = Path(__file__).parent.parent / "README.md"
PAGES = tuple(
    README.parent / p for p in ("README.md", "docs/results.md", "docs/latency.md")
)  # the tables' pages


def machine() -> dict[str, object]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, object] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }
    return info


def percentile(xs: Iterable[float], q: float) -> float:
    """The q-th percentile (0-100) of xs, nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def time_each(call: Callable[[object], object], items: Iterable[object]) -> list[float]:
    """Seconds taken by ``call(item)`` for each item, one call at a time."""
    times = []
    for item in items:
        t0 = time.perf_counter()
        call(item)
        times.append(time.perf_counter() - t0)
    return times


def device_suffix(device: object) -> str:
    """ "" on the CPU, "_cuda" on a GPU: results on each live side by side."""
    kind = str(device).split(":")[0]
    return "" if kind == "cpu" else f"_{kind}"


def write_json(name: str, payload: dict[str, object]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def update_readme(section: str, markdown: str) -> None:
    """Replace the text between <!-- section:start --> and <!-- section:end --> in the README or in
    docs/results.md, wherever the markers are."""
    pattern = re.compile(rf"(<!-- {section}:start -->\n).*?(<!-- {section}:end -->)", re.S)
    for page in PAGES:
        text = page.read_text()
        if pattern.search(text):
            page.write_text(pattern.sub(lambda m: m.group(1) + markdown.rstrip() + "\n" + m.group(2), text))
            return
    raise SystemExit(f"no <!-- {section}:start/end --> markers in {', '.join(p.name for p in PAGES)}")
