"""The repository's layout: a benchmark script imports the package, benchmarks/common.py (the shared
harness, not a benchmark) and third-party packages, never another benchmark script or the tests."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))
SCRIPTS = {p.stem for p in BENCHMARKS} - {"common"}


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


def test_the_benchmarks_are_found():
    assert "common" not in SCRIPTS and {"e2e", "fuzz", "paired", "soak"} <= SCRIPTS


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_imports_no_other_benchmark_and_no_test(path):
    bad = [m for m in imported(ast.parse(path.read_text(), str(path))) if forbidden(m)]
    assert not bad, f"{path.name} imports {bad}: shared code goes in benchmarks/common.py or the package"


def test_common_needs_no_dev_extras():
    """Every benchmark imports common.py: importing it loads neither hypothesis (the fuzz's, in
    benchmarks/fuzz.py) nor jsonschema (imported where a reply is validated)."""
    code = "import sys; sys.path.insert(0, 'benchmarks'); import common; "
    code += "print(sorted({'hypothesis', 'jsonschema'} & sys.modules.keys()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_check_sees_what_it_forbids():
    source = "import e2e\ndef f():\n    from paired import TALLY\nfrom tests.test_fuzz import Script\n"
    source += (
        "from benchmarks import soak\nfrom common import machine\nimport numpy\nfrom streampunct import x\n"
    )
    assert {m for m in imported(ast.parse(source)) if forbidden(m)} == {
        "e2e",
        "paired",
        "tests.test_fuzz",
        "benchmarks.soak",
    }
