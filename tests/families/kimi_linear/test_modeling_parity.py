"""The model against the independent K3 pseudo-code loop, and standard mode against transformers' Kimi Linear."""
import pytest
import torch
from transformers import KimiLinearConfig, KimiLinearForCausalLM

from hf_attnres.utils.tiny import tiny_config
from tests.helpers.model_factory import random_ids, tiny_model
from tests.helpers.reference_loop import assert_matches_reference, reference_logits

# (mode, block size, layers): S=1, S not dividing L, S dividing L, S == L, S > L, full
CASES = [("block", 1, 5), ("block", 2, 5), ("block", 3, 6), ("block", 5, 5), ("block", 8, 5), ("full", 0, 5)]


@pytest.mark.parametrize("mode,block_size,layers", CASES)
def test_matches_reference_loop_fp32(mode, block_size, layers):
    assert_matches_reference(tiny_model(mode, block_size, layers), random_ids(), layers)


@pytest.mark.parametrize("mode,block_size,layers", [("block", 2, 5), ("full", 0, 5)])
def test_matches_reference_loop_bf16(mode, block_size, layers):
    model = tiny_model(mode, block_size, layers, dtype=torch.bfloat16)
    ids = random_ids()
    with torch.no_grad():
        got = model(ids, use_cache=False).logits.float()
        want = reference_logits(model, ids)[0].float()
    # identical op order in bf16: differences only from kernel-level rounding choices
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_attn_res_changes_the_output():
    """Guard against a vacuous parity: block mode with trained-looking queries differs from standard residuals."""
    ids = random_ids()
    block = tiny_model("block", 2)
    standard = tiny_model("standard")
    standard.load_state_dict(block.state_dict(), strict=False)
    with torch.no_grad():
        assert not torch.allclose(block(ids).logits, standard(ids).logits, atol=1e-3)


def test_standard_is_kimi_linear_bit_for_bit():
    ours = tiny_model("standard")
    config = ours.config.to_dict()
    for key in ("attn_res_mode", "attn_res_block_size", "attn_res_backend", "model_type", "auto_map", "architectures"):
        config.pop(key, None)
    theirs = KimiLinearForCausalLM(KimiLinearConfig(**config)).eval()
    assert set(theirs.state_dict()) == set(ours.state_dict())  # same tensor names, no extra parameters
    theirs.load_state_dict(ours.state_dict())
    ids = random_ids()
    with torch.no_grad():
        a = ours(ids, output_hidden_states=True)
        b = theirs(ids, output_hidden_states=True)
    assert torch.equal(a.logits, b.logits)
    assert len(a.hidden_states) == len(b.hidden_states)
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert torch.equal(x, y)


def test_parameter_names_follow_k3():
    model = tiny_model("block", 2, 5)
    names = {n for n, _ in model.named_parameters()}
    for i in range(5):
        for point in ("self_attention", "mlp"):
            assert f"model.layers.{i}.{point}_res_norm.weight" in names
            assert dict(model.named_parameters())[f"model.layers.{i}.{point}_res_proj.weight"].shape == (1, 64)
    assert {"model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight"} <= names
    standard = tiny_model("standard")
    assert not [n for n, _ in standard.named_parameters() if "_res_" in n]
    # every other name is Kimi Linear's
    base = {n for n in names if "_res_" not in n}
    assert base == {n for n, _ in standard.named_parameters()}


def test_init_is_uniform_depth_softmax():
    from hf_attnres import KimiLinearAttnResForCausalLM

    model = KimiLinearAttnResForCausalLM(tiny_config("full", family="kimi_linear"))
    for name, param in model.named_parameters():
        if "_res_proj" in name:
            assert torch.count_nonzero(param) == 0, name
        elif "_res_norm" in name:
            assert torch.all(param == 1), name
    with torch.no_grad():
        weights = model(random_ids(), output_attn_res_weights=True).attn_res_weights
    for w in weights:
        torch.testing.assert_close(w, torch.full_like(w, 1.0 / w.shape[-1]))


@pytest.mark.parametrize("block_size,layers", [(2, 5), (1, 4), (3, 7)])
def test_block_mode_keeps_at_most_n_plus_one_sources(block_size, layers):
    model = tiny_model("block", block_size, layers)
    seen = []
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_pre_hook(lambda mod, args, i=i: seen.append((i, len(args))))
    with torch.no_grad():
        model(random_ids(), use_cache=False)
    num_blocks = -(-layers // block_size)
    for i, count in seen:
        # layer i > 0 reads the embedding, the sealed block sums and the running sum of the latest block
        assert count == (2 + (i - 1) // block_size if i else 1)
        assert count <= num_blocks + 1
