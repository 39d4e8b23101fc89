"""``streampunct batch``: an archive of finished transcripts punctuated on Ray Data.

Documents come from JSON lines (an object a line: ``text``, and ``id`` if it has one; blank lines
are skipped), Parquet (the same columns) or a folder of ``.txt`` files (the file's name is its id);
the driver reads them (an archive must fit in its memory), the actors punctuate them. Each is
punctuated as :meth:`~streampunct.Punctuator.predict` does it (offline, or with a given lookahead),
by a pool of actors that each load the model once, and written as JSON lines in the input's order:
``id``, ``labels`` (one a word of the text split on whitespace) and ``text`` (``punctuate()``'s
rendering).

An ``id`` is a string or an integer, written back exactly as given (``3`` stays the number 3, ``"3"``
the string); a document without one (or with ``null``) gets its 0-based position among the
documents. Ids may be mixed in one file: they stay on the driver, only the texts and positions go
through Ray. A ``text`` or ``id`` holding a lone surrogate (JSON ``"\\ud800"``, which is not Unicode
text) is refused, not replaced: U+FFFD, like the surrogate, has no word character, so the word would
still vanish from ``text`` while ``labels`` kept it.

The whole input and ``--out`` are checked before Ray starts, so a mistake costs no start-up: a line
that is not UTF-8, not JSON, nested too deeply or not an object with a string ``text``, an ``id``
of another type, a missing source, a folder without ``.txt`` files, an unreadable Parquet file or
one without ``text``, a folder or a missing folder as ``--out``: a :class:`DataFormatError` naming
the file and line (the command prints it as one line, exit status 2).

Ray runs embedded on this machine by default (``ray.init()``: as many actors as ``--workers``);
``--address`` joins an existing cluster (``auto``, or ``ray://host:10001``). Needs the ``cluster``
extra (``pip install "streampunct[cluster]"``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from .errors import DataFormatError, InputError
from .types import check_lookahead

__all__ = ["Document", "punctuate_archive", "read_documents"]

JSON_LINES = (".jsonl", ".json", ".ndjson")


class Document(NamedTuple):
    """A document to punctuate: its id as given (or its position) and its text."""

    id: str | int
    text: str


def read_documents(path: str | Path) -> list[Document]:
    """Every document of a JSON-lines file, a Parquet file or a folder of .txt files, checked (a
    :class:`DataFormatError` naming the file, and the line, of the first bad one); no Ray needed."""
    path = Path(path)
    if path.is_dir():
        return _read_folder(path)
    if not path.is_file():
        raise DataFormatError("no such file or folder", str(path))
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix in JSON_LINES:
        return _read_json_lines(path)
    raise DataFormatError("give a .jsonl, a .parquet or a folder of .txt files", str(path))


def _read_folder(path: Path) -> list[Document]:
    files = sorted(path.glob("*.txt"))
    if not files:
        raise DataFormatError("holds no .txt files", str(path))
    return [_document(f.stem, _utf8(f.read_bytes(), f), i, f) for i, f in enumerate(files)]


def _read_parquet(path: Path) -> list[Document]:
    # read here, not by Ray's read tasks: on a small machine the actors hold every CPU and the
    # read tasks wait for one forever (seen with 2 CPUs and 2 workers)
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    try:
        schema = pq.read_schema(str(path))
        _check_columns(schema, path)
        columns = [name for name in ("id", "text") if name in schema.names]
        rows = pq.read_table(str(path), columns=columns).to_pylist()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        why = " ".join(str(e).split())  # Arrow's messages may run over lines
        raise DataFormatError(f"not a Parquet file Arrow can read ({why})", str(path)) from None
    return [_document(r.get("id"), r["text"] or "", i, path) for i, r in enumerate(rows)]


def _check_columns(schema: Any, path: Path) -> None:
    """A "text" column of strings and, if there is one, an "id" column of strings or integers (nulls
    allowed in both: no text, no id): the rows then need no check of their types."""
    import pyarrow as pa

    def strings(kind: Any) -> bool:
        return bool(pa.types.is_null(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind))

    if "text" not in schema.names:
        raise DataFormatError('no "text" column', str(path))
    if not strings(text := schema.field("text").type):
        raise DataFormatError(f'the "text" column holds {text}, not strings', str(path))
    if "id" in schema.names and not (strings(ident := schema.field("id").type) or pa.types.is_integer(ident)):
        raise DataFormatError(f'the "id" column holds {ident}, not strings or integers', str(path))


def _read_json_lines(path: Path) -> list[Document]:
    documents: list[Document] = []
    for n, line in enumerate(_utf8(path.read_bytes(), path).split("\n"), 1):
        if line.strip():
            row = _json(line, path, n)
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise DataFormatError('not a JSON object with a string "text"', str(path), n)
            documents.append(_document(row.get("id"), row["text"], len(documents), path, n))
    return documents


def _utf8(data: bytes, path: Path) -> str:
    """``data`` decoded, or a DataFormatError naming the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataFormatError(f"not UTF-8 text ({e.reason})", str(path), line) from None


