"""The paper's ablations (config switches): the model against the reference loop written from their definitions,
their tensors, their validation, and that they really change the mix."""
import pytest
import torch

from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.core.depth_layout import DepthLayout
from hf_attnres.kernels.mix.naive import attn_res_naive
from hf_attnres.kernels.mix.variants import attn_res_variant
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.model_factory import random_ids, tiny_model
from tests.helpers.reference_loop import assert_matches_reference

ABLATIONS = {
    "static": dict(attn_res_static_mixing=True),
    "sigmoid": dict(attn_res_score="sigmoid"),
    "no_key_norm": dict(attn_res_key_norm=False),
    "sigmoid_no_key_norm": dict(attn_res_score="sigmoid", attn_res_key_norm=False),
    "static_sigmoid": dict(attn_res_static_mixing=True, attn_res_score="sigmoid"),
}
SHAPES = [("block", 2, 5), ("block", 3, 6), ("full", 0, 4)]


def ablated_model(mode, block_size, layers, **switches):
    model = tiny_model(mode, block_size, layers, **switches)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # static logits away from their zero init, so the weights are not uniform
        for name, param in model.named_parameters():
            if "_res_logits" in name:
                param.copy_(torch.randn(param.shape, generator=generator))
    return model


@pytest.mark.parametrize("mode,block_size,layers", SHAPES)
@pytest.mark.parametrize("ablation", list(ABLATIONS))
def test_ablation_matches_reference_loop_fp32(ablation, mode, block_size, layers):
    model = ablated_model(mode, block_size, layers, **ABLATIONS[ablation])
    assert_matches_reference(model, random_ids(), layers, weights_atol=1e-6)


@pytest.mark.parametrize("ablation", list(ABLATIONS))
def test_ablation_changes_the_model(ablation):
    """Guard against a vacuous parity: the same weights give other logits than the default mix."""
    ids = random_ids()
    default = tiny_model("block", 2, 5)
    ablated = ablated_model("block", 2, 5, **ABLATIONS[ablation])
    default.load_state_dict(ablated.state_dict(), strict=False)
    with torch.no_grad():
        assert not torch.allclose(default(ids).logits, ablated(ids).logits, atol=1e-4)


def test_variant_op_definitions():
    sources = torch.randn(4, 2, 3, 8)
    query, gain = torch.randn(8), 1 + 0.1 * torch.randn(8)
    # softmax + key norm through the variant op is the default mix
    torch.testing.assert_close(attn_res_variant(sources, query, gain, 1e-6), attn_res_naive(sources, query, gain, 1e-6))
    # sigmoid: independent gates, not normalised over the sources
    _, probs = attn_res_variant(sources, query, gain, 1e-6, score="sigmoid", return_weights=True)
    assert not torch.allclose(probs.sum(-1), torch.ones(2, 3))
    assert torch.all((probs > 0) & (probs < 1))
    # static: the same weights at every token
    logits = torch.tensor([0.0, 1.0, -1.0, 2.0])
    mixed, probs = attn_res_variant(sources, logits=logits, return_weights=True)
    torch.testing.assert_close(probs, logits.softmax(0).expand(2, 3, 4))
    torch.testing.assert_close(mixed, (logits.softmax(0).view(4, 1, 1, 1) * sources).sum(0))
    # no key norm: the scale of a source changes its score
    _, raw = attn_res_variant(sources * 3, query, None, return_weights=True)
    _, normed = attn_res_variant(sources * 3, query, gain, 1e-6, return_weights=True)
    assert not torch.allclose(raw, normed)
    with pytest.raises(ValueError, match="one entry per source"):
        attn_res_variant(sources, logits=torch.zeros(3))
    with pytest.raises(ValueError, match="score"):
        attn_res_variant(sources, query, gain, 1e-6, score="tanh")


