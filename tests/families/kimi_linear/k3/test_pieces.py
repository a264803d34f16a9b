"""Kimi K3's pieces, each against a plain PyTorch reference written from its formula
(hf_attnres/families/kimi_linear/k3)."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearAttention, KimiLinearDeltaAttention

import tests.helpers.k3_reference as k3_reference
from hf_attnres.conversion.kimi_linear.k3_fixtures import quantize, tiny_k3_config
from hf_attnres.families.kimi_linear.k3 import mxfp4
from hf_attnres.families.kimi_linear.k3.activation import K3Experts, SiTUMLP, situ_glu
from hf_attnres.families.kimi_linear.k3.attention import BoundedForgetGate, GatedMLA, K3DeltaAttention
from hf_attnres.families.kimi_linear.k3.moe import LatentMoE

BETA, LINEAR_BETA = 4.0, 25.0


def close(actual, expected, **kwargs):
    """fp32 against a float64 reference: agreement to fp32 rounding of a few chained matmuls."""
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=1e-4, atol=1e-4, **kwargs)


def randomize(module, seed=0, scale=0.3):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * scale)
        for buffer in module.buffers():
            buffer.copy_(torch.randn(buffer.shape, generator=generator) * scale)
    return module


def situ_reference(gate, up, beta=BETA, linear_beta=LINEAR_BETA):
    return k3_reference.situ(gate, up, beta, linear_beta)


def test_situ_glu_matches_formula_where_the_clipping_bites():
    gate, up = torch.randn(64, 32) * 8, torch.randn(64, 32) * 60  # beyond +-4 and +-25
    torch.testing.assert_close(situ_glu(gate, up, BETA, LINEAR_BETA), situ_reference(gate, up).float())
    assert not torch.allclose(situ_glu(gate, up, BETA, LINEAR_BETA), F.silu(gate) * up, atol=1.0)  # not a SwiGLU
    # bf16 in: computed in fp32, rounded once
    low = situ_glu(gate.bfloat16(), up.bfloat16(), BETA, LINEAR_BETA)
    assert low.dtype == torch.bfloat16
    assert torch.equal(low, situ_reference(gate.bfloat16(), up.bfloat16()).float().bfloat16())
    # no linear beta: the up half is used as is
    torch.testing.assert_close(situ_glu(gate, up, BETA, None),
                               (BETA * torch.tanh(gate / BETA) * torch.sigmoid(gate) * up))


def test_situ_mlp_and_experts_match_reference():
    config = tiny_k3_config()
    x = torch.randn(2, 5, config.hidden_size) * 3
    mlp = randomize(SiTUMLP(config))
    close(mlp(x), k3_reference.situ_mlp(x, mlp, config))
    experts = randomize(K3Experts(config, 32))
    tokens = torch.randn(6, 32) * 3
    index = torch.tensor([[0, 1], [1, 3], [2, 0], [3, 2], [0, 3], [1, 2]])
    weights = torch.rand(6, 2)
    expected = torch.zeros(6, 32)
    for t in range(6):
        for k in range(2):
            e = index[t, k]
            gate, up = F.linear(tokens[t], experts.gate_up_proj[e]).chunk(2)
            expected[t] += weights[t, k] * F.linear(situ_reference(gate, up).float(), experts.down_proj[e])
    for implementation in ("eager", "grouped_mm", "batched_mm"):
        config._experts_implementation = implementation
        close(experts(tokens, index, weights), expected, msg=implementation)


@pytest.mark.parametrize("use_norm", [True, False])
def test_latent_moe_matches_reference(use_norm):
    config = tiny_k3_config(latent_moe_use_norm=use_norm, n_group=2, topk_group=1, routed_scaling_factor=2.5)
    moe = randomize(LatentMoE(config)).eval()
    x = torch.randn(2, 5, config.hidden_size)
    expected = k3_reference.latent_moe(x, moe, config)
    close(moe(x), expected)
    assert hasattr(moe, "routed_expert_norm") == use_norm


def test_mla_output_gate_matches_reference():
    config = tiny_k3_config()
    gated = randomize(GatedMLA(config, layer_idx=1))
    plain = KimiLinearAttention(config, layer_idx=1)
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.startswith("g_proj")})
    plain.o_proj = nn.Identity()  # the attention output before o_proj
    x = torch.randn(2, 6, config.hidden_size)
    mask = torch.full((6, 6), float("-inf")).triu(1)[None, None]
    core = plain(x, mask)[0]
    expected = F.linear(core * torch.sigmoid(F.linear(x, gated.g_proj.weight)), gated.o_proj.weight)
    close(gated(x, mask)[0], expected)
    assert gated.o_proj.gate is None  # consumed by the call: no state leaks into the next one


def test_bounded_forget_gate_matches_formula_and_bounds():
    config = tiny_k3_config()
    gate = randomize(BoundedForgetGate(config), scale=2.0)
    x = torch.randn(2, 7, config.hidden_size) * 3
    f = (x @ gate.f_a_proj.weight.T @ gate.f_b_proj.weight.T + gate.dt_bias).view(2, 7, config.linear_num_heads, -1)
    expected = -5.0 * torch.sigmoid(gate.A_log.view(1, 1, -1, 1).exp() * f)
    g = gate(x)
    torch.testing.assert_close(g, expected)
    assert g.min() >= -5.0 and g.max() <= 0.0
    assert not torch.allclose(g, KimiLinearDeltaAttention(config, 0).forget_gate.__class__.forward(gate, x))


def kda_pair(**overrides):
    """K3's KDA and transformers' KDA holding the same weights, the latter's gates set to the formulas by hand."""
    config = tiny_k3_config(**overrides)
    k3 = randomize(K3DeltaAttention(config, layer_idx=0), scale=0.5)
    plain = KimiLinearDeltaAttention(config, layer_idx=0)
    plain.load_state_dict({k: v for k, v in k3.state_dict().items() if not k.startswith("g_proj")}, strict=False)
    plain.activation = "silu"
    if config.linear_use_full_rank_gate:
        plain.g_a_proj, plain.g_b_proj = nn.Identity(), nn.Linear(config.hidden_size, k3.qkv_dim, bias=False)
        plain.g_b_proj.weight = k3.g_proj.weight
    if config.linear_gate_lower_bound is not None:
        fg = k3.forget_gate
        plain.forget_gate.forward = lambda x: -5.0 * torch.sigmoid(
            fg.A_log.view(1, 1, -1, 1).exp()
            * (F.linear(F.linear(x, fg.f_a_proj.weight), fg.f_b_proj.weight) + fg.dt_bias)
            .view(*x.shape[:2], -1, k3.head_dim)
        )
    return config, k3, plain


