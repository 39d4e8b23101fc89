"""``streampunct batch`` on an embedded local Ray: every document's labels equal ``predict()``'s
and its text ``punctuate()``'s, in the input's order, from JSON lines, Parquet and a folder of
.txt files; ids come back as given, mixed or missing; every bad input or ``--out`` is one line
naming the file and line, exit status 2, before Ray starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from streampunct.cli import main

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DOCS = [
    {"id": "a", "text": "so what did you do last summer we went to the coast and it rained every day"},
    {"id": "b", "text": "hello"},
    {"id": "c", "text": ""},
    {"id": "d", "text": "do you think it is real i do n't know it 's hard to say   café   naïve résumé"},
    {"id": "e", "text": "and then we left"},
]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def expected(shipped, lookahead):
    return [
        {
            "id": d["id"],
            "labels": shipped.predict(d["text"].split(), lookahead=lookahead) if d["text"].split() else [],
            "text": shipped.punctuate(d["text"], lookahead=lookahead),
        }
        for d in DOCS
    ]


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_batch_equals_predict_on_every_document_from_every_input(local_ray, shipped, tmp_path):
    lookahead = None  # offline here; the command-line test runs k=2
    from streampunct.batch import punctuate_archive

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    folder = tmp_path / "txt"
    folder.mkdir()
    for d in DOCS:
        (folder / f"{d['id']}.txt").write_text(d["text"])
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(DOCS), tmp_path / "docs.parquet")
    for source in (jsonl, folder, tmp_path / "docs.parquet"):
        out = tmp_path / f"{source.name}.out.jsonl"
        n = punctuate_archive(source, out, lookahead=lookahead, workers=2, batch_size=2)
        assert n == len(DOCS)
        assert read(out) == expected(shipped, lookahead), source.name


def test_mixed_and_missing_ids_come_back_as_given(local_ray, shipped, tmp_path):
    """Integer, string and missing ids in one file (no Arrow type error): each written back as
    given, a missing or null one as the document's 0-based position (the blank line is none)."""
    from streampunct.batch import punctuate_archive

    texts = [
        "so what did you do",
        "hello there",
        "we went home",
        "smile\U0001f600 it is fine",
        "ok then",
        "bye",
    ]
    ids = [3, None, "a", "3", 10**20, "caf\u00e9"]  # the 4th text: a surrogate pair in JSON, one character
    lines = [json.dumps({"text": t} if i is None else {"id": i, "text": t}) for i, t in zip(ids, texts)]
    source = tmp_path / "mixed.jsonl"
    source.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
    assert "\\ud83d\\ude00" in source.read_text()
    assert punctuate_archive(source, tmp_path / "out.jsonl") == len(texts)
    rows = read(tmp_path / "out.jsonl")
    assert [r["id"] for r in rows] == [3, 1, "a", "3", 10**20, "café"]
    for row, text in zip(rows, texts):
        assert row["labels"] == shipped.predict(text.split()) and row["text"] == shipped.punctuate(text)
        assert len(row["labels"]) == len(row["text"].split()) == len(text.split())  # no word dropped

    table = pa.table({"id": pa.array([7, None], pa.int64()), "text": ["hello there", None]})
    pq.write_table(table, tmp_path / "ids.parquet")
    punctuate_archive(tmp_path / "ids.parquet", tmp_path / "out.jsonl")
    assert [(r["id"], r["text"]) for r in read(tmp_path / "out.jsonl")] == [
        (7, shipped.punctuate("hello there")),
        (1, ""),
    ]


def _parquet(table):
    return lambda path: pq.write_table(table, path)


