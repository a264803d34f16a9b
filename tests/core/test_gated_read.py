"""The gated depth read (`hf_attnres.core.gated_read`, upcycle mode "gated"): exact at init for every family, a
non-zero gradient at init where Block's key norms have none, the model path equal to the plain PyTorch reference
(`gated_read_naive`), its config checks, and no trace of it in the other modes."""
import pytest
import torch

import hf_attnres
from hf_attnres.core.mix_point import MixSettings
from hf_attnres.families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.families.upcycle import UPCYCLE_MODES, UpcycleError
from hf_attnres.kernels.mix.naive import gated_read_naive
from hf_attnres.utils.tiny import tiny_config
from tests.families.tiny import FAMILIES, attn_res_model, random_ids, source_model
from tests.helpers.model_factory import perturb_attn_res
from tests.helpers.remote_loading import load_all_in_clean_process
from tests.helpers.tolerance import assert_logits_close

ALL_FAMILIES = [*sorted(FAMILIES), "kimi_linear"]


def standard_source(family: str):
    """A standard-residual model of `family`: the family's own (Kimi Linear: its AttnRes class in standard mode)."""
    if family == "kimi_linear":
        torch.manual_seed(0)
        return KimiLinearAttnResForCausalLM(tiny_config("standard", 0, 4, vocab_size=96, family="kimi_linear")).eval()
    return source_model(family)


def gated_model(family: str):
    """A gated-read model of `family` with its queries, key norms and gates off their start (no mix an average)."""
    if family == "kimi_linear":
        torch.manual_seed(0)
        config = tiny_config("block", 2, 4, vocab_size=96, family="kimi_linear", attn_res_gated_read=True)
        return perturb_attn_res(KimiLinearAttnResForCausalLM(config)).eval()
    return perturb_attn_res(attn_res_model(family, "block", 2, attn_res_gated_read=True))


def depth_grads(model, ids, kind: str) -> dict:
    """The gradient of every AttnRes tensor of `kind` (`_res_gate`, `_res_proj`, `_res_norm`) on a loss on `ids`."""
    model.train()
    model.zero_grad()
    model(ids, labels=ids).loss.backward()
    return {name: p.grad for name, p in model.named_parameters() if kind in name}


def nonzero(grads: dict) -> list[bool]:
    return [g is not None and bool(g.abs().max() > 0) for g in grads.values()]


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_the_gated_upcycle_computes_the_source_function(family):
    """The gate at zero reads the standard stream itself: the logits equal the source's to the rounding of summing
    the depth sources in another order (no epsilon is scaled, unlike Block's h / n)."""
    source = standard_source(family)
    model = hf_attnres.upcycle(source, "gated", 2)
    assert model.config.attn_res_mode == "block" and model.config.attn_res_gated_read is True
    gates = [p for name, p in model.named_parameters() if name.endswith("_res_gate.weight")]
    assert len(gates) == 2 * source.config.num_hidden_layers + 1 and all(not g.any() for g in gates)
    ids = random_ids(batch=2, seq=12)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    with torch.no_grad():
        expected = source(ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5 * float(expected.abs().max()))


@pytest.mark.parametrize(("mode", "block_size"), [("full", 0), ("block", 1), ("block", 3)])
def test_a_zero_gate_reads_the_standard_stream_in_every_layout(mode, block_size):
    """The read at a zero gate is the sum of the sources whatever the layout (Full's sources, one block per layer, one
    block of every layer): the model with random queries and key norms computes its standard-mode twin's function."""
    model = perturb_attn_res(attn_res_model("llama", mode, block_size, attn_res_gated_read=True))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("_res_gate.weight"):
                parameter.zero_()
    standard = attn_res_model("llama", "standard")
    standard.load_state_dict(model.state_dict(), strict=False)
    ids = random_ids()
    with torch.no_grad():
        expected = standard(ids).logits
        torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=1e-5 * float(expected.abs().max()))


def test_a_bf16_upcycle_reads_the_stream_to_bf16_rounding():
    source = source_model("qwen2").to(torch.bfloat16)
    model = hf_attnres.upcycle(source, "gated", 2)
    ids = random_ids()
    with torch.no_grad():
        expected = source(ids).logits.float()
        got = model(ids).logits.float()
    assert float((got - expected).abs().max()) <= 0.02 * float(expected.abs().max())


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_the_gates_learn_at_step_one_where_blocks_key_norms_do_not(family):
    """At init every gate's gradient is non-zero (dL/dgate = dL/dx * mix, and the mix is the sources' mean), while a
    Block upcycle's key norms have an exactly zero gradient (a zero query multiplies them). After one SGD step on
    the gates, the gated model's queries have a gradient too (at step 0 the zero gate hides them)."""
    source, ids = standard_source(family), random_ids(batch=2, seq=12)
    gated = hf_attnres.upcycle(source, "gated", 2)
    gates = depth_grads(gated, ids, "_res_gate")
    assert gates and all(nonzero(gates)), family
    assert not any(nonzero(depth_grads(gated, ids, "_res_proj")))  # behind the zero gate at step 0
    block_key_norms = depth_grads(hf_attnres.upcycle(source, "block", 2), ids, "_res_norm")
    assert block_key_norms and not any(nonzero(block_key_norms))
    with torch.no_grad():
        for name, parameter in gated.named_parameters():
            if name in gates:
                parameter.sub_(0.1 * gates[name].sign())
    assert any(nonzero(depth_grads(gated, ids, "_res_proj"))), family


