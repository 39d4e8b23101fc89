"""Every figure the README quotes is in the result file it names.

A paragraph or table of figures in the README starts with ``<!-- source: FILE [FILE ...] -->``
(files under benchmarks/results/, or ``FILE@COMMIT`` for a result git keeps). Each decimal figure
in it (``60.1``, ``+1.9``, ``[-0.4, +4.1]``, ``17.9 ms``) must equal, to the decimals it shows, a
number somewhere in those files; every paragraph of the Results section that quotes a decimal
figure must name its source.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
SOURCE = re.compile(r"<!-- source: (.+?) -->")
FIGURE = re.compile(r"(?<![\w.])([-+]?\d+\.\d+)(?![\d.])")


def numbers(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in numbers(v)]
    return []


def read_source(name: str) -> object:
    if "@" not in name:
        return json.loads((RESULTS / name).read_text())
    file, commit = name.rsplit("@", 1)
    try:
        text = subprocess.run(
            ["git", "show", f"{commit}:benchmarks/results/{file}"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"{name}: this checkout has no git history of it (a shallow clone?)")
    return json.loads(text)


def blocks(text: str) -> list[tuple[list[str], str]]:
    """(the sources it names, the text) of each sourced paragraph or table."""
    out = []
    for m in SOURCE.finditer(text):
        rest = text[m.end() :]
        end = rest.find("\n\n", 1)
        out.append((m.group(1).split(), rest if end < 0 else rest[:end]))
    return out


def test_every_sourced_figure_is_in_its_source():
    found = blocks(README.read_text())
    assert len(found) >= 3, "the README's results name their sources"
    for sources, text in found:
        pool = [x for name in sources for x in numbers(read_source(name))]
        for figure in FIGURE.findall(re.sub(r"<!--.*?-->", "", text)):
            decimals = len(figure.split(".")[1])
            value = float(figure)
            assert any(round(x, decimals) == value for x in pool), f"{figure} is in none of {sources}"


def test_the_accuracy_table_is_the_saved_results():
    """The table is written by benchmarks/accuracy.py from accuracy.json and accuracy_base.json:
    the README shows exactly what they hold."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from accuracy import shipped_summary

    section = (
        README.read_text()
        .split("<!-- accuracy-short:start -->\n", 1)[1]
        .split("<!-- accuracy-short:end -->")[0]
    )
    assert section.strip() == shipped_summary(short=True).strip()


def test_every_figure_of_the_results_names_its_source():
    section = README.read_text().split("## Results", 1)[1].split("\n## ", 1)[0]
    sourced = {text for _, text in blocks(section)}
    for paragraph in re.split(r"\n\s*\n", section):
        body = re.sub(r"<!--.*?-->", "", paragraph).strip()
        if FIGURE.search(body) and "IWSLT protocol" not in body:
            assert any(body in text or text.strip() in paragraph for text in sourced), body[:80]


@pytest.mark.model
def test_the_python_example_runs_as_a_script_and_prints_what_it_says(tmp_path):
    """The README's Python example, saved as a file and run: it prints the punctuated text its
    comment shows, and every stream call's events."""
    example = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert example is not None
    script = tmp_path / "example.py"
    script.write_text(example.group(1))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "So how did it go? Well, it went fine. Thanks. What about you?"
    assert f"# {lines[0]}" in example.group(1)
    assert "PunctEvent(index=0, word='so', label='O', final=True)" in lines
    assert lines[-1].startswith("[PunctEvent(") and "final=True" in lines[-1]
