"""``streampunct batch``: an archive of finished transcripts punctuated on Ray Data.

Documents come from JSON lines (an object a line: ``text``, and ``id`` if it has one), Parquet (the
same columns) or a folder of ``.txt`` files (the file's name is its id); the driver reads them (an
archive must fit in its memory), the actors punctuate them. Each is punctuated as
:meth:`~streampunct.Punctuator.predict` does it (offline, or with a given lookahead), by a pool of
actors that each load the model once, and written as JSON lines in the input's order: ``id``,
``labels`` (one a word of the text split on whitespace) and ``text`` (``punctuate()``'s rendering).

Ray runs embedded on this machine by default (``ray.init()``: as many actors as ``--workers``);
``--address`` joins an existing cluster (``auto``, or ``ray://host:10001``). Needs the ``cluster``
extra (``pip install "streampunct[cluster]"``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = ["punctuate_archive", "read_documents"]


def read_documents(path: str | Path) -> Any:
    """A Ray Dataset of ``{"id", "text"}`` rows from a JSON-lines file, a Parquet file or a folder
    of .txt files."""
    import ray.data

    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise InputError(f"{path} holds no .txt files")
        return ray.data.from_items([{"id": f.stem, "text": f.read_text()} for f in files])
    if not path.is_file():
        raise InputError(f"no such file or folder: {path}")
    if path.suffix == ".parquet":
        # read here, not by Ray's read tasks: on a small machine the actors hold every CPU and the
        # read tasks wait for one forever (seen with 2 CPUs and 2 workers)
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        table = pq.read_table(str(path))
        if "text" not in table.column_names:
            raise InputError(f'{path} has no "text" column')
        rows = [{**r, "text": r["text"] or ""} for r in table.to_pylist()]
    elif path.suffix in (".jsonl", ".json", ".ndjson"):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not all(isinstance(r, dict) and isinstance(r.get("text"), str) for r in rows):
            raise InputError(f'{path}: every line must be a JSON object with a string "text"')
    else:
        raise InputError(f"{path}: give a .jsonl, a .parquet or a folder of .txt files")
    return ray.data.from_items([{"id": r.get("id", i), "text": r["text"]} for i, r in enumerate(rows)])


class Punctuate:
    """A Ray Data actor: the model loaded once, then batches of documents labelled."""

    def __init__(
        self, model: str | None, lookahead: int | None, engine: str, threads: int, int8: bool = False
    ):
        import torch

        from .punctuator import Punctuator

        torch.set_num_threads(threads)
        self.punctuator = Punctuator.load(model, device="cpu", int8=int8)
        self.lookahead, self.engine = lookahead, engine

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        done = [self.punctuator.label_text(str(t), self.lookahead, self.engine) for t in batch["text"]]
        return {
            "id": list(batch["id"]),
            "labels": [json.dumps(labels) for labels, _ in done],  # lists of any length, as text
            "text": [text for _, text in done],
        }


def punctuate_archive(
    source: str | Path,
    out: str | Path,
    *,
    model: str | None = None,
    lookahead: int | None = None,
    engine: str = "auto",
    int8: bool = False,
    workers: int = 1,
    threads: int = 1,
    batch_size: int = 16,
    address: str | None = None,
) -> int:
    """Punctuate every document of ``source`` into ``out`` (JSON lines, the input's order); the
    number of documents."""
    import ray
    import ray.data

    if workers < 1 or threads < 1 or batch_size < 1:
        raise InputError("workers, threads and batch size must be at least 1")
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        ds = read_documents(source).map_batches(
            Punctuate,
            fn_constructor_kwargs={
                "model": model,
                "lookahead": lookahead,
                "engine": engine,
                "threads": threads,
                "int8": int8,
            },
            batch_size=batch_size,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=threads,
            batch_format="numpy",
        )
        n = 0
        with Path(out).open("w") as f:
            for row in _rows(ds):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        return n
    finally:
        if started:
            ray.shutdown()


def _rows(ds: Any) -> Iterator[dict[str, Any]]:
    for row in ds.iter_rows():
        ident = row["id"]
        yield {
            "id": ident.item() if hasattr(ident, "item") else ident,
            "labels": json.loads(row["labels"]),
            "text": str(row["text"]),
        }
