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