def _json(line: str, path: Path, n: int) -> Any:
    """Line ``n`` parsed, or a DataFormatError saying why not (a value nested thousands deep exhausts
    the parser's recursion: a RecursionError, not a ValueError)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise DataFormatError(f"not JSON ({e.msg} at column {e.colno})", str(path), n) from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise DataFormatError(f"not JSON ({e})", str(path), n) from None
    except RecursionError:
        raise DataFormatError("JSON nested too deeply to read", str(path), n) from None


def _document(ident: Any, text: str, position: int, path: Path, line: int | None = None) -> Document:
    """A checked document: no id (None) is ``position``; an id other than a string or an integer,
    or a lone surrogate in the id or the text, is a DataFormatError at ``path`` (and ``line``)."""
    if ident is None:
        ident = position
    elif isinstance(ident, bool) or not isinstance(ident, (str, int)):
        kind = "an array" if isinstance(ident, list) else "an object" if isinstance(ident, dict) else None
        shown = kind or json.dumps(ident)  # a number or true/false; an array or object may be deep
        raise DataFormatError(f'"id" must be a string or an integer, not {shown}', str(path), line)
    for name, value in (("id", ident), ("text", text)):
        if isinstance(value, str) and (code := _lone_surrogate(value)) is not None:
            raise DataFormatError(
                f'"{name}" holds a lone surrogate (U+{code:04X}), which is not Unicode text', str(path), line
            )
    return Document(ident, text)


def _lone_surrogate(text: str) -> int | None:
    """The code point of ``text``'s first lone surrogate (what UTF-8 cannot encode), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return ord(e.object[e.start])
    return None


def _open_out(out: Path) -> IO[str]:
    """``out`` opened for writing (after the input is read: a bad input leaves an old output as it
    was), or a DataFormatError: a folder, a missing folder, a file that may not be written."""
    if out.is_dir():
        raise DataFormatError("is a folder: give a file to write", str(out))
    if not out.parent.is_dir():
        raise DataFormatError(f"no such folder: {out.parent}", str(out))
    try:
        return out.open("w", encoding="utf-8")
    except OSError as e:
        raise DataFormatError(f"cannot write it ({e.strerror})", str(out)) from None


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
            "position": list(batch["position"]),
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
    number of documents. The input and ``out`` are checked before Ray starts."""
    if workers < 1 or threads < 1 or batch_size < 1:
        raise InputError("workers, threads and batch size must be at least 1")
    check_lookahead(lookahead)
    documents = read_documents(source)
    with _open_out(Path(out)) as f:
        if not documents:
            return 0
        options = dict(model=model, lookahead=lookahead, engine=engine, threads=threads, int8=int8)
        for position, labels, text in _on_ray(documents, options, workers, batch_size, address):
            row = {"id": documents[position].id, "labels": labels, "text": text}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(documents)


def _on_ray(
    documents: Sequence[Document], options: dict[str, Any], workers: int, batch_size: int, address: str | None
) -> Iterator[tuple[int, list[str], str]]:
    """Each document's position, labels and text, in order, from a pool of ``workers`` actors
    (Ray started here, and shut down after, unless it runs already). The ids stay here: mixed
    strings and integers would not make one Arrow column."""
    import ray
    import ray.data

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        ds = ray.data.from_items(
            [{"position": i, "text": d.text} for i, d in enumerate(documents)]
        ).map_batches(
            Punctuate,
            fn_constructor_kwargs=options,
            batch_size=batch_size,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=options["threads"],
            batch_format="numpy",
        )
        for row in ds.iter_rows():
            yield int(row["position"]), json.loads(row["labels"]), str(row["text"])
    finally:
        if started:
            ray.shutdown()
