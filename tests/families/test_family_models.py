"""Every supported family with AttnRes, on tiny random models: standard mode is the family's own model (bit for bit),
Auto classes, save / load, generation with the family's cache, gradient checkpointing, torch.compile(fullgraph=True),
PEFT LoRA on the pseudo-queries, and the config's checks."""
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import hf_attnres  # noqa: F401  (registers the Auto classes)
from hf_attnres.families.registry import family_classes
from tests.families.tiny import FAMILIES, attn_res_config, attn_res_model, random_ids, source_model
from tests.helpers.cache import cache_of

FAMILY_NAMES = sorted(FAMILIES)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_standard_mode_is_the_family_model_bit_for_bit(family):
    source = source_model(family)
    model = attn_res_model(family, mode="standard")
    model.load_state_dict(source.state_dict())  # strict: the same tensors, the same names
    ids = random_ids()
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    with torch.no_grad():
        expected = source(ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask).logits
    assert torch.equal(got, expected)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_attn_res_tensors_have_k3_names_and_start_uniform(family):
    model = attn_res_model(family, mode="block", block_size=2)
    names = {name for name, _ in model.named_parameters() if "_res_" in name}
    layers = model.config.num_hidden_layers
    expected = {f"model.layers.{i}.{point}_res_{part}.weight" for i in range(layers)
                for point in ("self_attention", "mlp") for part in ("norm", "proj")}
    expected |= {"model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight"}
    assert names == expected
    state = model.state_dict()
    assert all(state[n].eq(0).all() for n in names if n.endswith("_proj.weight"))
    assert all(state[n].eq(1).all() for n in names if n.endswith("_norm.weight"))


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("mode", ["block", "full"])
def test_save_and_auto_load_give_the_same_logits(family, mode, tmp_path):
    model = attn_res_model(family, mode=mode)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "_res_proj" in name:
                parameter.normal_(std=0.5)  # trained-looking queries: a non-uniform mix must survive the round trip
    model.save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert config.model_type == model.config.model_type and config.attn_res_mode == mode
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    ids = random_ids()
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("mode", ["block", "full"])
def test_greedy_generation_with_the_family_cache_equals_recomputation(family, mode):
    model = attn_res_model(family, mode=mode, seed=3)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "_res_proj" in name:
                parameter.normal_(std=0.5)
    ids = random_ids(batch=1, seq=5)
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        cached = model.generate(ids, use_cache=True, **kwargs)
        recomputed = model.generate(ids, use_cache=False, **kwargs)
        # and the cached decode's last logits equal a full forward over the whole sequence
        full = model(cached[:, :-1]).logits[:, -1]
        step = model(cached[:, :-2], use_cache=True)
        last = model(cached[:, -2:-1], cache=cache_of(step), use_cache=True).logits[:, -1]
    assert torch.equal(cached, recomputed)
    torch.testing.assert_close(last, full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_gradient_checkpointing_gives_the_same_gradients(family):
    ids = random_ids()
    grads = []
    for checkpointing in (False, True):
        model = attn_res_model(family, mode="block", seed=4).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model(ids, labels=ids).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert any("_res_proj" in name for name in grads[1])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_compiles_in_one_graph(family):
    model = attn_res_model(family, mode="block", block_size=2)
    ids = random_ids()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")  # fullgraph: any graph break fails
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, use_cache=False).logits, model(ids, use_cache=False).logits)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_peft_lora_on_the_pseudo_queries_trains_them(family):
    peft = pytest.importorskip("peft")
    model = attn_res_model(family, mode="block")
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=r".*_res_proj"))
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("_res_proj" in n and "lora_" in n for n in trainable)
    ids = random_ids()
    lora(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for n, p in lora.named_parameters() if "lora_B" in n]
    assert grads and any(g is not None and g.abs().sum() > 0 for g in grads)  # the adapter's delta joins the mix


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize(("fields", "named"), [
    (dict(attn_res_mode="blocky"), "attn_res_mode"),
    (dict(attn_res_block_size=-1), "attn_res_block_size"),
    (dict(attn_res_block_size=2.5), "attn_res_block_size"),
    (dict(attn_res_backend="cuda"), "attn_res_backend"),
    (dict(attn_res_fuse_norm="no"), "attn_res_fuse_norm"),
    (dict(attn_res_key_norm_init=float("nan")), "attn_res_key_norm_init"),
])
def test_bad_attn_res_fields_are_refused_by_name(family, fields, named):
    with pytest.raises(ValueError, match=named):
        attn_res_config(family, **fields)


def test_block_mode_without_a_block_size_is_refused():
    config_class, _ = family_classes("llama")
    with pytest.raises(ValueError, match="attn_res_block_size must be >= 1 in block mode"):
        config_class(attn_res_mode="block")


def test_gemma3_bidirectional_attention_is_refused():
    with pytest.raises(ValueError, match="use_bidirectional_attention"):
        attn_res_config("gemma3_text", use_bidirectional_attention=True)


def test_phi3_residual_dropouts_in_training_are_phi3s_bit_for_bit():
    """Phi-3 drops out each sub-layer's output before the residual add: in standard mode, training, the AttnRes model
    draws the same masks in the same order, so its logits equal Phi-3's; the dropout does act (eval differs)."""
    source = source_model("phi3", resid_pdrop=0.5).train()
    model = attn_res_model("phi3", mode="standard", resid_pdrop=0.5).train()
    model.load_state_dict(source.state_dict())
    ids = random_ids()
    torch.manual_seed(11)
    expected = source(ids).logits
    torch.manual_seed(11)
    assert torch.equal(model(ids).logits, expected)
    with torch.no_grad():
        assert not torch.allclose(model.eval()(ids).logits, expected, atol=1e-3)
