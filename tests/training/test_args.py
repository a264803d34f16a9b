"""`attnres train`'s flags are one dataclass, TrainArgs (its fields declare the flags; hf_attnres/cli/train.py builds
the parser from them): the parsed flags build it, its conflict rules and checks name the flag."""
from __future__ import annotations

import pytest

from hf_attnres.cli.train import build_parser
from hf_attnres.training.args import TrainArgs


def test_parsed_flags_build_the_dataclass():
    args = TrainArgs(**vars(build_parser().parse_args(["--lr", "1e-3", "--attn-res", "full"])))
    assert (args.lr, args.attn_res, args.resume) == (1e-3, "full", "auto")


def test_trust_remote_code_without_init_from_is_refused():
    given = {"trust_remote_code"}
    assert [line for line in TrainArgs().conflicts(given) if line] == [
        "--trust-remote-code needs --init-from: it allows the --init-from folder's code"]
    assert not any(TrainArgs(init_from="runs/x/final").conflicts(given))


def test_copy_is_independent():
    args = TrainArgs()
    copy = args.copy()
    copy.output_dir = "elsewhere"
    assert args.output_dir is None


@pytest.mark.parametrize("name", ["max_steps", "eval_batches"])
def test_problems_name_the_flag(name):
    args = TrainArgs(max_steps=10, micro_batch_size=1, grad_accum=1, lr=1e-3, min_lr_ratio=0.1, warmup_steps=0,
                     weight_decay=0.1, res_proj_weight_decay=0.0, grad_clip=1.0)
    setattr(args, name, 0)
    meta = {"seq_len": 8, "num_sequences": {"train": 4, "validation": 4}}
    assert args.problems(meta, 1) == [f"--{name.replace('_', '-')} must be >= 1, got 0"]
