"""Command-line flags generated from config dataclasses (streampunct/flags.py): the training
commands' and ``serve``'s limits. A new field is a new flag; no flag restates a default."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from streampunct.cli import build_parser, main
from streampunct.flags import add_config_flags, config_from_flags
from streampunct.options import Limits
from streampunct.training.pause_train import PauseTrainConfig
from streampunct.training.tagger_train import TaggerTrainConfig
from streampunct.training.train import TrainConfig

REQUIRED = {  # the fields without a default, as a user gives them
    TrainConfig: ["--train", "t.tsv", "--dev", "d.tsv", "--out", "run"],
    TaggerTrainConfig: ["--ewt", "ewt", "--out", "tagger"],
    PauseTrainConfig: ["--model", "m", "--train", "a.tsv", "b.tsv", "--out", "p"],
    Limits: [],
}


def parser(cls: type) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    add_config_flags(p, cls, lookaheads=None)  # PauseTrainConfig's (ints and None): no flag
    return p


@pytest.mark.parametrize("cls", list(REQUIRED), ids=lambda c: c.__name__)
def test_no_flags_give_the_dataclass_defaults(cls):
    config = config_from_flags(parser(cls).parse_args(REQUIRED[cls]), cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    assert {k: getattr(config, k) for k in defaults} == defaults
    assert all(cls.HELP.get(f.name) for f in dataclasses.fields(cls) if f.name != "lookaheads"), (
        "a flag without help"
    )


def test_flags_take_the_field_types():
    args = ["--lr", "3e-5", "--window", "64", "--freeze-encoder", "--pos-init", "random", "--tags", "x.npy"]
    config = config_from_flags(parser(TrainConfig).parse_args(REQUIRED[TrainConfig] + args), TrainConfig)
    assert (config.lr, config.window, config.freeze_encoder, config.pos_init, config.tags) == (
        3e-5,
        64,
        True,
        "random",
        "x.npy",
    )
    tagger = parser(TaggerTrainConfig).parse_args(REQUIRED[TaggerTrainConfig] + ["--span", "2", "9"])
    assert config_from_flags(tagger, TaggerTrainConfig).span == (2, 9)
    pauses = config_from_flags(
        parser(PauseTrainConfig).parse_args(REQUIRED[PauseTrainConfig]), PauseTrainConfig
    )
    assert pauses.train == ("a.tsv", "b.tsv")


def test_a_limit_may_be_off():
    limits = config_from_flags(
        parser(Limits).parse_args(["--idle-timeout-s", "off", "--max-streams", "3"]), Limits
    )
    assert limits.idle_timeout_s is None and limits.max_streams == 3
    with pytest.raises(argparse.ArgumentError):
        parser(Limits).parse_args(["--idle-timeout-s", "never"])
    with pytest.raises(argparse.ArgumentError):
        parser(TrainConfig).parse_args(REQUIRED[TrainConfig] + ["--pos-init", "bogus"])


def test_every_training_command_has_its_config_flags():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, cls in (
        ("train", TrainConfig),
        ("train-tagger", TaggerTrainConfig),
        ("train-pauses", PauseTrainConfig),
    ):
        flags = {s for a in sub.choices[command]._actions for s in a.option_strings}
        missing = (
            {f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(cls)} - flags - {"--lookaheads"}
        )
        assert not missing, (command, missing)


def test_a_bad_training_argument_is_one_line(capsys, tmp_path):
    (tmp_path / "t.tsv").write_text("so\tO\n")
    args = [
        "train",
        "--train",
        str(tmp_path / "t.tsv"),
        "--dev",
        str(tmp_path / "t.tsv"),
        "--out",
        str(tmp_path / "r"),
    ]
    assert main([*args, "--init", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streampunct: error: ") and err.count("\n") == 1 and "Traceback" not in err
