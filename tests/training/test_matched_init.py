"""A matched pair starts matched: with one seed, every weight a standard, block and full model share is identical
(the AttnRes modules draw nothing from the random stream), so a comparison differs only by the residual."""
import pytest
import torch

from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.utils.tiny import tiny_config


def build(mode: str, **overrides) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return KimiLinearAttnResForCausalLM(tiny_config(mode, 2, 4, **overrides, family="kimi_linear")).state_dict()


@pytest.mark.parametrize("overrides", [{}, {"attn_res_static_mixing": True}], ids=["default", "static-mixing"])
@pytest.mark.parametrize("mode", ["block", "full"])
def test_shared_weights_are_identical_across_modes(mode, overrides):
    standard, attnres = build("standard"), build(mode, **overrides)
    shared = [name for name in standard if name in attnres]
    assert len(shared) == len(standard)  # AttnRes only adds tensors
    assert [name for name in shared if not torch.equal(standard[name], attnres[name])] == []
    extra = [name for name in attnres if name not in standard]
    assert extra and all("_res_" in name for name in extra)
    # and the AttnRes tensors start where K3 does: zero queries / logits, unit key-norm gains
    assert all(not attnres[n].any() for n in extra if n.endswith(("_res_proj.weight", "_res_logits.weight")))
    assert all(bool((attnres[n] == 1).all()) for n in extra if n.endswith("_res_norm.weight"))
