"""How long the README's test command takes: ``tests/run`` (lint, format, types, every tier) and
``tests/run -m unit`` (the first tier), wall-clock on this machine, with how many tests each ran.

    python -m benchmarks.test_times

Run it on an idle machine: a training run beside it takes a core from the suite's workers (on 2
cores it took 19 min instead of 8). Writes ``benchmarks/results/test_times.json``; the README and
docs/testing.md quote it.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from benchmarks.common import machine, write_json

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"all": (), "unit": ("-m", "unit")}
SUMMARY = re.compile(r"(\d+) passed(?:, (\d+) skipped)?(?:, (\d+) deselected)?")


def timed(args: tuple[str, ...]) -> dict[str, object]:
    """One run of tests/run with ``args``: its wall seconds and pytest's counts (it must pass)."""
    t0 = time.perf_counter()
    out = subprocess.run([str(ROOT / "tests" / "run"), *args], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"tests/run {' '.join(args)} failed:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    found = SUMMARY.findall(out.stdout)  # pytest's last line: "953 passed, 3 warnings in 477.53s"
    passed, skipped, _ = (int(g or 0) for g in found[-1]) if found else (0, 0, 0)
    return {
        "command": " ".join(["tests/run", *args]),
        "seconds": round(seconds, 1),
        "passed": passed,
        "skipped": skipped,
    }


def main() -> None:
    runs = {name: timed(args) for name, args in RUNS.items()}
    for name, run in runs.items():
        print(name, run, flush=True)
    print(f"wrote {write_json('test_times.json', {'machine': machine(), 'runs': runs})}")


if __name__ == "__main__":
    main()
