"""`attnres bench-kernels` runs the public peers (fla-core 0.6.0, flash-attn-res 0.1.12) beside ours, checked
for equal outputs and gradients first. The peers are installed for real (scripts/setup_peers.sh into
~/.cache/attnres/peers, or $ATTNRES_PEERS: a few seconds once, then cached) and run in a child process, as the
benchmark runs them: the peers' folder never enters this test process's sys.path (with fla importable, transformers'
Kimi Linear would bind fla's kernels in later tests)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_attnres.bench.kernels import case_inputs, case_rows, check, outputs_and_grads, timer
from hf_attnres.bench.peers import NOT_INSTALLED, peer_implementations
from hf_attnres.cli.bench_kernels import CPU_IMPLS, parse_args
from hf_attnres.kernels.mix.naive import attn_res_naive

REPO = Path(__file__).resolve().parents[2]
PYTHON_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}


@pytest.fixture(scope="module")
def peers_path() -> str:
    result = subprocess.run(["bash", str(REPO / "scripts" / "setup_peers.sh")], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


# Run in the child: every implementation against the reference, fp32 and bf16, a small and a K3-width shape
PARITY = """
import inspect, json, sys, torch
from hf_attnres.bench.kernels import case_inputs, check, float32_truth, implementations, outputs_and_grads
from hf_attnres.cli.bench_kernels import parse_args
from hf_attnres.kernels.mix.naive import attn_res_naive
from transformers.models.kimi_linear import modeling_kimi_linear
args = parse_args(["--device", "cpu", "--peers-path", sys.argv[1], "--impls", sys.argv[2]])
verdicts = {}
for dtype in (torch.float32, torch.bfloat16):
    impls, notes = implementations(args.impls, args, dtype)
    for n, hidden in ((2, 64), (5, 7168)):
        inputs = case_inputs(n, 4, hidden, dtype, "cpu")
        want, truth = outputs_and_grads(attn_res_naive, inputs), float32_truth(inputs, dtype)
        for name, impl in impls.items():
            key = f"{name} {dtype} n={n} d={hidden}"
            try:
                verdicts[key] = impl if isinstance(impl, str) else check(impl, name, inputs, want, dtype, truth)
            except Exception as error:
                verdicts[key] = f"error {type(error).__name__}: {error}"
