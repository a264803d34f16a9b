#!/usr/bin/env bash
# Everything to run once a CUDA GPU is available (issue 12 / docs/BENCHMARKS.md "To be measured on a GPU"), in one go:
#   1. CUDA parity: the Triton kernels and the PyTorch paths (lean mix, grown two-phase bank) against the reference
#      on the GPU, forward and every gradient, fp32 and bf16 (the CPU suite runs Triton only in its interpreter)
#   2. kernel benchmark (scripts/bench_kernels.py, GPU defaults) with the peers beside ours (issue 21): fla-core 0.6.0
#      (fused_attnres, naive_attnres) and flash-attn-res 0.1.12 (its phase-1 Triton op, its experimental/torch.py
#      functions), each checked against our reference before it is timed. The peers come from scripts/setup_peers.sh:
#      it needs PyPI once, or a copy of its cached folder (~6 MB) placed at $ATTNRES_PEERS on a machine without network.
#      Without them their rows say "not installed" and the rest still runs. The peers' torch.compile'd functions
#      compile in mode max-autotune-no-cudagraphs per shape, as shipped: expect minutes of compilation in this step.
#   3. model benchmarks side by side (scripts/bench_model.py): standard / block / full, Triton and PyTorch backends
# Results land in ${OUT:-bench_gpu}/ (JSON per benchmark, a log per step). Usage: bash scripts/bench_gpu.sh [outdir]
# Optional: BENCH_KERNEL_IMPLS (a subset of bench_kernels' --impls), BENCH_REPEATS, BENCH_STEP_TIMEOUT (s per step)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-bench_gpu}}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TRITON_INTERPRET=0 HF_HUB_OFFLINE=1
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'bench_gpu.sh: no CUDA device, nothing run')"
mkdir -p "$out"

echo "== 1. CUDA parity" | tee "$out/parity.log"
# (a failed check is reported and the benchmarks still run; the script exits 1 at the end)
parity=0
timeout "${BENCH_STEP_TIMEOUT:-0}" python3 - <<'EOF' 2>&1 | tee -a "$out/parity.log" || parity=1
import torch
from hf_attnres.kernels.mix import attn_res, attn_res_naive, rms_norm_naive
from hf_attnres.kernels.two_phase import phase1, phase1_naive

def run(impl, sources, query, norm, out_norm):
    params = [t.detach().clone().requires_grad_() for t in (*sources, query, norm, out_norm)]
    n = len(sources)
    if impl == "reference":
        out = rms_norm_naive(attn_res_naive(params[:n], params[n], params[n + 1], 1e-6), params[-1], 1e-5)
    else:
        out = attn_res(params[:n], params[n], params[n + 1], 1e-6, backend=impl, out_norm_weight=params[-1],
                       out_norm_eps=1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator(out.device).manual_seed(1), device=out.device)
    return [out, *torch.autograd.grad(out, params, grad.to(out.dtype))]

failed = 0
for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
    for n in (2, 5, 9):
        g = torch.Generator("cuda").manual_seed(n)
        sources = [torch.randn(4, 512, 1024, device="cuda", generator=g).to(dtype) * (1 + j) for j in range(n)]
        query = 0.3 * torch.randn(1024, device="cuda", generator=g)
        norm = 1 + 0.2 * torch.randn(1024, device="cuda", generator=g)
        out_norm = (1 + 0.2 * torch.randn(1024, device="cuda", generator=g)).to(dtype)
        want = run("reference", sources, query, norm, out_norm)
        for impl in ("triton", "torch"):
            got = run(impl, sources, query, norm, out_norm)
            err = max(((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()
                      for a, b in zip(got, want))
            ok = err <= tol
            failed += not ok
            print(f"mix {impl:6} {str(dtype):14} n={n}: max relative error {err:.2e} {'ok' if ok else 'FAIL'}")
        queries, norms = 0.3 * torch.randn(7, 1024, device="cuda", generator=g), norm.expand(7, -1)
        for backend in ("triton", "torch"):
            out, lse = phase1(sources, queries, norms, 1e-6, backend=backend)
            ref_out, ref_lse = phase1_naive(sources, queries, norms, 1e-6)
            err = ((out - ref_out).abs().max() / ref_out.abs().max()).item()
            failed += err > 1e-4
            print(f"phase1 {backend:6} {str(dtype):14} n={n}: max relative error {err:.2e} {'ok' if err <= 1e-4 else 'FAIL'}")

# whole models: every family's AttnRes model (tiny, fp32) with the Triton backend against the PyTorch one on the GPU
from tests.families.tiny import FAMILIES, attn_res_model, random_ids
for family in FAMILIES:
    for mode in ("block", "full"):
        logits = {}
        for backend in ("torch", "triton"):
            model = attn_res_model(family, mode, attn_res_backend=backend).cuda()
            with torch.no_grad():
                logits[backend] = model(random_ids().cuda()).logits
        err = ((logits["triton"] - logits["torch"]).abs().max() / logits["torch"].abs().max()).item()
        failed += err > 1e-4
        print(f"model {family:12} {mode:5} triton vs torch: max relative logit error {err:.2e} "
              f"{'ok' if err <= 1e-4 else 'FAIL'}")
raise SystemExit(f"{failed} CUDA parity checks failed" if failed else 0)
EOF

echo "== 2. kernels, ours and the peers" | tee "$out/kernels.log"
peers="$(bash scripts/setup_peers.sh 2>>"$out/kernels.log")" || peers="${ATTNRES_PEERS:-$HOME/.cache/attnres/peers}"
# exit 1 means a MISMATCH against the reference (rows marked in the JSON): reported, and the models still run
# BENCH_KERNEL_IMPLS: a subset of --impls (the torch.compile'd ones compile per shape for minutes)
timeout "${BENCH_STEP_TIMEOUT:-0}" python3 scripts/bench_kernels.py --device cuda --peers-path "$peers" ${BENCH_KERNEL_IMPLS:+--impls "$BENCH_KERNEL_IMPLS"} \
  ${BENCH_REPEATS:+--repeats "$BENCH_REPEATS"} --output "$out/bench_kernels.json" 2>&1 \
  | tee -a "$out/kernels.log" || echo "!! kernels: a mismatch or a failure, see $out/kernels.log" | tee -a "$out/kernels.log"

echo "== 3. models" | tee "$out/models.log"
for backend in triton torch; do
  timeout "${BENCH_STEP_TIMEOUT:-0}" python3 scripts/bench_model.py --device cuda --dtype bfloat16 --attention mla --hidden 2048 --layers 24 \
    --block-size 4 --batch 4 --seq 4096 --phases train,prefill,decode --repeats "${BENCH_REPEATS:-10}" --backend "$backend" \
    --modes standard,block,full,block_two_phase --output "$out/bench_model_$backend.json" 2>&1 | tee -a "$out/models.log" \
    || echo "!! models ($backend): a failure or the step's time limit, see $out/models.log" | tee -a "$out/models.log"
done
echo "results in $out/"
[ "$parity" = 0 ] || { echo "!! CUDA parity: a check failed, see $out/parity.log"; exit 1; }