@pytest.mark.parametrize("mode,block_size,layers", [("block", 2, 5), ("block", 4, 5), ("full", 0, 3)])
def test_static_logits_have_one_entry_per_source(mode, block_size, layers):
    model = KimiLinearAttnResForCausalLM(tiny_config(mode, block_size, layers, attn_res_static_mixing=True,
        family="kimi_linear"))
    params = dict(model.named_parameters())
    assert not [n for n in params if "_res_proj" in n or "_res_norm" in n]
    ids = random_ids(batch=1, seq=4)
    out = model(ids, output_attn_res_weights=True)
    names = [f"model.layers.{i}.{p}_res_logits.weight" for i in range(layers) for p in ("self_attention", "mlp")]
    for name, weights in zip(names + ["model.output_attn_res_logits.weight"], out.attn_res_weights):
        assert params[name].shape == (weights.shape[-1],), name
    out.logits.sum().backward()
    assert params["model.output_attn_res_logits.weight"].grad.abs().sum() > 0  # they train


def test_num_sources_counts():
    config = tiny_config("block", 3, 7, family="kimi_linear")
    assert [DepthLayout.of(config).num_sources(i, "self_attention") for i in range(7)] == [1, 2, 2, 2, 3, 3, 3]
    assert [DepthLayout.of(config).num_sources(i, "mlp") for i in range(7)] == [2, 2, 2, 3, 3, 3, 4]
    assert DepthLayout.of(config).num_sources(7, "output_attn") == 4
    full = tiny_config("full", 0, 3, family="kimi_linear")
    assert ([DepthLayout.of(full).num_sources(i, p) for i in range(3) for p in ("self_attention", "mlp")]
            == [1, 2, 3, 4, 5, 6])


def test_no_key_norm_drops_the_norm_tensors():
    model = KimiLinearAttnResForCausalLM(tiny_config("block", 2, 3, attn_res_key_norm=False, family="kimi_linear"))
    names = {n for n, _ in model.named_parameters()}
    assert "model.layers.1.mlp_res_proj.weight" in names and not [n for n in names if "_res_norm" in n]


@pytest.mark.parametrize("fields,message", [
    (dict(attn_res_score="tanh"), "attn_res_score"),
    (dict(attn_res_static_mixing="yes"), "attn_res_static_mixing"),
    (dict(attn_res_key_norm=0), "attn_res_key_norm"),
    (dict(attn_res_mode="standard", attn_res_score="sigmoid"), "attn_res_mode"),
    (dict(attn_res_static_mixing=True, attn_res_key_norm=False), "attn_res_key_norm"),
    (dict(attn_res_score="sigmoid", attn_res_backend="triton"), "attn_res_backend"),
    (dict(attn_res_score="sigmoid", attn_res_two_phase=True), "attn_res_two_phase"),
])
def test_bad_ablation_fields_raise_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config("block", 2, 3, **fields, family="kimi_linear")


def test_forced_triton_env_refuses_an_ablation(monkeypatch):
    model = tiny_model("block", 2, 3, attn_res_score="sigmoid")
    monkeypatch.setenv("ATTNRES_BACKEND", "triton")
    with pytest.raises(ValueError, match="do not implement the ablations"):
        model(random_ids())


def test_default_config_is_not_an_ablation():
    config = tiny_config("block", 2, 3, family="kimi_linear")
    assert not config.attn_res_ablation
    assert (config.attn_res_static_mixing, config.attn_res_score, config.attn_res_key_norm) == (False, "softmax", True)


def test_ablation_round_trips_through_save_pretrained(tmp_path):
    model = ablated_model("block", 2, 3, attn_res_static_mixing=True, attn_res_score="sigmoid")
    model.save_pretrained(tmp_path)
    loaded = KimiLinearAttnResForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.attn_res_static_mixing and loaded.config.attn_res_score == "sigmoid"
    ids = random_ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def test_ablation_cached_greedy_equals_recomputation():
    from tests.helpers.model_factory import greedy_without_cache

    model = ablated_model("block", 2, 5, attn_res_static_mixing=True, attn_res_score="sigmoid")
    ids = random_ids(batch=2, seq=7)
    cached = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(cached, greedy_without_cache(model, ids, 4))
