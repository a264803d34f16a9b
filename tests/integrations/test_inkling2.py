"""transformers' own Inkling-2 (`inkling2`, transformers >= 5.23) and looped Inkling-2 (`inkling2_loop`, >= 5.25) on
the Inkling kernels through `hf_attnres.integrations.inkling2.use_attnres_kernels`, against the same model on
transformers' own forward: logits, every parameter's gradient of a training step (the queries included) and cached
greedy `generate` (tokens and per-step scores), in fp32, on tiny random text configs whose queries are drawn at
random (transformers initialises them to zero: a uniform mix would hide the scores). Tolerances: fp32 1e-5 logits,
1e-4 of each gradient's scale."""
import copy

import pytest
import torch

from hf_attnres.integrations.inkling2 import restore, use_attnres_kernels
from hf_attnres.kernels.mix import inkling_cpu

inkling2 = pytest.importorskip("transformers.models.inkling2.modeling_inkling2",
                               reason="transformers' Inkling-2 needs transformers >= 5.23")
try:
    from transformers.models.inkling2_loop import modeling_inkling2_loop as inkling2_loop
except ImportError:
    inkling2_loop = None
NEEDS_LOOP = pytest.mark.skipif(inkling2_loop is None, reason="inkling2_loop needs transformers >= 5.25")

SMALL = dict(vocab_size=128, unpadded_vocab_size=120, hidden_size=64, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=16,
             sliding_window_size=8, d_rel=4, rel_extent=16, moe_intermediate_size=32, n_routed_experts=4,
             num_experts_per_tok=2, n_layers_per_attn_res_block=2, max_position_embeddings=256, eos_token_id=None,
             # two full-attention layers (three queries at their input), in different blocks
             layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid_sliding", "hybrid", "hybrid_sliding"])
LOOP = dict(loop_layer_index_start=2, loop_layer_index_end=4, loop_num_passes=2, loop_gate_rank=8)


def tiny(kind: str):
    torch.manual_seed(0)
    if kind == "inkling2":
        model = inkling2.Inkling2ForCausalLM(inkling2.Inkling2TextConfig(**SMALL))
    else:
        model = inkling2_loop.Inkling2LoopForCausalLM(inkling2_loop.Inkling2LoopTextConfig(**SMALL, **LOOP))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("_input.query"):
                parameter.normal_(0, 0.5)
    return model.eval()


def pair(kind: str):
    """(transformers' own model, the same weights on the kernels)."""
    model = tiny(kind)
    fused = copy.deepcopy(model)
    use_attnres_kernels(fused)
    return model, fused


KINDS = ["inkling2", pytest.param("inkling2_loop", marks=NEEDS_LOOP)]


@pytest.mark.parametrize("kind", KINDS)
def test_the_swap_covers_every_depth_mix_and_the_kernel_serves_them(kind, monkeypatch):
    model, fused = pair(kind)
    mixes = [m for m in fused.modules() if "AttentionResidual" in type(m).__name__]
    assert mixes and all("attnres_backend" in vars(m) for m in mixes)
    assert {tuple(m.query.shape[-2:]) for m in mixes if m.query.dim() > 1} == (
        {(3, 64)} if kind == "inkling2" else {(3, 64), (4, 64)})  # three at full attention, four per loop message
    served = []
    run = inkling_cpu.attn_res_inkling_cpu
    monkeypatch.setattr(inkling_cpu, "attn_res_inkling_cpu", lambda *a, **k: served.append(1) or run(*a, **k))
    with torch.no_grad():
        fused(torch.randint(0, 120, (1, 6)))
    assert len(served) >= len(mixes), (len(served), len(mixes))  # loop layers' mixes run once per pass


@pytest.mark.parametrize("backend", ["auto", "triton"])  # Triton under the CPU interpreter (tests/conftest.py)
@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_transformers(kind, backend):
    model, fused = pair(kind)
    use_attnres_kernels(fused, backend=backend)
    ids = torch.randint(0, 120, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(fused(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_training_step_has_transformers_gradients(kind):
    model, fused = pair(kind)
    ids = torch.randint(0, 120, (2, 12))
    losses = {}
    for name, m in (("own", model), ("kernels", fused)):
        m.train()
        losses[name] = m(ids, labels=ids).loss
        losses[name].backward()
    torch.testing.assert_close(losses["kernels"], losses["own"], rtol=1e-5, atol=1e-5)
    own = dict(model.named_parameters())
    checked = 0
    for name, parameter in fused.named_parameters():
        want = own[name].grad
        if want is None:
            assert parameter.grad is None, name
            continue
        scale = want.abs().max().clamp(min=1e-6)
        assert ((parameter.grad - want).abs().max() / scale) <= 1e-4, name
        checked += name.endswith(".query")
    assert checked >= 2 * SMALL["num_hidden_layers"], checked


@pytest.mark.parametrize("kind", KINDS)
def test_cached_generate_equals_transformers(kind):
    model, fused = pair(kind)
    ids = torch.randint(0, 120, (2, 7))
    runs = [m.generate(ids, max_new_tokens=6, do_sample=False, use_cache=True, return_dict_in_generate=True,
                       output_scores=True, pad_token_id=0) for m in (model, fused)]
    assert torch.equal(runs[1].sequences, runs[0].sequences)
    for got, want in zip(runs[1].scores, runs[0].scores):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_restore_puts_transformers_forward_back_and_a_model_without_mixes_is_refused():
    model, fused = pair("inkling2")
    assert restore(fused) == sum("AttentionResidual" in type(m).__name__ for m in fused.modules())
    assert not any("forward" in vars(m) for m in fused.modules() if "AttentionResidual" in type(m).__name__)
    with pytest.raises(ValueError, match="no Inkling-2 depth mix"):
        use_attnres_kernels(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="backend"):
        use_attnres_kernels(model, backend="cuda")


def test_the_weights_are_untouched():
    model, fused = pair("inkling2")
    state = fused.state_dict()
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
