"""The kernelizable depth mix (kernels/mix/depth_mix.py) and the package's fused layer mapped to it
(kernels/mix/layers.py): the module's own forward (what a saved folder runs where no kernel is mapped) against the
reference, forward and every gradient through autograd; the mapping binding the fused C++ kernel, through the `kernels`
library where it is installed and through the package's own binding where it is not."""
import pytest
import torch
from torch import nn

import hf_attnres.kernels.mix as mix_ops
from hf_attnres.kernels.mix import layers, lean_ops
from hf_attnres.kernels.mix.depth_mix import LAYER_NAME, AttnResDepthMix
from tests.helpers.kernel_cases import make_inputs, run


@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("n,fused", [(1, False), (3, True), (5, False)])
def test_the_modules_own_forward_and_its_gradients_match_the_reference(n, fused, stacked, monkeypatch):
    """The forward a folder runs where no kernel is mapped: autograd differentiates it (no custom backward)."""
    monkeypatch.setattr(lean_ops, "SMALL_SOURCE_NUMEL", 10**9 if stacked else 0)
    sources, query, norm_weight, out_norm_weight = make_inputs(n, 48, torch.float32)
    inputs = [*sources, query, norm_weight] + ([out_norm_weight] if fused else [])
    out = AttnResDepthMix()(sources, query, norm_weight, 1e-6, False, out_norm_weight if fused else None, 1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    grads = torch.autograd.grad(out, inputs, grad)
    ref_out, ref_grads = run("reference", sources, query, norm_weight, out_norm_weight, fused)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_the_module_takes_the_points_linear_weight_and_returns_the_weights():
    sources, query, norm_weight, _ = make_inputs(3, 32, torch.float32)
    mixed, weights = AttnResDepthMix()(sources, query[None], norm_weight, 1e-6, True)
    torch.testing.assert_close(mixed, mix_ops.attn_res_naive(sources, query, norm_weight, 1e-6))
    assert weights.shape == (*sources[0].shape[:-1], 3)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


class Holder(nn.Module):
    """A model of one depth mix and one parameter (kernelize finds the device from the parameters)."""

    def __init__(self):
        super().__init__()
        self.mix = AttnResDepthMix()
        self.weight = nn.Parameter(torch.ones(1))


@pytest.mark.parametrize("with_kernels", [True, False])
def test_kernelize_model_binds_the_fused_cpu_kernel_and_the_backend_still_decides(with_kernels, monkeypatch):
    if with_kernels and not layers.KERNELS_AVAILABLE:
        pytest.skip("the `kernels` library is not installed (transformers 5.25 installs it)")
    monkeypatch.setattr(layers, "KERNELS_AVAILABLE", with_kernels)
    served = []
    fused = mix_ops.CPU_KERNEL["run"]
    monkeypatch.setitem(mix_ops.CPU_KERNEL, "run", lambda *a, **k: served.append("cpp") or fused(*a, **k))
    holder = Holder()
    sources, query, norm_weight, _ = make_inputs(3, 32, torch.float32)
    with torch.no_grad():
        plain = holder.mix(sources, query, norm_weight, 1e-6)
        assert served == []  # nothing bound: the module's own (lean) forward
        layers.kernelize_model(holder)
        kernelized = holder.mix(sources, query, norm_weight, 1e-6)
        assert served == ["cpp"]
        torch.testing.assert_close(kernelized, plain, rtol=1e-5, atol=1e-5)
        holder.mix(sources, query, norm_weight, 1e-6, False, None, 1e-6, "torch")
        assert served == ["cpp"]  # backend "torch": the fused layer takes the lean path


def test_the_mapping_names_the_fused_layer_for_cpu_and_cuda():
    mapping = layers.kernel_mapping()
    assert set(mapping) == {LAYER_NAME} and set(mapping[LAYER_NAME]) == {"cpu", "cuda"}
    for repository in mapping[LAYER_NAME].values():
        assert repository.load() is layers.FusedDepthMix and repository == layers.InstalledLayer(layers.FusedDepthMix)
