"""``streampunct batch`` on an embedded local Ray: every document's labels equal ``predict()``'s
and its text ``punctuate()``'s, in the input's order, from JSON lines, Parquet and a folder of
.txt files; bad input gets one clear error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from streampunct.errors import InputError

ray = pytest.importorskip("ray")

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


def test_bad_input_gets_one_clear_error(local_ray, tmp_path):
    from streampunct.batch import punctuate_archive

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "words": ["no", "text"]}\n')
    for source, says in (
        (bad, 'every line must be a JSON object with a string "text"'),
        (tmp_path / "missing.jsonl", "no such file or folder"),
        (tmp_path, "holds no .txt files"),
    ):
        with pytest.raises(InputError, match=says):
            punctuate_archive(source, tmp_path / "out.jsonl")


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