def test_kda_full_rank_gate_and_lower_bound_match_reference():
    config, k3, plain = kda_pair()
    assert "g_a_proj.weight" not in k3.state_dict() and "g_proj.weight" in k3.state_dict()
    x = torch.randn(1, 9, config.hidden_size)
    close(k3(x), plain(x))


def test_kda_lower_bound_holds_in_chunked_and_recurrent_paths():
    """Prefill runs transformers' chunked KDA, each decode step its recurrent KDA: both read the bounded gate."""
    from transformers.cache_utils import DynamicCache

    config, k3, plain = kda_pair(linear_use_full_rank_gate=False)
    x = torch.randn(1, 8, config.hidden_size)
    whole = k3(x)
    close(whole, plain(x))
    cache = DynamicCache(config=config)
    steps = [k3(x[:, :4], cache_params=cache)]
    steps += [k3(x[:, i : i + 1], cache_params=cache) for i in range(4, 8)]
    close(torch.cat(steps, dim=1), whole)


def e2m1_reference(code: int) -> float:
    """E2M1 from its bits: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal."""
    sign = -1.0 if code & 8 else 1.0
    exponent, mantissa = (code >> 1) & 3, code & 1
    return sign * (mantissa * 0.5 if exponent == 0 else (1 + mantissa * 0.5) * 2.0 ** (exponent - 1))


def test_mxfp4_dequantize_matches_bitwise_reference():
    generator = torch.Generator().manual_seed(0)
    packed = torch.randint(0, 256, (3, 32), dtype=torch.uint8, generator=generator)
    packed[0, :8] = torch.arange(0, 256, 32, dtype=torch.uint8) | torch.arange(8, dtype=torch.uint8)  # every code
    scale = torch.tensor([[0, 127], [120, 134], [254, 1]], dtype=torch.uint8)
    expected = torch.empty(3, 64, dtype=torch.float64)
    for o in range(3):
        for i in range(64):
            byte = int(packed[o, i // 2])
            code = byte & 15 if i % 2 == 0 else byte >> 4
            expected[o, i] = e2m1_reference(code) * 2.0 ** (int(scale[o, i // 32]) - 127)
    torch.testing.assert_close(mxfp4.dequantize(packed, scale, torch.float64), expected, rtol=0, atol=0)
    assert torch.equal(mxfp4.dequantize(packed[1:2], scale[1:2]).double(), expected[1:2])  # bf16 holds them exactly
    codes, exps = quantize(mxfp4.dequantize(packed[1:2], scale[1:2], torch.float32))
    assert torch.equal(mxfp4.dequantize(codes, exps), mxfp4.dequantize(packed[1:2], scale[1:2]))


@pytest.mark.parametrize("packed_shape, scale_shape, dtype, message", [
    ((4, 16), (4, 2), torch.uint8, r"weight_scale is \[4, 2\], expected \[4, 1\]"),
    ((4, 15), (4, 1), torch.uint8, r"expected \[4, 0\]"),
    ((4, 16), (4, 1), torch.int32, "must be uint8"),
    ((64,), (2,), torch.uint8, "must be 2-D"),
])
def test_mxfp4_bad_shapes_are_named(packed_shape, scale_shape, dtype, message):
    with pytest.raises(ValueError, match=message):
        mxfp4.dequantize(torch.zeros(packed_shape, dtype=dtype), torch.zeros(scale_shape, dtype=torch.uint8))


def test_quantization_config_other_than_k3_mxfp4_is_refused():
    mxfp4.check_quantization_config({"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"})
    with pytest.raises(ValueError, match="num_bits=8"):
        mxfp4.check_quantization_config({"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
                                         "config_groups": {"g": {"weights": {"num_bits": 8}}}})
    with pytest.raises(ValueError, match="quant_method='fp8'"):
        mxfp4.check_quantization_config({"quant_method": "fp8", "format": "mxfp4-pack-quantized"})
