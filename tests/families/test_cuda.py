"""The CUDA lane: every family of the registry on the GPU, its Triton backend against its torch backend (the
PyTorch reference mix) with trained-looking (random) pseudo-queries: logits, the gradients of a bf16 autocast
training step, greedy `generate` with the family's cache against recomputation, torch.compile(fullgraph=True), and
gradient checkpointing; and standard mode equal to transformers' own model on the GPU, bit for bit. Kimi Linear runs
its MLA layers (its KDA layers need flash-linear-attention, which the lane does not assume)."""
import pytest
import torch

import hf_attnres  # noqa: F401  (registers the Auto classes)
from hf_attnres.families.registry import SUPPORTED
from tests.families.tiny import FAMILIES, attn_res_model, random_ids, source_model
from tests.helpers.cuda_lane import CUDA_LANE
from tests.helpers.model_factory import perturb_attn_res, tiny_model

pytestmark = CUDA_LANE

REGISTRY = sorted(SUPPORTED)


def family_model(family: str, backend: str, mode: str = "block", seed: int = 0):
    """A tiny model of the family on the GPU, the given mix backend, random queries and key-norm gains."""
    if family == "kimi_linear":
        model = tiny_model(mode, 2, num_layers=5, seed=seed, layer_types=["full_attention"] * 5,
                           attn_res_backend=backend)
    else:
        model = attn_res_model(family, mode=mode, seed=seed, attn_res_backend=backend)
    return perturb_attn_res(model, scale=0.5).cuda()


def ids_for(model, batch: int = 2, seq: int = 9):
    return torch.randint(3, min(model.config.vocab_size, 96), (batch, seq),
                         generator=torch.Generator().manual_seed(1)).cuda()


def test_the_lane_covers_the_registry():
    assert set(REGISTRY) == set(FAMILIES) | {"kimi_linear"}


@pytest.mark.parametrize("mode", ["block", "full"])
@pytest.mark.parametrize("family", REGISTRY)
def test_triton_logits_equal_torch_backend(family, mode):
    triton, torch_backend = (family_model(family, b, mode).eval() for b in ("triton", "torch"))
    ids = ids_for(triton)
    with torch.no_grad():
        torch.testing.assert_close(triton(ids).logits, torch_backend(ids).logits, rtol=1e-4, atol=1e-4)


def _bf16_step_grads(model, ids):
    model.train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(ids, labels=ids).loss
    loss.backward()
    return loss.detach().float(), {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", REGISTRY)
def test_bf16_autocast_train_step_gradients_equal_torch_backend(family):
    triton, torch_backend = (family_model(family, b) for b in ("triton", "torch"))
    ids = ids_for(triton)
    loss, grads = _bf16_step_grads(triton, ids)
    ref_loss, ref_grads = _bf16_step_grads(torch_backend, ids)
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=2e-2)
    assert grads.keys() == ref_grads.keys() and any("_res_proj" in n for n in grads)
    for name, grad in grads.items():
        ref = ref_grads[name]
        scale = ref.abs().max().item()
        assert (grad - ref).abs().max().item() <= 5e-2 * scale + 1e-3, name  # bf16 autocast: a few ulps


@pytest.mark.parametrize("family", REGISTRY)
def test_generate_with_the_cache_equals_recomputation(family):
    model = family_model(family, "triton").eval()
    ids = ids_for(model, batch=1, seq=5)
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        cached = model.generate(ids, use_cache=True, **kwargs)
        recomputed = model.generate(ids, use_cache=False, **kwargs)
    assert torch.equal(cached, recomputed)


# every family captured whole (aot_eager: the graph and its autograd, no code generation); inductor's Triton code
# generation, minutes for six models, once on Llama and once on Kimi Linear
COMPILE_CASES = [(f, "aot_eager") for f in REGISTRY] + [("llama", "inductor"), ("kimi_linear", "inductor")]


@pytest.mark.parametrize("family, backend", COMPILE_CASES)
def test_compiles_in_one_graph_on_cuda(family, backend):
    model = family_model(family, "triton").eval()
    ids = ids_for(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)  # any graph break fails
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, use_cache=False).logits, model(ids, use_cache=False).logits,
                                   rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("family", REGISTRY)
def test_gradient_checkpointing_gives_the_same_gradients_on_cuda(family):
    grads = []
    for checkpointing in (False, True):
        model = family_model(family, "triton", seed=4).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        ids = ids_for(model)
        model(ids, labels=ids).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_standard_mode_is_the_family_model_on_cuda(family):
    source = source_model(family).cuda()
    model = attn_res_model(family, mode="standard").cuda().eval()
    model.load_state_dict(source.state_dict())
    ids = random_ids().cuda()
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).logits, source(ids, attention_mask=mask).logits)
