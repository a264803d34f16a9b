"""The PyTorch path (kernels/mix/lean.py, kernels/two_phase/lean.py) against the reference (naive.py): forward, every
gradient, fp32 and bf16, what autograd keeps, torch.compile, the model in training (block and full mode) and the
two-phase schedule's grown bank (phases, prefill, chunked prefill, decode).

Tolerances: fp32 1e-5 (forward) / 1e-4 (gradients), as the Triton kernel: the lean path computes a score as
r * (v . w) where the reference sums (v * r) * w, and it accumulates the mix source by source, so results differ by fp32
reassociation only. bf16: the forward within one bf16 ulp (both compute in fp32 and round once at the end, so only a
value straddling a rounding boundary can differ), gradients at most 2x the reference's own error against float64.
"""
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

import attnres.kernels.mix as mix_ops
from attnres.depth_layout import DepthBank
from attnres.kernels.mix import attn_res, attn_res_naive, lean, rms_norm_naive
from attnres.kernels.two_phase import phase1, phase1_naive
from tests.helpers.kernel_cases import bf16_ulps, make_inputs, run
from tests.helpers.model_factory import random_ids, tiny_model


@pytest.fixture(params=["loop", "stacked"])
def forward_path(request, monkeypatch):
    """The lean forward's two schedules: source by source (large inputs), or stacked (decode-sized inputs)."""
    monkeypatch.setattr(lean, "SMALL_SOURCE_NUMEL", 0 if request.param == "loop" else 10**9)
    return request.param


@pytest.mark.parametrize("n,fused", [(1, False), (2, True), (5, False), (7, True)])
def test_fp32_forward_and_every_gradient_match_reference(n, fused, forward_path):
    inputs = make_inputs(n, 96, torch.float32)
    out, grads = run("torch", *inputs, fused)
    ref_out, ref_grads = run("reference", *inputs, fused)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    assert len(grads) == n + 2 + fused
    for i, (got, want) in enumerate(zip(grads, ref_grads)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m: f"input {i}: {m}")


@pytest.mark.parametrize("n,fused", [(2, True), (5, False)])
def test_bf16_within_one_ulp_and_gradients_as_accurate_as_reference(n, fused, forward_path):
    inputs = make_inputs(n, 64, torch.bfloat16)
    out, grads = run("torch", *inputs, fused)
    ref_out, ref_grads = run("reference", *inputs, fused)
    exact_out, exact_grads = run("reference", *inputs, fused, upcast=True)
    assert out.dtype == torch.bfloat16
    sources, query, norm_weight, _ = inputs
    mixed = attn_res(sources, query, norm_weight, 1e-6, backend="torch")
    assert bf16_ulps(mixed, attn_res_naive(sources, query, norm_weight, 1e-6)) <= 1
    assert bf16_ulps(out, ref_out) <= 3  # the fused norm: a 1-ulp different mix moves the normalised product
    for i, (got, ref, exact) in enumerate(zip(grads, ref_grads, exact_grads)):
        assert got.dtype == ref.dtype, i
        scale = exact.abs().max().item()
        error, reference_error = (got.double() - exact).abs().max().item(), (ref.double() - exact).abs().max().item()
        assert error <= 2 * reference_error + 2**-7 * scale, (i, error, reference_error, scale)


def test_no_grad_forward_is_bit_identical_to_training_forward(forward_path):
    sources, query, norm_weight, out_norm = make_inputs(5, 64, torch.float32)
    train = attn_res(sources, query, norm_weight, 1e-6, backend="torch", out_norm_weight=out_norm)
    with torch.no_grad():
        infer = attn_res(sources, query, norm_weight, 1e-6, backend="torch", out_norm_weight=out_norm)
    assert train.requires_grad and torch.equal(train, infer)


