"""Every family of the registry (Kimi Linear's own: tests/families/kimi_linear/test_modeling_parity.py) against the
independent reference loop (tests/helpers/reference_loop.py) with random pseudo-queries: the mix weights are far from
uniform, so a wrong source, order or block boundary changes the logits. The negative control: the same weights run
as a plain standard residual stream miss the tolerance by far, so the check can fail."""
import pytest
import torch

from tests.families.tiny import FAMILIES, attn_res_model, random_ids
from tests.helpers.reference_loop import RotarySublayers, assert_matches_reference, reference_logits

FAMILY_NAMES = sorted(FAMILIES)
# (mode, block size): blocks of 1, blocks not dividing the 4 layers, one block, full
CASES = [("block", 1), ("block", 3), ("block", 4), ("full", 0)]
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # assert_matches_reference's


def random_queries(model, seed: int = 7, std: float = 1.0):
    """Pseudo-queries and key-norm gains drawn at random: every mix weighs its sources unevenly."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "_res_proj" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
            elif "_res_norm" in name:
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return model


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize(("mode", "block_size"), CASES)
def test_matches_the_reference_loop_with_random_queries(family, mode, block_size):
    model = random_queries(attn_res_model(family, mode=mode, block_size=block_size))
    ids = random_ids()
    assert_matches_reference(model, ids, model.config.num_hidden_layers, sublayers=RotarySublayers)
    with torch.no_grad():
        got = model(ids, use_cache=False).logits
        standard, _ = reference_logits(model, ids, RotarySublayers, mode="standard")
    # negative control: a plain residual stream over the same weights is far outside the tolerance
    assert (got - standard).abs().max() > 100 * (TOLERANCE["atol"] + TOLERANCE["rtol"] * standard.abs().max())