# (files to write: a name ending in / is a folder, bytes a file, a callable writes it), the source,
# --out, and what the one line must hold
BAD_INPUT = {
    "not JSON": ({"bad.jsonl": b'{"text": "a"}\nnot json\n'}, "bad.jsonl", "out.jsonl", "bad.jsonl:2: not JSON"),
    "not UTF-8": ({"bad.jsonl": b'{"text": "a"}\n{"text": "caf\xe9"}\n'}, "bad.jsonl", "out.jsonl", "bad.jsonl:2: not UTF-8"),
    "nested 100,000 deep": (
        {"bad.jsonl": b"[" * 100_000 + b"]" * 100_000 + b"\n"}, "bad.jsonl", "out.jsonl", "bad.jsonl:1: JSON nested too deeply",
    ),
    "not an object": ({"bad.jsonl": b'{"text": "a"}\n\n[1]\n'}, "bad.jsonl", "out.jsonl", 'bad.jsonl:3: not a JSON object with a string "text"'),
    "no string text": ({"bad.jsonl": b'{"id": 1, "words": ["no", "text"]}\n'}, "bad.jsonl", "out.jsonl", 'bad.jsonl:1: not a JSON object with a string "text"'),
    "id a float": ({"bad.jsonl": b'{"text": "a"}\n{"id": 1.5, "text": "b"}\n'}, "bad.jsonl", "out.jsonl", 'bad.jsonl:2: "id" must be a string or an integer, not 1.5'),
    "id a bool": ({"bad.jsonl": b'{"id": true, "text": "b"}\n'}, "bad.jsonl", "out.jsonl", 'bad.jsonl:1: "id" must be a string or an integer, not true'),
    "id an object": ({"bad.jsonl": b'{"id": {"n": 1}, "text": "b"}\n'}, "bad.jsonl", "out.jsonl", 'bad.jsonl:1: "id" must be a string or an integer, not an object'),
    "lone surrogate": ({"bad.jsonl": b'{"text": "a"}\n{"text": "so \\ud800 what"}\n'}, "bad.jsonl", "out.jsonl", 'bad.jsonl:2: "text" holds a lone surrogate (U+D800)'),
    "missing input": ({}, "missing.jsonl", "out.jsonl", "missing.jsonl: no such file or folder"),
    "folder without .txt": ({"empty/": None}, "empty", "out.jsonl", "empty: holds no .txt files"),
    ".txt not UTF-8": ({"txt/": None, "txt/x.txt": b"so\nwhat\xff\n"}, "txt", "out.jsonl", "x.txt:2: not UTF-8"),
    "Parquet unreadable": ({"bad.parquet": b"not parquet"}, "bad.parquet", "out.jsonl", "bad.parquet: not a Parquet file Arrow can read"),
    "Parquet without text": (
        {"bad.parquet": _parquet(pa.table({"words": ["a"]}))}, "bad.parquet", "out.jsonl", 'bad.parquet: no "text" column',
    ),
    "wrong suffix": ({"docs.csv": b"text\nhello\n"}, "docs.csv", "out.jsonl", "docs.csv: give a .jsonl, a .parquet"),
    "--out a folder": ({"ok.jsonl": b'{"text": "a"}\n', "outdir/": None}, "ok.jsonl", "outdir", "outdir: is a folder"),
    "--out in a missing folder": ({"ok.jsonl": b'{"text": "a"}\n'}, "ok.jsonl", "nodir/out.jsonl", "out.jsonl: no such folder"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_INPUT, ids=list(BAD_INPUT))
def test_bad_input_is_one_line_and_exit_2_before_ray_starts(case, tmp_path, monkeypatch, capsys):
    files, source, out, says = BAD_INPUT[case]
    for name, content in files.items():
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        elif callable(content):
            content(tmp_path / name)
        else:
            (tmp_path / name).write_bytes(content)
    (tmp_path / "out.jsonl").write_text("an old output\n")

    def start(*args, **kwargs):
        raise AssertionError("Ray started before the input was checked")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as if no Ray ran in this process
    monkeypatch.setattr(ray, "init", start)
    assert main(["batch", str(tmp_path / source), "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streampunct: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert says in err
    assert (tmp_path / "out.jsonl").read_text() == "an old output\n"  # a bad input leaves it as it was


def test_the_command_line_refuses_a_bad_line(tmp_path):
    """The real command: one line naming the file and line, exit status 2, no traceback."""
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text": "b", "id": [1]}\n')
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "streampunct",
            "batch",
            str(tmp_path / "bad.jsonl"),
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert (
        run.stderr
        == f'streampunct: error: {tmp_path / "bad.jsonl"}:2: "id" must be a string or an integer, not an array\n'
    )
    assert not (tmp_path / "o.jsonl").exists()


def test_the_command_line(shipped, tmp_path):
    """`streampunct batch` as a user runs it: its own embedded Ray, then a line of what it did."""
    src = tmp_path / "docs.jsonl"
    src.write_text(json.dumps(DOCS[0]) + "\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "streampunct",
            "batch",
            str(src),
            "--out",
            str(tmp_path / "out.jsonl"),
            "-k",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("1 documents punctuated in ")
    assert read(tmp_path / "out.jsonl") == expected(shipped, 2)[:1]