def test_weights_and_stacked_sources_match_reference():
    sources, query, norm_weight, out_norm = make_inputs(4, 48, torch.float32)
    mixed, probs = attn_res(sources, query, norm_weight, 1e-6, return_weights=True, backend="torch",
                            out_norm_weight=out_norm, out_norm_eps=1e-5)
    ref_mixed, ref_probs = attn_res_naive(sources, query, norm_weight, 1e-6, return_weights=True)
    torch.testing.assert_close(mixed, rms_norm_naive(ref_mixed, out_norm, 1e-5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs, ref_probs, rtol=1e-5, atol=1e-6)
    assert probs.shape == (2, 5, 4) and not probs.requires_grad
    stacked = torch.stack([s.detach() for s in sources])
    torch.testing.assert_close(attn_res(stacked, query, norm_weight, 1e-6, backend="torch"), ref_mixed)


def test_autograd_keeps_the_sources_by_reference_and_per_token_statistics_only(forward_path):
    n, tokens, hidden = 6, 10, 64
    sources, query, norm_weight, out_norm = make_inputs(n, hidden, torch.float32)
    source_ptrs = {s.data_ptr() for s in sources}
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn_res(sources, query, norm_weight, 1e-6, backend="torch", out_norm_weight=out_norm, out_norm_eps=1e-5)
    new = [t for t in saved if t.data_ptr() not in source_ptrs]
    assert {t.data_ptr() for t in saved} >= source_ptrs  # the sources themselves, not copies
    # beside them: the three parameters and r, s, p ([n, tokens] each); the reference keeps n * tokens * hidden
    assert sum(t.numel() for t in new) == 3 * hidden + 3 * n * tokens, [tuple(t.shape) for t in new]


def test_compiled_training_mix_is_one_graph_with_the_same_gradients():
    torch._dynamo.reset()
    counters.clear()
    sources, query, norm_weight, out_norm = make_inputs(3, 64, torch.float32)
    params = [*sources, query, norm_weight, out_norm]

    def step(*sources):
        out = attn_res(list(sources), query, norm_weight, 1e-6, backend="torch", out_norm_weight=out_norm)
        return (out * out).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break raises
    for _ in range(2):
        loss = compiled(*sources)
        grads = torch.autograd.grad(loss, params)
    want = torch.autograd.grad(step(*sources), params)
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got, ref)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"]


def use_reference_mix(monkeypatch, calls):
    def reference(sources, query, norm_weight, eps, return_weights=False, out_norm_weight=None, out_norm_eps=1e-6):
        calls.append(len(sources))
        result = attn_res_naive(sources, query, norm_weight, eps, return_weights=return_weights)
        mixed, probs = result if return_weights else (result, None)
        if out_norm_weight is not None:
            mixed = rms_norm_naive(mixed, out_norm_weight, out_norm_eps)
        return (mixed, probs) if return_weights else mixed

    monkeypatch.setattr(mix_ops, "attn_res_lean", reference)


@pytest.mark.parametrize("mode,block_size", [("block", 2), ("full", 0)])
def test_model_training_step_equals_reference_mix(mode, block_size, monkeypatch):
    """Loss and every parameter's gradient; full mode: the growing tuple of sources is read in place at every mix."""
    model = tiny_model(mode, block_size, num_layers=4, attn_res_backend="torch").train()  # the eager path
    ids = random_ids(seq=8)

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids, use_cache=False).loss
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads()
    calls = []
    use_reference_mix(monkeypatch, calls)
    ref_loss, ref_grads = loss_and_grads()
    assert len(calls) == 8  # every mix point but the first (one source: no mix) ran the reference
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and any("_res_proj" in name for name in grads)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grown_bank_phase1_equals_reference_phase1(dtype):
    g = torch.Generator().manual_seed(0)
    bank = [(torch.randn(2, 3, 48, generator=g) * (1 + j)).to(dtype) for j in range(4)]
    queries, norms = 0.4 * torch.randn(5, 48, generator=g), 1 + 0.2 * torch.randn(5, 48, generator=g)
    depth_bank = DepthBank(capacity=4, eps=1e-6)
    for size in range(1, 5):  # grown one source per block, as the schedule does; Phase 1 at every size
        depth_bank.extend(bank[:size])
        out, lse = phase1(depth_bank, queries, norms, 1e-6, backend="torch")
        ref_out, ref_lse = phase1_naive(bank[:size], queries, norms, 1e-6)
        assert out.shape == (5, 2, 3, 48) and lse.shape == (5, 2, 3)
        torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="depth bank holds 4 sources, got 5"):
        depth_bank.extend([*bank, bank[0]])


def test_two_phase_chunked_prefill_and_decode_equal_plain_loop():
    """Two-phase on the PyTorch path (bank grown per forward) vs the plain per-point mix: chunked prefill, decode."""
    ids = random_ids(batch=2, seq=9)
    logits = {}
    for enabled in (True, False):
        model = tiny_model("block", 2, num_layers=5)
        model.config.attn_res_two_phase = enabled
        with torch.no_grad():
            prefill = model(ids[:, :8], use_cache=True, prefill_chunk_size=3)
            step = model(ids[:, 8:], past_key_values=prefill.past_key_values, use_cache=True)
        logits[enabled] = (prefill.logits, step.logits)
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-4, atol=1e-4)


def test_a_source_without_gradient_leaves_the_other_gradients_exact():
    sources, query, norm_weight, _ = make_inputs(3, 64, torch.float32, shape=(4, 40))  # the loop path
    frozen = [sources[0].detach(), *sources[1:]]
    out = attn_res(frozen, query, norm_weight, 1e-6, backend="torch")
    ref = attn_res_naive(frozen, query, norm_weight, 1e-6)
    grads = torch.autograd.grad(out.square().sum(), [*sources[1:], query])
    ref_grads = torch.autograd.grad(ref.square().sum(), [*sources[1:], query])
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
