"""`attnres bench-kernels` runs the public peers (fla-core 0.6.0, flash-attn-res 0.1.12, fast-attnres 2.1.0) beside
ours, checked for equal outputs and gradients first. The peers are installed for real (scripts/setup_peers.sh into
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

from hf_attnres.bench.kernels import case_inputs, case_rows, check, geomeans, outputs_and_grads, ratios, timer
from hf_attnres.bench.peers import NEEDS_CUDA, NOT_INSTALLED, peer_implementations
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
print(json.dumps(dict(verdicts=verdicts, notes=notes, kda=kda, fla=sys.modules["fla"].__file__,
                      fast_attnres=sys.modules["attnres"].__file__)))
"""


@pytest.mark.slow
@pytest.mark.network  # setup_peers.sh pip-installs the peer packages
def test_peers_pytorch_paths_and_ours_agree_forward_and_backward(peers_path):
    impls = "torch_lean,fla_naive,far_torch_eager,far_triton,fla,fast_attnres,fast_attnres_mq"
    result = subprocess.run([sys.executable, "-c", PARITY, peers_path, impls], capture_output=True, text=True,
                            timeout=300, env=PYTHON_ENV, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    verdicts = report["verdicts"]
    # the pinned peers from the peers' folder, not another install
    assert report["fla"].startswith(peers_path) and report["fast_attnres"].startswith(peers_path)
    assert report["notes"]["versions"]["fla-core"]["installed"] == "0.6.0"
    assert report["notes"]["versions"]["flash-attn-res"]["installed"] == "0.1.12"
    assert report["notes"]["versions"]["fast-attnres"]["installed"] == "2.1.0"
    assert report["kda"].startswith("transformers.")  # Kimi Linear bound its torch path before fla was findable
    for key, verdict in verdicts.items():
        name = key.split()[0]
        if name == "fla":  # Triton on CUDA only: on CPU it raises, a row with the error, never a timing
            assert "requires CUDA" in verdict, (key, verdict)
        elif name == "fast_attnres":  # its public call: CUDA BF16 only
            assert NEEDS_CUDA in verdict, (key, verdict)
        elif name == "far_triton" and "d=7168" in key:  # its kernels take power-of-two hidden sizes only
            assert isinstance(verdict, str) and verdict.startswith("error"), (key, verdict)
        else:
            assert isinstance(verdict, dict) and verdict["check"] == "ok", (key, verdict)
    # fp32 PyTorch paths agree to rounding; flash-attn-res's Triton output is bf16 by design
    fp32 = {k: v for k, v in verdicts.items() if "float32" in k and isinstance(v, dict)}
    assert all(v["max_rel_err"] < 1e-5 for k, v in fp32.items() if not k.startswith("far_triton")), fp32
    assert 1e-4 < verdicts["far_triton torch.float32 n=2 d=64"]["max_rel_err"] < 3e-2


# Run in the child, TRITON_INTERPRET=1: fast-attnres' own kernels (its multi-query launchers, one query; 2.1.0 ships no
# PyTorch reference) against our reference with no gain (norm_weight = 1), unmapped: what its math is, case by case
FAST_ATTNRES_SEMANTICS = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from attnres._kernels import multiquery
from hf_attnres.kernels.mix.naive import attn_res_naive

gen = torch.Generator().manual_seed(0)
D = 64
sources = [(0.1 * (1 + j) * torch.randn(2, 4, D, generator=gen)).requires_grad_() for j in range(3)]
grad = torch.randn(2, 4, D, generator=gen)

def theirs(query, eps, scale):
    out, mixed, inv, logits, stats = multiquery.forward(list(sources), query[None], None, False, eps, scale, "auto",
                                                        "query_major")
    grads = multiquery.backward(list(sources), query[None], None, False, mixed, grad[None], inv, logits, stats, scale,
                                "query_major")
    return [out[0], *grads[:-1], grads[-1][0]]

def ours(query, eps):
    query = query.detach().requires_grad_()
    out = attn_res_naive(sources, query, torch.ones(D), eps)
    return [out, *torch.autograd.grad(out, [*sources, query], grad)]

def err(a, b):
    return max(((x - y).abs().max() / y.abs().max()).item() for x, y in zip(a, b))

q = 0.5 * torch.randn(D, generator=gen)
errors = {
    # R == D, scale 1, the same eps: the same function, gradients included
    "same": err(theirs(q, 1e-6, 1.0), ours(q, 1e-6)),
    # eps inside the root for both: a large eps beside values of rms ~0.1 moves both alike
    "large_eps": err(theirs(q, 0.5, 1.0), ours(q, 0.5)),
    "eps_mismatch": err(theirs(q, 0.5, 1.0), ours(q, 1e-6)),
    # scale multiplies the score: ours with the query scaled (its gradient then scaled back)
    "scale": err(theirs(q, 1e-6, 3.0)[:-1], ours(3.0 * q, 1e-6)[:-1]),
}
# R < D: keys are the last R coordinates only (sliced LR-AttnRes); the weights they give mix the full-width values
tail = q[D - 16:]
out = theirs(tail, 1e-6, 1.0)[0]
keys = torch.stack([s.detach()[..., D - 16:] for s in sources])
keys = keys * torch.rsqrt(keys.pow(2).mean(-1, keepdim=True) + 1e-6)
probs = (keys @ tail).softmax(0)
errors["sliced_vs_tail_keys"] = ((out - (probs[..., None] * torch.stack(sources).detach()).sum(0)).abs().max()).item()
errors["sliced_vs_ours"] = err([out], [ours(torch.cat([torch.zeros(D - 16), tail]), 1e-6)[0]])
print(json.dumps(errors))
"""


@pytest.mark.slow
@pytest.mark.network  # setup_peers.sh pip-installs the peer packages
def test_fast_attnres_kernels_compute_our_mix_when_rank_is_the_width_and_eps_and_scale_match(peers_path):
    result = subprocess.run([sys.executable, "-c", FAST_ATTNRES_SEMANTICS, peers_path], capture_output=True,
                            text=True, timeout=300, env=PYTHON_ENV, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    assert errors["same"] < 1e-5 and errors["large_eps"] < 1e-5 and errors["scale"] < 1e-5, errors
    assert errors["eps_mismatch"] > 1e-2, errors  # so eps is where both put it, not ignored
    assert errors["sliced_vs_tail_keys"] < 1e-5, errors
    # zero-padding the query does not make ours sliced: our keys are normalised over all D coordinates
    assert errors["sliced_vs_ours"] > 1e-2, errors


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


def test_ratios_leave_out_interpreted_rows_and_keep_tiny_ratios_nonzero():
    """A peer thousands of times slower (fast-attnres' launchers in the Triton interpreter) neither rounds a ratio to 0
    (which has no logarithm for the geometric mean) nor, when named in `skip`, enters the ratios at all."""
    head = dict(sources=2, tokens=4, hidden=16, pass_="forward", check="ok")
    rows = [dict(head, impl="torch_lean", peer="ours", ms=0.05), dict(head, impl="fla_naive", peer="fla", ms=80.0),
            dict(head, impl="fast_attnres_mq", peer="fast-attnres", ms=9000.0)]
    kept = ratios(rows)
    assert {r["peer_impl"]: r["ratio"] for r in kept} == {"fla_naive": 0.000625, "fast_attnres_mq": 5.56e-06}
    assert all(m["geomean"] > 0 for m in geomeans(kept))
    assert [r["peer_impl"] for r in ratios(rows, skip=("fast_attnres_mq",))] == ["fla_naive"]


def test_missing_peers_are_rows_that_say_how_to_install(tmp_path):
    names = ["fla", "fla_naive", "far_torch", "fast_attnres", "fast_attnres_mq"]
    impls, _ = peer_implementations(names, str(tmp_path / "absent"), 1e-6, torch.float32)
    assert impls == dict.fromkeys(names, NOT_INSTALLED)
    assert "scripts/setup_peers.sh" in NOT_INSTALLED
    rows = case_rows(impls, (2, 4, 16), case_inputs(2, 4, 16, torch.float32, "cpu"), timer("cpu", "cpu"),
                     parse_args(["--device", "cpu"]), torch.float32, copy_gbps=10.0)
    assert [r["unavailable"] for r in rows] == [NOT_INSTALLED] * len(names)


def test_defaults_per_device_and_bad_lists_refused(capsys):
    args = parse_args(["--device", "cpu"])
    assert args.impls == CPU_IMPLS.split(",") and args.dtype == "float32" and args.hidden == [256, 1024]
    assert "fla" not in args.impls and "far_triton" not in args.impls  # CPU: the PyTorch paths of all three
    gpu = parse_args(["--device", "cuda"])
    assert 7168 in gpu.hidden and {"fla", "far_triton", "attnres_triton", "fast_attnres"} <= set(gpu.impls)
    assert "fast_attnres" not in args.impls  # CUDA BF16 only: it has no CPU path to time
    with pytest.raises(SystemExit):
        parse_args(["--device", "cpu", "--hidden", "64,x"])
    assert "--hidden: comma-separated integers" in capsys.readouterr().err
