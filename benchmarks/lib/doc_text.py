"""What the benchmarks write into the docs' generated regions (``common.update_readme``): prose wrapped
at 120 characters, table rows that fit, a machine in a few words, and one short line of provenance."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from typing import Any

WIDTH = 120  # the docs' longest line (issue 66)
BLOCK = re.compile(r"([-+*>#|]|\d+[.)])(\s|$)")  # what would start a list, a quote, a heading or a table
CODE = re.compile(r"`[^`]*`")
UNIT = re.compile(r"(?<=\d) (?=((s|ms|MB|kB|GB|M|min)\b|%))")  # "6.02 s" stays on one line
KEEP = "\x00"  # a space that does not break (in a code span, between a figure and its unit)


def wrap(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """``text`` as lines of at most ``width`` characters (a longer word or code span stays whole), later
    lines after ``indent``; a code span that fits on a line, or a figure and its unit, is not broken, and
    no line but the first starts as markdown block syntax would (``- ``, ``1. ``, ``|``)."""
    fits = width - len(indent)
    text = CODE.sub(lambda m: m.group(0).replace(" ", KEEP) if len(m.group(0)) < fits else m.group(0), text)
    text = UNIT.sub(KEEP, text)

    def fill_lines(text: str, first: str) -> list[str]:
        return textwrap.wrap(
            text,
            width,
            initial_indent=first,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )

    lines, i = fill_lines(text, ""), 1
    while i < len(lines):  # a line that would start a block takes the last word of the line before
        if BLOCK.match(lines[i][len(indent) :]) and " " in lines[i - 1].strip():
            head, last = lines[i - 1].rsplit(" ", 1)
            rest = " ".join([last, *(line[len(indent) :] for line in lines[i:])])
            lines = [*lines[: i - 1], head, *fill_lines(rest, indent)]
        else:
            i += 1
    return [line.replace(KEEP, " ") for line in lines]


def table(head: list[str], rows: Iterable[Iterable[str]]) -> list[str]:
    """A markdown table, its cells padded where every row fits in WIDTH, else packed after the first."""
    body = [head, *(list(r) for r in rows)]
    spaced = ["| " + " | ".join(cells) + " |" for cells in body]
    if max(len(line) for line in spaced) > WIDTH:
        spaced = [f"| {cells[0]} |" + "|".join(cells[1:]) + "|" for cells in body]
    return [spaced[0], "|---|" + "---|" * (len(head) - 1), *spaced[1:]]


def short_name(name: object) -> str:
    """A CPU or GPU as one says it: "Intel(R) Xeon(R) Processor" is "Intel Xeon", "NVIDIA H100 80GB
    HBM3" is "NVIDIA H100"."""
    text = re.sub(r"\((R|TM)\)|\b(Processor|CPU)\b|\b\d+GB\b.*", "", str(name or ""))
    return " ".join(text.split())


def where(m: dict[str, Any], device: object = "cpu", threads: object = None) -> str:
    """The machine of a result in a few words: "AMD EPYC, 2 cores, 2 torch threads, 2026-11-22"; on a
    GPU, "NVIDIA H100 (host Intel Xeon, 16 cores), 2 torch threads, 2026-11-22"."""
    cpu = ", ".join(
        x for x in (short_name(m.get("cpu")), f"{m['cores']} cores" if m.get("cores") else "") if x
    )
    first = f"{short_name(m['gpu'])} (host {cpu})" if str(device).startswith("cuda") and m.get("gpu") else cpu
    threads_text = f"{threads} torch thread{'s' * (threads != 1)}" if threads else ""
    return ", ".join(p for p in (first, threads_text, str(m.get("date") or "")) if p)


def module_form(command: str) -> str:
    """``python benchmarks/NAME.py ...`` as ``python -m benchmarks.NAME ...``."""
    return re.sub(r"^python3? benchmarks/(\w+)\.py\b", r"python -m benchmarks.\1", command)


def provenance(files: str | Iterable[str], command: str, key: str | None = None) -> str:
    """One line: which result file (``FILE@COMMIT``: as git kept it) the region shows, and the command
    that made it, as ``python -m benchmarks.NAME ...`` where the whole would not fit."""
    names = [files] if isinstance(files, str) else list(files)
    head = "From " + ", ".join(f"`results/{n}`" if n == names[0] else f"`{n}`" for n in names)
    head += f", key `{key}`" if key else ""
    command = module_form(command)
    for line in (
        f"{head}; `{command}`.",
        f"{head}; `{' '.join(command.split()[:3])} ...` (in full in the file).",
    ):
        if len(line) <= WIDTH:
            return line
    return f"{head}; `{' '.join(command.split()[:3])} ...`."
