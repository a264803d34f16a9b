"""`attnres train`'s command line (hf_attnres/cli/train.py): a flag another flag makes do nothing is refused by name
before any work, one argparse line, exit code 2 (the rules: `TrainArgs.conflicts`); the same flags where they mean
something pass."""
from __future__ import annotations

import pytest

from hf_attnres.cli.train import build_parser, main
from hf_attnres.training.args import TrainArgs

D, M = "/nonexistent/data", "/nonexistent/model"
CASES = {
    "per_group_clip_off": (["--grad-clip-groups", "per-group", "--grad-clip", "0"], "--grad-clip-groups",
                           "--grad-clip 0"),
    "eval_batches_without_eval": (["--eval-every", "0", "--eval-batches", "5"], "--eval-batches", "--eval-every 0"),
    "diagnostics_after_the_last_step": (["--max-steps", "20", "--diagnostics-every", "500"], "--diagnostics-every",
                                        "--max-steps 20"),
    "diagnostics_after_the_default_last_step": (["--diagnostics-every", "5000"], "--diagnostics-every",
                                                "--max-steps 2000"),
    "save_every_final_only": (["--checkpoints", "final-only", "--save-every", "10"], "--save-every",
                              "--checkpoints final-only"),
    "keep_final_only": (["--checkpoints", "final-only", "--keep-checkpoints", "3"], "--keep-checkpoints",
                        "--checkpoints final-only"),
    "no_model_at_all": (["--init-from", M, "--checkpoints", "final-only", "--no-final-model"], "--no-final-model",
                        "--checkpoints final-only"),
}


@pytest.mark.parametrize(("argv", "refused", "other"), CASES.values(), ids=CASES.keys())
def test_flag_made_meaningless_is_refused(argv, refused, other, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--data", D, *argv])
    assert stop.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert refused in line and other in line, line


@pytest.mark.parametrize("argv", [
    ["--grad-clip-groups", "per-group", "--grad-clip", "0.5"],
    ["--grad-clip", "0"],
    ["--eval-every", "10", "--eval-batches", "5"],
    ["--max-steps", "20", "--diagnostics-every", "20"],
    ["--checkpoints", "resumable", "--save-every", "10", "--keep-checkpoints", "3"],
    ["--init-from", M, "--checkpoints", "resumable", "--no-final-model"],
])
def test_the_same_flags_where_they_mean_something_pass(argv):
    from hf_attnres.cli.combos import given_flags

    parser = build_parser()
    args = TrainArgs(**vars(parser.parse_args(["--data", D, *argv])))
    assert not any(args.conflicts(given_flags(parser, ["--data", D, *argv])))


@pytest.mark.parametrize(("flags", "resuming", "expected"), [
    (dict(init_from=M), False, ("final-only", 500, 2)),
    (dict(init_from=M, save_every=10), False, ("resumable", 10, 2)),
    (dict(init_from=M, keep_checkpoints=1), False, ("resumable", 500, 1)),
    (dict(init_from=M), True, ("resumable", 500, 2)),  # a run that has checkpoints keeps writing them
    (dict(), False, ("resumable", 500, 2)),
    (dict(init_from=M, checkpoints="resumable"), False, ("resumable", 500, 2)),
    (dict(checkpoints="final-only"), False, ("final-only", 500, 2)),
])
def test_what_a_run_keeps(flags, resuming, expected):
    args = TrainArgs(**flags)
    args.resolve_checkpoints(resuming)
    assert (args.checkpoints, args.save_every, args.keep_checkpoints) == expected