kda = inspect.unwrap(modeling_kimi_linear.chunk_kimi_delta_attention).__module__
print(json.dumps(dict(verdicts=verdicts, notes=notes, kda=kda, fla=sys.modules["fla"].__file__)))
"""


@pytest.mark.slow
@pytest.mark.network  # setup_peers.sh pip-installs the peer packages
def test_peers_pytorch_paths_and_ours_agree_forward_and_backward(peers_path):
    impls = "torch_lean,fla_naive,far_torch_eager,far_triton,fla"
    result = subprocess.run([sys.executable, "-c", PARITY, peers_path, impls], capture_output=True, text=True,
                            timeout=300, env=PYTHON_ENV, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    verdicts = report["verdicts"]
    assert report["fla"].startswith(peers_path)  # the pinned peer from the peers' folder, not another install
    assert report["notes"]["versions"]["fla-core"]["installed"] == "0.6.0"
    assert report["notes"]["versions"]["flash-attn-res"]["installed"] == "0.1.12"
    assert report["kda"].startswith("transformers.")  # Kimi Linear bound its torch path before fla was findable
    for key, verdict in verdicts.items():
        name = key.split()[0]
        if name == "fla":  # Triton on CUDA only: on CPU it raises, a row with the error, never a timing
            assert "requires CUDA" in verdict, (key, verdict)
        elif name == "far_triton" and "d=7168" in key:  # its kernels take power-of-two hidden sizes only
            assert isinstance(verdict, str) and verdict.startswith("error"), (key, verdict)
        else:
            assert isinstance(verdict, dict) and verdict["check"] == "ok", (key, verdict)
    # fp32 PyTorch paths agree to rounding; flash-attn-res's Triton output is bf16 by design
    fp32 = {k: v for k, v in verdicts.items() if "float32" in k and isinstance(v, dict)}
    assert all(v["max_rel_err"] < 1e-5 for k, v in fp32.items() if not k.startswith("far_triton")), fp32
    assert 1e-4 < verdicts["far_triton torch.float32 n=2 d=64"]["max_rel_err"] < 3e-2


@pytest.mark.slow
@pytest.mark.network  # setup_peers.sh pip-installs the peer packages
def test_tiny_cpu_bench_writes_every_cpu_row_with_time_bandwidth_and_check(peers_path, tmp_path):
    out = tmp_path / "bench.json"
    command = [sys.executable, str(REPO / "scripts" / "bench_kernels.py"), "--device", "cpu", "--hidden", "64",
               "--tokens", "8", "--sources", "2", "--repeats", "1", "--peers-path", peers_path, "--output", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=PYTHON_ENV, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["meta"]["copy_gbps"] > 0 and payload["meta"]["clock"] == "cpu time, median"
    timed = {(r["impl"], r["pass"]): r for r in payload["results"] if "ms" in r}
    for name in CPU_IMPLS.split(","):
        for pass_name in ("forward", "forward_backward"):
            row = timed[(name, pass_name)]
            assert row["ms"] > 0 and row["gbps"] > 0 and row["pct_of_copy"] > 0, row
            assert row["check"] == "ok" and row["max_rel_err"] <= row["tol"], row
    ours = {"torch_eager", "torch_lean", "torch_compile", "attnres_cpp"}
    peers = {"fla_naive", "far_torch", "far_torch_eager", "far_phase1"}
    pairs = {(r["ours"], r["peer_impl"], r["pass"]) for r in payload["ratios"]}
    assert pairs == {(o, p, s) for o in ours for p in peers for s in ("forward", "forward_backward")}
    assert {(m["ours"], m["peer_impl"], m["pass"]) for m in payload["ratio_geomeans"]} == pairs
    assert "ms ours / ms peer" in result.stdout


def test_a_mismatch_is_marked_not_quietly_timed(capsys):
    """An implementation that drops the key-norm gain (the difference between fla and flash-attn-res) is caught: the
    benchmark's inputs have a gain far from 1."""
    def no_gain(sources, query, norm_weight, eps):
        return attn_res_naive(sources, query, 1 + 0 * norm_weight, eps)  # the gain stays in the graph, unused

    inputs = case_inputs(3, 4, 32, torch.float32, "cpu")
    assert check(no_gain, "no_gain", inputs, outputs_and_grads(attn_res_naive, inputs), torch.float32)["check"] \
        == "MISMATCH"
    args = parse_args(["--device", "cpu", "--repeats", "1"])
    rows = case_rows({"torch_eager": attn_res_naive, "no_gain": no_gain}, (3, 4, 32), inputs, timer("cpu", "cpu"),
                     args, torch.float32, copy_gbps=10.0)
    assert {r["check"] for r in rows if r["impl"] == "no_gain"} == {"MISMATCH"}
    assert {r["check"] for r in rows if r["impl"] == "torch_eager"} == {"ok"}
    assert "MISMATCH no_gain" in capsys.readouterr().err


def test_missing_peers_are_rows_that_say_how_to_install(tmp_path):
    impls, _ = peer_implementations(["fla", "fla_naive", "far_torch"], str(tmp_path / "absent"), 1e-6, torch.float32)
    assert impls == dict.fromkeys(["fla", "fla_naive", "far_torch"], NOT_INSTALLED)
    assert "scripts/setup_peers.sh" in NOT_INSTALLED
    rows = case_rows(impls, (2, 4, 16), case_inputs(2, 4, 16, torch.float32, "cpu"), timer("cpu", "cpu"),
                     parse_args(["--device", "cpu"]), torch.float32, copy_gbps=10.0)
    assert [r["unavailable"] for r in rows] == [NOT_INSTALLED] * 3


def test_defaults_per_device_and_bad_lists_refused(capsys):
    args = parse_args(["--device", "cpu"])
    assert args.impls == CPU_IMPLS.split(",") and args.dtype == "float32" and args.hidden == [256, 1024]
    assert "fla" not in args.impls and "far_triton" not in args.impls  # CPU: the PyTorch paths of all three
    gpu = parse_args(["--device", "cuda"])
    assert 7168 in gpu.hidden and {"fla", "far_triton", "attnres_triton"} <= set(gpu.impls)
    with pytest.raises(SystemExit):
        parse_args(["--device", "cpu", "--hidden", "64,x"])
    assert "--hidden: comma-separated integers" in capsys.readouterr().err
