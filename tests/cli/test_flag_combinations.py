"""Flags another flag makes meaningless are refused by name, before any work (hf_attnres/cli/combos.py): one
argparse-style line naming both flags, exit code 2. One case per refused combination; a flag counts as given even at
its default value."""
from __future__ import annotations

import importlib

import pytest

M, D = "/nonexistent/model", "/nonexistent/data"
PIPELINE_CASES = [
    (["--model", M, "--layers", "4"], "--layers", "--model"),
    (["--model", M, "--layers", "8"], "--layers", "--model"),  # the default value, given: still refused
    (["--model", M, "--block-size", "2"], "--block-size", "--model"),
    (["--model", M, "--mode", "full"], "--mode", "--model"),
    (["--mode", "full", "--block-size", "2"], "--block-size", "--mode full"),
    (["--mode", "standard", "--block-size", "2"], "--block-size", "--mode standard"),
    (["--data", D, "--seq-len", "16"], "--seq-len", "--data"),
    (["--trust-remote-code"], "--trust-remote-code", "--model"),
]
CASES = [
    *[("train-interleaved", *case) for case in PIPELINE_CASES],
    *[("train-pipeline", *case) for case in PIPELINE_CASES],
    ("train", ["--trust-remote-code"], "--trust-remote-code", "--init-from"),
    ("demo", ["--mode", "full", "--block-size", "3"], "--block-size", "--mode full"),
    ("demo", ["--mode", "standard", "--block-size", "2"], "--block-size", "--mode standard"),
    ("bench-model", ["--modes", "standard,full", "--block-size", "2"], "--block-size", "--modes standard,full"),
    ("bench-model", ["--phases", "train", "--decode-steps", "4"], "--decode-steps", "--phases train"),
    ("bench-model", ["--phases", "train,decode", "--long-prompt", "100"], "--long-prompt", "--phases train,decode"),
    ("bench-model", ["--phases", "prefill", "--chunk", "64"], "--chunk", "--phases prefill"),
    ("bench-kernels", ["--device", "cuda", "--clock", "wall"], "--clock", "--device cuda"),
    ("prepare-data", ["--hub-config", "x"], "--hub-config", "--hub"),
    ("prepare-data", ["--hub-split", "test"], "--hub-split", "--hub"),
    ("prepare-data", ["--vocab-size", "500"], "--vocab-size", "--tokenizer gpt2"),
    ("prepare-data", ["--files", "a.txt", "--corpora", "kjv"], "--corpora", "--files"),
    ("prepare-data", ["--hub", "x", "--corpora", "kjv"], "--corpora", "--hub"),
    ("prepare-data", ["--chat", "a.jsonl", "--corpora", "kjv"], "--corpora", "--chat"),
    ("prepare-data", ["--text-column", "body"], "--text-column", "--files or --hub"),
    ("prepare-eval-data", ["--benchmarks", "mmlu", "--gpqa-csv", "g.csv"], "--gpqa-csv", "--benchmarks mmlu"),
    ("push-to-hub", ["--private"], "--private", "--repo-id"),
    ("push-to-hub", ["--commit-message", "m"], "--commit-message", "--repo-id"),
    ("push-to-hub", ["--repo-id", "u/n", "--dry-run", "--private"], "--private", "--dry-run"),
    ("push-to-hub", ["--repo-id", "u/n", "--dry-run", "--commit-message", "m"], "--commit-message", "--dry-run"),
    ("study", ["--dry-run", "--report-only"], "--report-only", "--dry-run"),
    ("study", ["--dry-run", "--jobs", "2"], "--jobs", "--dry-run"),
    ("study", ["--dry-run", "--threads", "2"], "--threads", "--dry-run"),
    ("study", ["--dry-run", "--report-dir", "r"], "--report-dir", "--dry-run"),
    ("study", ["--dry-run", "--note", "n"], "--note", "--dry-run"),
    ("study", ["--report-only", "--jobs", "2"], "--jobs", "--report-only"),
    ("study", ["--report-only", "--threads", "2"], "--threads", "--report-only"),
    ("compare", ["a", "b", "--tasks", "attnres_mmlu_bpb", "--data", D], "--data", "--tasks attnres_mmlu_bpb"),
    ("compare", ["a", "b", "--allow-code-execution"], "--allow-code-execution", "the default tasks"),
    ("compare", ["a", "b", "--tasks", "heldout", "--allow-code-execution"], "--allow-code-execution",
     "--tasks heldout"),
    ("main-job", ["--no-tasks", "--tasks", "attnres_mmlu_bpb"], "--tasks", "--no-tasks"),
    ("main-job", ["--no-tasks", "--task-limit", "3"], "--task-limit", "--no-tasks"),
]
# the commands whose checks run in parse_args (their main would start the benchmark)
# (convert refused --block-size without --upcycle block already: tests/conversion/test_convert_bad_inputs.py)
PARSE_ONLY = {"bench-model", "bench-kernels"}


def entry(command: str):
    module = importlib.import_module(f"hf_attnres.cli.{command.replace('-', '_')}")
    return module.parse_args if command in PARSE_ONLY else module.main


@pytest.mark.parametrize(("command", "argv", "refused", "other"), CASES,
                         ids=[f"{c[0]}:{' '.join(c[1])}" for c in CASES])
def test_meaningless_combination_is_refused_by_name(command, argv, refused, other, capsys):
    with pytest.raises(SystemExit) as stop:
        entry(command)(argv)
    assert stop.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert refused in line and other in line, line


def test_flags_alone_and_meaningful_combinations_pass():
    """No false refusals: the same flags where they mean something parse (the checks run inside parse_args)."""
    from hf_attnres.cli.bench_model import parse_args as bench_model

    assert bench_model(["--modes", "standard,block", "--block-size", "3", "--phases", "decode",
                        "--decode-steps", "4"]).block_size == 3
    assert bench_model(["--phases", "long_prefill", "--chunk", "64", "--long-prompt", "128"]).chunk == 64
