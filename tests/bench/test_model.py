"""`attnres bench-model`'s arguments (hf_attnres.cli.bench_model: the comparison modes it accepts, the clear error for
an
unknown one), the models hf_attnres.bench.model builds for them, and scripts/bench_gpu.sh's refusal without a GPU."""
from pathlib import Path

import pytest

from hf_attnres.bench.model import build_model
from hf_attnres.cli.bench_model import parse_args

REPO = Path(__file__).resolve().parents[2]


def test_block_two_phase_variant_builds_a_block_model_with_the_schedule_forced_on():
    args = parse_args(["--device", "cpu", "--modes", "standard,block_two_phase", "--hidden", "64",
                                   "--layers", "2", "--skip-memory"])
    assert args.modes == ["standard", "block_two_phase"] and args.skip_memory
    config = build_model(args, "block_two_phase").config
    assert config.attn_res_mode == "block" and config.attn_res_two_phase is True
    assert build_model(args, "block").config.attn_res_two_phase is None  # follows the backend


def test_unknown_mode_is_named(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--device", "cpu", "--modes", "standard,blok"])
    err = capsys.readouterr().err
    assert "--modes: unknown mode 'blok'" in err and "block_two_phase" in err


def test_gpu_script_refuses_without_cuda_and_writes_nothing(tmp_path):
    import os
    import subprocess

    out = tmp_path / "results"
    script = REPO / "scripts" / "bench_gpu.sh"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine that has one
    result = subprocess.run(["bash", str(script), str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode != 0 and "no CUDA device" in result.stderr
    assert not out.exists()


def test_the_mix_call_phase_times_each_modes_mix_at_the_last_mlp_point(monkeypatch):
    """standard: the RMSNorm alone (its one-source point); block / full: the mix over that point's sources and the
    fused RMSNorm, served by the same `mix` the model calls, with the settings the model's forward hands down."""
    from hf_attnres.bench.model import mix_call_workload
    from hf_attnres.core.mix_point import AttnResMixing

    args = parse_args(["--device", "cpu", "--modes", "standard,block,full", "--hidden", "64", "--layers", "4",
                       "--block-size", "2", "--phases", "mix_call", "--skip-memory"])
    seen = []
    real = AttnResMixing.mix
    monkeypatch.setattr(AttnResMixing, "mix", lambda self, *a: seen.append(len(a[1])) or real(self, *a))
    tokens, setup, run = mix_call_workload(args, calls=3)
    for mode, sources in (("standard", 1), ("block", 3), ("full", 8)):  # embedding + blocks / every sub-layer output
        seen.clear()
        run(setup(build_model(args, mode)))
        assert seen == [sources] * 3, mode
    assert tokens == 3 * args.batch


def test_overheads_pair_each_round_and_keep_the_minimum():
    """A load that drifts between rounds moves both modes of a round alike: the paired ratio (median of per-round
    ratios) sees through it where the ratio of medians does not."""
    from hf_attnres.bench.model import overheads

    def row(mode, rounds):
        ordered = sorted(rounds)
        return dict(mode=mode, phase="decode", tokens=1, tokens_per_s=1 / ordered[1], cpu_seconds=ordered[1],
                    cpu_seconds_min=ordered[0], cpu_rounds=rounds, peak_mem_mib=None)

    # block costs 1.02x standard in every round; the machine slows 3x in the middle round and 2x in the last
    table = overheads([row("standard", [1.0, 3.0, 2.0]), row("block", [1.02, 3.06, 2.04])])["decode"]["block"]
    assert table["paired_cpu_time_overhead_pct"] == 2.0 and table["min_cpu_time_overhead_pct"] == 2.0
    drifted = overheads([row("standard", [1.0, 3.0, 2.0]), row("block", [2.04, 1.02, 3.06])])["decode"]["block"]
    assert drifted["cpu_time_overhead_pct"] == 2.0 and drifted["paired_cpu_time_overhead_pct"] != 2.0


def test_unknown_mlp_is_named(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--device", "cpu", "--mlp", "sparse"])
    assert "--mlp: invalid choice: 'sparse'" in capsys.readouterr().err


def test_retain_allocator_reuses_freed_pages_where_the_system_one_faults_them_in_again():
    """`--allocator retain` (glibc mallopt): a 64 MiB tensor freed and made again reuses the pages already mapped; with
    glibc's defaults each one is a fresh mmap, its 16k pages faulted in anew. In a child: mallopt is process-wide. The
    fewest faults of one of eight tensors is compared: the heap may still grow once after the first ones."""
    import subprocess
    import sys

    probe = ("import sys, torch\n"
             "from hf_attnres.bench.model import minor_faults, retain_freed_memory\n"
             "if sys.argv[1] == 'retain': retain_freed_memory()\n"
             "counts = []\n"
             "for _ in range(8):\n"
             "    start = minor_faults(); torch.ones(2**24); counts.append(minor_faults() - start)\n"
             "print(min(counts))\n")
    fewest = {mode: int(subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, check=True,
                                       timeout=120).stdout) for mode in ("system", "retain")}
    assert fewest["system"] >= 2**24 * 4 // 4096, fewest  # every tensor's 16384 pages faulted in anew
    assert fewest["retain"] < 100, fewest


def test_overheads_give_the_page_fault_ratio():
    from hf_attnres.bench.model import overheads

    def row(mode, faults):
        return dict(mode=mode, phase="prefill", tokens=1, tokens_per_s=1.0, cpu_seconds=1.0, cpu_seconds_min=1.0,
                    cpu_rounds=[1.0], peak_mem_mib=None, minor_faults=faults)

    assert overheads([row("standard", 400), row("block", 500)])["prefill"]["block"]["minor_faults_ratio"] == 1.25


def test_unknown_allocator_is_named(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--device", "cpu", "--allocator", "jemalloc"])
    assert "--allocator: invalid choice: 'jemalloc'" in capsys.readouterr().err


def test_retain_without_glibc_says_so_before_any_work_and_writes_nothing(tmp_path, monkeypatch):
    """On a C library that is not glibc, `--allocator retain` ends with one line naming the flag, before a model is
    built, and no results file is written."""
    import hf_attnres.bench.model as bench

    monkeypatch.setattr(bench, "glibc", lambda: None)
    monkeypatch.setattr(bench, "build_model", lambda *a: pytest.fail("a model was built"))
    output = tmp_path / "bench.json"
    args = parse_args(["--device", "cpu", "--allocator", "retain", "--phases", "prefill", "--skip-memory",
                       "--output", str(output)])
    with pytest.raises(SystemExit, match="--allocator retain: needs glibc"):
        bench.bench_model(args)
    assert not output.exists() and list(tmp_path.iterdir()) == []
