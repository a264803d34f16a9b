"""`attnres train`'s flags are one dataclass: every flag the parser takes is a field of TrainArgs with the same
default, so a flag added to the parser without its field (or the reverse) fails here, not mid-run."""
from __future__ import annotations

import dataclasses

import pytest

from attnres.training.args import TrainArgs, build_parser


def test_every_flag_is_a_field_with_its_default():
    parser = build_parser()
    flags = {action.dest: action.default for action in parser._actions if action.dest != "help"}
    fields = {field.name: field.default for field in dataclasses.fields(TrainArgs)}
    assert flags == fields


def test_parsed_flags_build_the_dataclass():
    args = TrainArgs(**vars(build_parser().parse_args(["--lr", "1e-3", "--attn-res", "full"])))
    assert (args.lr, args.attn_res, args.resume) == (1e-3, "full", "auto")


def test_trust_remote_code_without_init_from_is_refused():
    given = {"trust_remote_code"}
    assert TrainArgs().conflicts(given) == ["--trust-remote-code needs --init-from: it allows the --init-from "
                                            "folder's code"]
    assert TrainArgs(init_from="runs/x/final").conflicts(given) == [None]


def test_copy_is_independent():
    args = TrainArgs()
    copy = args.copy()
    copy.output_dir = "elsewhere"
    assert args.output_dir is None


@pytest.mark.parametrize("name", ["max_steps", "eval_batches"])
def test_validate_names_the_flag(name):
    args = TrainArgs(max_steps=10, micro_batch_size=1, grad_accum=1, lr=1e-3, min_lr_ratio=0.1, warmup_steps=0,
                     weight_decay=0.1, res_proj_weight_decay=0.0, grad_clip=1.0)
    setattr(args, name, 0)
    meta = {"seq_len": 8, "num_sequences": {"train": 4, "validation": 4}}
    with pytest.raises(ValueError, match=f"--{name.replace('_', '-')} must be >= 1"):
        args.validate(meta, 1)
