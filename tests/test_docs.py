"""The documentation a newcomer reads: a README for users (under 200 lines), and links that lead
somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_a_page_for_users():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "tests/run" in readme and 'pip install torch==2.13.0 -e ".[model,asr]"' in readme


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, broken


def test_every_setting_has_its_line_in_usage_with_its_default():
    """A new option is one field in streampunct/options.py and its help line; docs/usage.md lists
    every setting of every --config table as config_toml writes the defaults, a line each with its
    help, and every TOML block there is a config file the servers take."""
    from streampunct.options import TABLES, config_toml, options_from_config

    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    usage = (ROOT / "docs" / "usage.md").read_text()
    defaults = [cls() for cls in TABLES.values()]
    assert f"```toml\n{config_toml(*defaults, comments=True)}```" in usage
    blocks = re.findall(r"```toml\n(.*?)```", usage, re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        options_from_config(tomllib.loads(block))  # an InputError names what is wrong
    assert list(options_from_config(tomllib.loads(blocks[-1])).values()) == defaults


def test_the_docs_lines_are_at_most_120_characters():
    """Issue 66: docs/ kept under its line bound by lengthening lines (the longest was 1,524)."""
    wide = [
        f"{p.name}:{i}: {len(line)}"
        for p in sorted((ROOT / "docs").glob("*.md"))
        for i, line in enumerate(p.read_text().splitlines(), start=1)
        if len(line) > 120
    ]
    assert not wide, wide


def test_the_docs_stay_a_reference_under_1500_lines():
    """docs/ is for users (usage, protocol, design, model, training, results, testing); what was
    tried goes in decisions.md one line each, not as a narrative (issue 50's bound)."""
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "docs").glob("*.md"))
    assert lines < 1500, lines


def test_the_serve_flags_in_protocol_md_are_flags_serve_takes():
    """Issue 77: protocol.md listed `serve --idle-timeout-s` and other limits that `serve` refuses
    (they are --config settings since issue 66). Every flag written as `--flag ...` there (its
    generated results aside) is one of the real parser's."""
    from streampunct.server.app import build_parser

    text = (ROOT / "docs" / "protocol.md").read_text()
    text = re.sub(r"<!-- server_load -->.*?<!-- /server_load -->", "", text, flags=re.DOTALL)
    written = {
        flag for span in re.findall(r"`(--[^`]*)`", text) for flag in re.findall(r"--[a-z][\w-]*", span)
    }
    taken = set(build_parser()._option_string_actions)  # every spelling of every flag
    assert len(written) >= 10 and written <= taken, sorted(written - taken)
