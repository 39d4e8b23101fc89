"""Every figure the README quotes is the value of the key it names in a result file.

A paragraph of figures in the README starts with a comment ``<!-- keys:`` whose lines name, in
the order the figures come, the file (under benchmarks/results/, or ``FILE@COMMIT`` for a result
git keeps) and the key of each: ``e2e.json paired/sets/speech_test/.../micro_f1/diff`` (a path of
keys and list indices, separated by ``/``). Its figures are its decimals (``60.1``, ``+1.9``,
``[-0.4, +4.1]``) and its bold integers (``**28**``); each must equal its key's value to the
decimals it shows. A generated table starts with ``<!-- source: FILE ... -->`` and is checked
against the code that writes it. Every paragraph of the Results section that quotes a decimal
figure is one or the other.
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
KEYS = re.compile(r"<!-- keys:\n(.*?)\n-->\n(.*?)(?:\n\n|$)", re.S)
FIGURE = re.compile(r"(?<![\w.])([-+]?\d+\.\d+)(?![\d.])")
QUOTED = re.compile(r"(?<![\w.])([-+]?\d+\.\d+)(?![\d.])|\*\*(\d[\d,]*)\*\*")


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


def value_at(name: str, path: str) -> float:
    value = read_source(name)
    for key in path.split("/"):
        value = value[int(key)] if isinstance(value, list) else value[key]  # type: ignore[index]
    assert isinstance(value, int | float) and not isinstance(value, bool), (name, path, value)
    return float(value)


def keyed() -> list[tuple[list[tuple[str, str]], str]]:
    """(the keys it names, the text) of each keyed paragraph."""
    return [
        ([tuple(line.strip().split(" ", 1)) for line in m.group(1).splitlines()], m.group(2))  # type: ignore[misc]
        for m in KEYS.finditer(README.read_text())
    ]


def test_every_figure_is_the_value_of_the_key_it_names():
    found = keyed()
    assert len(found) >= 3, "the README's results name their keys"
    for keys, text in found:
        figures = [
            decimal or bold for decimal, bold in QUOTED.findall(re.sub(r"<!--.*?-->", "", text, flags=re.S))
        ]
        assert len(figures) == len(keys), (len(figures), len(keys), text[:80])
        for figure, (name, path) in zip(figures, keys):
            value = value_at(name, path)
            decimals = len(figure.split(".")[1]) if "." in figure else 0
            assert round(value, decimals) == float(figure.replace(",", "")), (
                f"{figure}: {name} {path} is {value}"
            )


def test_the_accuracy_table_is_the_saved_results():
    """The table is written by benchmarks/accuracy.py from accuracy.json and accuracy_base.json:
    the README shows exactly what they hold."""
    from benchmarks.accuracy import shipped_summary

    section = (
        README.read_text()
        .split("<!-- accuracy-short:start -->\n", 1)[1]
        .split("<!-- accuracy-short:end -->")[0]
    )
    assert section.strip() == shipped_summary(short=True).strip()


def test_every_figure_of_the_results_names_its_keys():
    section = README.read_text().split("## Results", 1)[1].split("\n## ", 1)[0]
    sourced = {text for _, text in blocks(section)} | {text for _, text in keyed()}
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
    # the tick's line: the revised words carry times, so their time limits fire (issue 77: it printed [])
    assert lines[-2].startswith("[PunctEvent(") and "final=True" in lines[-2] and "QUESTION" in lines[-2]
    assert lines[-1] == "[]"  # finish: nothing was left