@pytest.mark.parametrize("family", ["llama", "kimi_linear"])
@pytest.mark.parametrize("num_sources", [1, 2, 4])
def test_a_mix_point_equals_the_reference(family, num_sources):
    """The model's read at a point (its kernelizable mix, the stream, the gate) against `gated_read_naive`."""
    model = gated_model(family)
    layer = model.model.layers[1]
    generator = torch.Generator().manual_seed(num_sources)
    sources = tuple(torch.randn(2, 5, model.config.hidden_size, generator=generator) for _ in range(num_sources))
    weights = []
    with torch.no_grad():
        got = layer.mix("mlp", sources, weights, None, settings=MixSettings.of(model.config))
    norm = layer.mlp_res_norm
    expected = gated_read_naive(sources, layer.mlp_res_proj.weight[0], norm.weight, norm.variance_epsilon,
                                layer.mlp_res_gate.weight)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert weights[0].shape == (2, 5, num_sources)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, 5))


def test_the_reference_reads_the_stream_at_a_zero_gate_and_adds_the_gated_mix():
    generator = torch.Generator().manual_seed(0)
    sources = torch.randn(3, 4, 8, generator=generator)
    query, norm = torch.randn(8, generator=generator), 1 + torch.rand(8, generator=generator)
    assert torch.equal(gated_read_naive(sources, query, norm, 1e-6, torch.zeros(8)), sources.sum(0))
    gate = torch.randn(8, generator=generator)
    probs = ((sources * torch.rsqrt(sources.pow(2).mean(-1, keepdim=True) + 1e-6)) * (norm * query)).sum(-1)
    mixed = (probs.softmax(0).unsqueeze(-1) * sources).sum(0)
    torch.testing.assert_close(gated_read_naive(sources, query, norm, 1e-6, gate), sources.sum(0) + gate * mixed)


def test_every_family_gated_folder_loads_and_generates_without_the_package(tmp_path):
    """A saved gated folder of every family, in a fresh process where attnres and triton cannot be imported: the
    package model's logits and tokens, and its cached generation equal to recomputation."""
    ids, folders, expected = random_ids(), [], []
    for family in ALL_FAMILIES:
        model = gated_model(family)
        model.save_pretrained(tmp_path / family)
        folders.append(tmp_path / family)
        with torch.no_grad():
            expected.append((model(ids).logits, model.generate(ids, max_new_tokens=4, do_sample=False,
                                                               pad_token_id=0), model.config))
    results = load_all_in_clean_process(folders, ids, tmp_path / "run", tmp_path / "hf", generate=4, recompute=True)
    for folder, result, (logits, generated, config) in zip(folders, results, expected):
        assert_logits_close(result["logits"], logits, config, msg=lambda m, f=folder: f"{f}: {m}")
        assert torch.equal(result["generated"], generated), folder.name
        assert torch.equal(result["generated"], result["recomputed"]), folder.name


@pytest.mark.parametrize(("fields", "named"), [
    (dict(attn_res_gated_read="yes"), "attn_res_gated_read must be True or False"),
    (dict(attn_res_gated_read=None), "attn_res_gated_read must be True or False"),
    (dict(attn_res_gated_read=True, attn_res_mode="standard"), "needs attn_res_mode 'block' or 'full'"),
    (dict(attn_res_gated_read=True, attn_res_static_mixing=True), "does not combine with the ablations"),
    (dict(attn_res_gated_read=True, attn_res_score="sigmoid"), "does not combine with the ablations"),
    (dict(attn_res_gated_read=True, attn_res_two_phase=True), "attn_res_two_phase must be None or False"),
])
def test_bad_gated_read_configs_are_refused_naming_the_field(fields, named):
    mode = fields.pop("attn_res_mode", "block")
    with pytest.raises(ValueError, match=named) as refused:
        tiny_config(mode, 2 if mode == "block" else 0, 3, family="llama", **fields)
    assert "\n" not in str(refused.value)


def test_gated_is_an_upcycle_mode_with_blocks_block_size():
    assert "gated" in UPCYCLE_MODES
    source = source_model("llama")
    assert hf_attnres.upcycle(source, "gated").config.attn_res_block_size >= 1
    with pytest.raises(UpcycleError, match="block_size must be an integer >= 1"):
        hf_attnres.upcycle(source, "gated", 0)
    with pytest.raises(UpcycleError, match="mode must be one of .*'gated'"):
        hf_attnres.upcycle(source, "gate")


@pytest.mark.parametrize("mode", ["block", "full"])
def test_the_other_modes_have_no_gate_and_no_gated_flag(mode):
    """The gated read costs the other modes nothing: no tensor, and the mix settings' one flag stays off."""
    model = hf_attnres.upcycle(source_model("qwen2"), mode)
    assert not [name for name in model.state_dict() if "_res_gate" in name]
    settings = MixSettings.of(model.config)
    assert not settings.gated and not settings.ablation
    assert "attn_res_gated_read" not in model.config.to_diff_dict() or not model.config.attn_res_gated_read
