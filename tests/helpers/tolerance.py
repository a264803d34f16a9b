"""How closely two computations of a model's logits must agree when they are not bit-identical by construction, and the
negative controls that show such a tolerance still catches a real change.

Bit-exact comparisons (`torch.equal`) are right only where exactness holds by construction: the same machine, the same
inputs and the same kernel execute the same floating-point operations in the same order. Logits recorded on another
CPU, or computed by another kernel (the package's fused C++ mix against a saved folder's plain-PyTorch path), are
compared with `logits_atol` instead.

The rounding argument. Floating-point addition is not associative, and every reduction's order is chosen by the
machine: SIMD width (8 lanes with AVX2, 16 with AVX-512), FMA contraction, GEMM blocking (AMX tiles), and the C++ mix
kernel is built with `-march=native`. Reordering one reduction moves its result by a few units in the last place
(ulp: eps(dtype) relative) of the magnitude it reaches. A decoder layer is a fixed chain of such reductions (norms,
projections, attention, MLP, the depth softmax) whose output is added into the depth sources; to first order the
layers' errors add, so after `depth` stages the hidden state is off by about c * eps * depth relative to its size, and
the final RMSNorm and head carry that relative error to the logits: |delta| <~ c * eps * depth * max|logits|.

c measured on the tiny models of every family, as max |delta| / (eps * depth * max|logits|): about 0.5 for the logits
recorded on an AMD EPYC (AVX-512) and recomputed on an Intel AMX machine; 2.8 for the fused C++ mix against the
plain-PyTorch mix on that AMX machine; 6.5 at most between the AVX-512 recording and torch's scalar kernels
(ATEN_CPU_CAPABILITY=default, MKL at SSE4.2, the C++ kernel built for baseline x86-64; there even the weights drawn from
the seed differ by a few ulps), the most distant pair of reduction orders at hand. ULPS_PER_STAGE = 32 covers that
worst case 5 times over (18% of the tolerance; the AMX machine's differences are at most 9% of it).

A negative control must exceed the tolerance NEGATIVE_CONTROL_MARGIN times, so a tolerance looser than (the control's
change / margin) fails it. Measured on the same models: one flipped bit in one weight (the lowest mantissa bit a
bfloat16 keeps, a relative change of 2^-8 to 2^-7) moves the logits by 89 to 1000 tolerances, a dropped depth source by
over 12000: a tolerance 9 times looser than this one would already fail the weakest control.
"""
import contextlib

import torch

from hf_attnres.core.mix_point import AttnResMixing

ULPS_PER_STAGE = 32
NEGATIVE_CONTROL_MARGIN = 10
BFLOAT16_LAST_BIT = 1 << 16  # fp32's bit 16: the lowest of the 7 mantissa bits a bfloat16 keeps


def cross_machine_atol(dtype: torch.dtype, depth: int, scale: float) -> float:
    """The absolute tolerance for a result of `dtype` after `depth` sequential stages of reductions, each of whose
    order may differ between machines or kernels, at magnitude `scale` (the module docstring's argument)."""
    return ULPS_PER_STAGE * torch.finfo(dtype).eps * depth * float(scale)


def logits_depth(config) -> int:
    """The stages between the embedding and the logits: each decoder layer, then the output mix, final norm and head."""
    return config.num_hidden_layers + 1


def logits_atol(config, reference: torch.Tensor) -> float:
    """`cross_machine_atol` for a model's logits, at the magnitude of the `reference` logits."""
    return cross_machine_atol(reference.dtype, logits_depth(config), reference.abs().max())


def assert_logits_close(actual: torch.Tensor, expected: torch.Tensor, config, msg=None) -> None:
    """`actual` agrees with `expected` to the rounding of another reduction order (rtol 0: the error scales with the
    largest logit, not with each one's own size)."""
    atol = logits_atol(config, expected)
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol, msg=msg)


def assert_caught(changed: torch.Tensor, expected: torch.Tensor, config, what: str) -> None:
    """A negative control: `changed` (the logits after a real change) differs from `expected` by at least
    NEGATIVE_CONTROL_MARGIN times the tolerance `assert_logits_close` grants."""
    atol = logits_atol(config, expected)
    difference = (changed - expected).abs().max().item()
    assert difference >= NEGATIVE_CONTROL_MARGIN * atol, (
        f"{what}: changed the logits by {difference:.3g}, under {NEGATIVE_CONTROL_MARGIN} x the tolerance {atol:.3g}")


@contextlib.contextmanager
def flipped_bit(model):
    """One weight with one bit flipped: the largest element of the output mix's pseudo-query (every family has it, in
    block and full mode), its lowest bfloat16 mantissa bit. Restored on exit."""
    query = model.get_decoder().output_attn_res_proj.weight
    index = query.detach().abs().argmax()
    with torch.no_grad():
        bits = query.detach().view(-1).view(torch.int32)  # the same storage, read as its bits
        bits[index] ^= BFLOAT16_LAST_BIT
        try:
            yield
        finally:
            bits[index] ^= BFLOAT16_LAST_BIT


@contextlib.contextmanager
def dropped_depth_source():
    """Every model's output mix reads its depth sources without the first one (the embedding): the wiring bug of a
    source lost on its way. Restored on exit."""
    mix = AttnResMixing.mix

    def dropping(self, point, sources, weights, out_norm=None, schedule=None, settings=None):
        if point == "output_attn" and len(sources) > 1:
            sources, schedule = sources[1:], None  # mixed directly: the two-phase schedule knows every source
        return mix(self, point, sources, weights, out_norm, schedule, settings)

    AttnResMixing.mix = dropping
    try:
        yield
    finally:
        AttnResMixing.mix = mix
