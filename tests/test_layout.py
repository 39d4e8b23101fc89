"""The repository's layout: benchmarks/ is a package and each benchmark script runs from the repository
root as ``python -m benchmarks.NAME``. A script (a module with a ``__main__`` entry) imports the
package, the shared benchmark modules (benchmarks/common.py and benchmarks/lib/, not benchmarks
themselves) and third-party packages, never another benchmark script or the tests; no benchmark edits
sys.path, no script is over 400 lines, and every result file names the command and commit that made it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks import common

ROOT = Path(__file__).parent.parent
BENCHMARKS = sorted((ROOT / "benchmarks").rglob("*.py"))
RESULT_FILES = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
MOST_SCRIPT_LINES = 400


def is_script(path: Path) -> bool:
    """Whether the module has an ``if __name__ == "__main__"`` entry."""
    tree = ast.parse(path.read_text(), str(path))
    return any(
        isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'" for node in tree.body
    )


SCRIPTS = {p.stem for p in BENCHMARKS if is_script(p)}


def imported(tree: ast.AST) -> list[str]:
    """Every module an import names, at any depth (imports inside functions too); in ``from
    benchmarks import e2e`` (or ``from . import e2e``) the names are the modules."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module in (None, "benchmarks"):
                out += [f"benchmarks.{alias.name}" for alias in node.names]
            else:
                out.append(node.module)
    return out


def forbidden(module: str) -> bool:
    parts = module.split(".")
    name = parts[1] if parts[0] == "benchmarks" and len(parts) > 1 else parts[0]
    return name in SCRIPTS or name == "tests"


def edits_sys_path(tree: ast.AST) -> bool:
    """Whether the code touches ``sys.path`` (an insert, an append, an assignment)."""
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
        for node in ast.walk(tree)
    )


def test_the_benchmarks_are_found():
    assert (ROOT / "benchmarks" / "__init__.py").is_file() and (
        ROOT / "benchmarks" / "lib" / "__init__.py"
    ).is_file()
    assert {"e2e", "fuzz", "paired", "soak", "server_load"} <= SCRIPTS
    assert "common" not in SCRIPTS
    # a script is benchmarks.NAME; the shared modules (common, lib/) have no entry of their own
    assert all(p.parent.name == "benchmarks" for p in BENCHMARKS if is_script(p))
    assert len({p.stem for p in BENCHMARKS if is_script(p)}) == len([p for p in BENCHMARKS if is_script(p)])


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: str(p.relative_to(ROOT / "benchmarks")))
def test_a_benchmark_imports_no_other_benchmark_and_no_test(path):
    bad = [m for m in imported(ast.parse(path.read_text(), str(path))) if forbidden(m)]
    assert not bad, (
        f"{path.name} imports {bad}: shared code goes in benchmarks/common.py, benchmarks/lib/ or the package"
    )


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: str(p.relative_to(ROOT / "benchmarks")))
def test_no_benchmark_edits_sys_path(path):
    """The scripts run as ``python -m benchmarks.NAME`` and import ``benchmarks.common``."""
    assert not edits_sys_path(ast.parse(path.read_text(), str(path))), f"{path.name} edits sys.path"


@pytest.mark.parametrize("path", [p for p in BENCHMARKS if is_script(p)], ids=lambda p: p.name)
def test_no_benchmark_script_is_over_400_lines(path):
    n = len(path.read_text().splitlines())
    assert n <= MOST_SCRIPT_LINES, f"{path.name}: {n} lines; move cohesive parts into benchmarks/lib/"


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.name)
def test_every_result_names_its_command_and_commit(path):
    data = json.loads(path.read_text())
    assert data.get("command"), f"{path.name} has no command"
    assert "commit" in data, f"{path.name} has no commit"


def test_common_needs_no_dev_extras():
    """Every benchmark imports common.py: importing it loads neither hypothesis (the fuzz's, in
    benchmarks/lib/fuzz_*.py) nor jsonschema (imported where a reply is validated)."""
    code = "import sys, benchmarks.common; print(sorted({'hypothesis', 'jsonschema'} & sys.modules.keys()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_check_sees_what_it_forbids():
    source = "import e2e\ndef f():\n    from paired import TALLY\nfrom tests.test_fuzz import Script\n"
    source += (
        "from benchmarks import soak\nfrom common import machine\nimport numpy\nfrom streampunct import x\n"
    )
    source += "from benchmarks.lib.fuzz_client import run_script\nfrom benchmarks.common import write_json\n"
    assert {m for m in imported(ast.parse(source)) if forbidden(m)} == {
        "e2e",
        "paired",
        "tests.test_fuzz",
        "benchmarks.soak",
    }
    assert edits_sys_path(ast.parse("import sys\nsys.path.insert(0, 'benchmarks')\n"))
    assert not edits_sys_path(ast.parse("import os\nos.path.join('a', 'b')\n"))


def head() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def assert_stamped(data: dict, command: str) -> None:
    assert data["command"] == command
    assert data["commit"] == common.commit()
    if head() is not None:
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", data["commit"]) and data["commit"].startswith(head())
    assert isinstance(data["machine"], dict) and data["machine"]["cpu"]
    when = datetime.fromisoformat(data["date"].replace("Z", "+00:00"))
    assert when.utcoffset() is not None and when.utcoffset().total_seconds() == 0


def test_write_json_stamps_command_commit_machine_and_date(tmp_path, monkeypatch):
    """Every result file says what made it: the command as ``python -m benchmarks.NAME`` with its
    arguments, the commit, the machine and the date (UTC); a setting's run, in its own entry."""
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "paired.py"), "--out", "a b.json"])
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    command = "python -m benchmarks.paired --out 'a b.json'"

    path = common.write_json("r.json", {"figure": 1.5, "command": "stale"})
    assert path == tmp_path / "results" / "r.json"
    data = json.loads(path.read_text())
    assert_stamped(data, command)
    assert data["figure"] == 1.5 and list(data)[:4] == ["command", "commit", "date", "machine"]

    common.write_json("r.json", {"figure": 2.5, "machine": {"cpu": "the run's"}}, "int8")
    data = json.loads(path.read_text())
    assert data["figure"] == 1.5  # the default run's, untouched
    assert_stamped(data["settings"]["int8"], command)
    assert data["settings"]["int8"]["figure"] == 2.5 and data["settings"]["int8"]["machine"] == {
        "cpu": "the run's"
    }

    common.write_json("r.json", {"figure": 3.5}, argv=["--given", "x"])  # a default run keeps the settings
    data = json.loads(path.read_text())
    assert data["figure"] == 3.5 and "int8" in data["settings"]
    assert_stamped(data, "python -m benchmarks.paired --given x")

    elsewhere = common.write_json("s.json", {"figure": 4.5}, folder=tmp_path / "other")
    assert_stamped(json.loads(elsewhere.read_text()), command)
    whole = common.write_result(tmp_path / "deep" / "t.json", {"figure": 5.5})
    assert_stamped(json.loads(whole.read_text()), command)
    assert whole.read_text().startswith('{\n  "command"')  # indent=2, as every result file
