import streampunct


def test_public_names():
    """The exported names are the documented API; adding one is a decision, not an accident."""
    assert sorted(streampunct.__all__) == sorted(
        [
            "Punctuator",
            "PunctStream",
            "Word",
            "Cues",
            "PunctEvent",
            "LABELS",
            "normalize",
            "render",
            "read_iwslt",
            "score",
            "Report",
            "StreamPunctError",
            "InputError",
            "EmptyInputError",
            "DataFormatError",
            "UnknownLabelError",
            "CheckpointError",
        ]
    )
    for name in streampunct.__all__:
        assert hasattr(streampunct, name)


def test_one_exception_hierarchy():
    for name in ("InputError", "EmptyInputError", "DataFormatError", "UnknownLabelError", "CheckpointError"):
        assert issubclass(getattr(streampunct, name), streampunct.StreamPunctError)


def test_the_server_modules_import_one_another_without_a_circle():
    """Issue 76: app, sessions and metrics imported one another (under TYPE_CHECKING too). Every
    import of streampunct/server/*.py, wherever it stands, makes an edge; the graph has no cycle."""
    import ast
    from graphlib import TopologicalSorter
    from pathlib import Path

    folder = Path(streampunct.__file__).parent / "server"
    modules = {p.stem for p in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                names |= {base} | {f"{base}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        graph[path.stem] = {
            n.rpartition(".")[2]
            for n in names
            if (n.startswith(".") or n.startswith("streampunct.server.")) and n.rpartition(".")[2] in modules
        } - {path.stem}
    assert graph["sessions"] and graph["app"]  # the parse sees imports
    TopologicalSorter(graph).prepare()  # raises CycleError, naming the circle
